# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vllm_container_differences: the container the vllm role made, read back from `docker container
inspect`, is found the same; any option that differs (or cannot be judged) is named."""

from __future__ import annotations

import copy
import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.vllm import vllm_container_differences

IMAGE_ID = "sha256:" + "a" * 64
REF = "vllm/vllm-openai:v0.19.1-cu130"
ARGV = ["/model", "--served-model-name", "qwen3.5-35b", "--port", "8000", "--enforce-eager"]
SPEC = {
    "container": "vllm",
    "argv": ARGV,
    "model": {"dir": "/srv/models/Qwen3.5-35B-A3B-FP8"},
    "options": {
        "network_mode": "host", "published_ports": [], "model_path": "/model", "runtime": "nvidia",
        "gpus_all": True, "shm_size": "16g", "restart_policy": "unless-stopped", "stop_timeout": 120,
        "labels": {"org.sparkfleet.vllm.profile": "qwen3.5-35b-a3b-fp8"},
    },
}
ENV = {"VLLM_API_KEY": "sk-test", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
IMAGE = {"Id": IMAGE_ID, "Config": {"Env": ["PATH=/usr/bin:/bin", "TORCHINDUCTOR_COMPILE_THREADS=4"]}}


def hashed(*entries: str) -> list[str]:
    """NAME=VALUE -> NAME=SHA-256 of VALUE, as the role's probe prints the container's environment."""
    return [f"{e.split('=', 1)[0]}={hashlib.sha256(e.split('=', 1)[1].encode()).hexdigest()}" for e in entries]


ENV_FOUND = hashed("VLLM_API_KEY=sk-test", "TORCHINDUCTOR_COMPILE_THREADS=1", "PATH=/usr/bin:/bin")
# `docker container inspect vllm` of the container the role's docker_container task made from SPEC
# (the keys it reads, as Docker 20.10 and later return them) and its environment as the probe hashes it.
CONTAINER = {
    "EnvSha256": ENV_FOUND,
    "Name": "/vllm",
    "Image": IMAGE_ID,
    "State": {"Status": "running", "Running": True},
    "Config": {
        "Image": REF,
        "Cmd": ARGV,
        "StopTimeout": 120,
        "Labels": {"org.sparkfleet.vllm.profile": "qwen3.5-35b-a3b-fp8", "maintainer": "vllm"},
    },
    "HostConfig": {
        "NetworkMode": "host",
        "PortBindings": {},
        "Mounts": [{"Type": "bind", "Source": "/srv/models/Qwen3.5-35B-A3B-FP8", "Target": "/model",
                    "ReadOnly": True}],
        "Runtime": "nvidia",
        "DeviceRequests": [{"Driver": "nvidia", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]],
                            "Options": None}],
        "ShmSize": 16 * 1024**3,
        "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
        "Privileged": False,
    },
}


def changed(path: str, value: object) -> dict:
    container = copy.deepcopy(CONTAINER)
    *parents, last = path.split(".")
    node = container
    for key in parents:
        node = node[key]
    node[last] = value
    return container


def test_the_container_the_role_made_is_the_same():
    assert vllm_container_differences(CONTAINER, IMAGE, SPEC, ENV, REF) == []


@pytest.mark.parametrize(("path", "value", "named"), [
    ("State.Status", "exited", "state"),
    ("Name", "/vllm-old", "name"),
    ("Image", "sha256:" + "b" * 64, "image id"),
    ("Config.Image", "vllm/vllm-openai@sha256:" + "c" * 64, "image name"),
    ("Config.Cmd", [*ARGV, "--max-num-seqs", "8"], "command"),
    ("EnvSha256", hashed("VLLM_API_KEY=sk-other", "TORCHINDUCTOR_COMPILE_THREADS=1", "PATH=/usr/bin:/bin"), "env"),
    ("EnvSha256", [*ENV_FOUND, *hashed("EXTRA=1")], "env"),
    ("EnvSha256", hashed("VLLM_API_KEY=sk-test", "PATH=/usr/bin:/bin"), "env"),
    ("EnvSha256", None, "env"),
    ("Config.StopTimeout", 10, "stop timeout"),
    ("Config.Labels", {"maintainer": "vllm"}, "label"),
    ("HostConfig.NetworkMode", "bridge", "network mode"),
    ("HostConfig.PortBindings", {"8000/tcp": [{"HostIp": "", "HostPort": "8000"}]}, "published ports"),
    ("HostConfig.Mounts", [{**CONTAINER["HostConfig"]["Mounts"][0], "ReadOnly": False}], "mounts"),
    ("HostConfig.Mounts", [], "mounts"),
    ("HostConfig.Runtime", "runc", "runtime"),
    ("HostConfig.DeviceRequests", None, "device requests"),
    ("HostConfig.DeviceRequests", [{"Driver": "nvidia", "Count": 1, "Capabilities": [["gpu"]]}], "device requests"),
    ("HostConfig.ShmSize", 64 * 1024**2, "shm size"),
    ("HostConfig.RestartPolicy", {"Name": "no", "MaximumRetryCount": 0}, "restart policy"),
    ("HostConfig.RestartPolicy", {"Name": "unless-stopped", "MaximumRetryCount": 3}, "restart policy"),
    ("HostConfig.Privileged", True, "privileged"),
])
def test_an_option_that_differs_is_named(path: str, value: object, named: str):
    found = vllm_container_differences(changed(path, value), IMAGE, SPEC, ENV, REF)
    assert [line for line in found if line.startswith(named)], found


def test_what_it_cannot_judge_counts_as_different():
    # Published ports and sizes of another form are left to docker_container.
    bridge = {**SPEC, "options": {**SPEC["options"], "network_mode": "bridge", "published_ports": ["8000:8000"]}}
    assert vllm_container_differences(changed("HostConfig.NetworkMode", "bridge"), IMAGE, bridge, ENV, REF)
    odd_size = {**SPEC, "options": {**SPEC["options"], "shm_size": "16 gigabytes"}}
    assert vllm_container_differences(CONTAINER, IMAGE, odd_size, ENV, REF)
    assert vllm_container_differences(changed("EnvSha256", "not a list"), IMAGE, SPEC, ENV, REF)


def test_a_differing_environment_is_named_without_its_values():
    found = vllm_container_differences(changed("EnvSha256", hashed("VLLM_API_KEY=sk-other", "PATH=/usr/bin:/bin")),
                                       IMAGE, SPEC, ENV, REF)
    assert found == ["env: TORCHINDUCTOR_COMPILE_THREADS, VLLM_API_KEY differ"]
    assert "sk-test" not in str(found) and "sk-other" not in str(found)


def test_no_container_or_no_image_differs():
    assert vllm_container_differences({}, IMAGE, SPEC, ENV, REF) == ["container: not on the box"]
    assert vllm_container_differences(None, IMAGE, SPEC, ENV, REF) == ["container: not on the box"]
    assert vllm_container_differences(CONTAINER, {}, SPEC, ENV, REF) == ["image: not on the box"]


@pytest.mark.parametrize("size", ["16g", "16G", "16gb", 16 * 1024**3, "17179869184"])
def test_sizes_as_docker_container_reads_them(size: object):
    spec = {**SPEC, "options": {**SPEC["options"], "shm_size": size}}
    assert vllm_container_differences(CONTAINER, IMAGE, spec, ENV, REF) == []


def test_wrong_types_are_refused():
    with pytest.raises(AnsibleFilterError, match="expects"):
        vllm_container_differences(CONTAINER, IMAGE, "spec", ENV, REF)
