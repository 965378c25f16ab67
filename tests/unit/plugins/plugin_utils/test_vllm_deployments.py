# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The deployments of a box (plugins/plugin_utils/vllm_deployments.py): names, clashes, drops and admission."""

from __future__ import annotations

import re

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_deployments as planner

GIB = 1073741824
BASE = {"container_name": "vllm", "port": 8000, "state_dir": "/var/lib/sparkfleet/vllm",
        "known_good_repository": "sparkfleet-known-good/vllm", "master_port": 29501,
        "model_state_dir": "/var/lib/sparkfleet/model"}


def test_no_list_is_the_single_deployment_under_the_roles_own_names() -> None:
    result = planner.resolve([], BASE)
    assert result["errors"] == []
    assert result["deployments"] == [{"name": "vllm", "port": 8000, "priority": 100,
                                      "state_dir": "/var/lib/sparkfleet/vllm",
                                      "known_good_repository": "sparkfleet-known-good/vllm", "master_port": 29501,
                                      "model_state_dir": "/var/lib/sparkfleet/model", "settings": {}}]


def test_a_single_deployment_keeps_a_renamed_container_and_its_places() -> None:
    base = {**BASE, "container_name": "vllm-tp2", "state_dir": "/var/lib/sparkfleet/vllm-tp2", "port": 8002}
    (item,) = planner.resolve(None, base)["deployments"]
    assert (item["name"], item["port"], item["state_dir"]) == ("vllm-tp2", 8002, "/var/lib/sparkfleet/vllm-tp2")


def test_listed_deployments_get_their_own_places_and_the_single_ones_name_keeps_its_own() -> None:
    result = planner.resolve([{"name": "vllm", "port": 8000, "recipe": "gpt-oss-120b"},
                              {"name": "Coder", "port": 8001, "priority": 10, "gpu_memory_utilization": 0.2}], BASE)
    assert result["errors"] == []
    first, second = result["deployments"]
    assert first["state_dir"] == "/var/lib/sparkfleet/vllm"
    assert first["known_good_repository"] == "sparkfleet-known-good/vllm"
    assert first["settings"] == {"recipe": "gpt-oss-120b"}
    assert second["state_dir"] == "/var/lib/sparkfleet/vllm-Coder"
    # Image repositories are lower case.
    assert second["known_good_repository"] == "sparkfleet-known-good/coder"
    assert second["model_state_dir"] == "/var/lib/sparkfleet/model-Coder"
    assert (second["priority"], second["master_port"]) == (10, 29502)
    assert second["settings"] == {"gpu_memory_utilization": 0.2}


@pytest.mark.parametrize(("deployments", "expected"), [
    ([{"name": "a"}, {"name": "b", "port": 8001}], r"vllm_deployments\[0\] \(a\) has no port"),
    ([{"name": "bad name", "port": 1}], r"vllm_deployments\[0\]\.name = 'bad name'; expected a Docker container name"),
    ([{"port": 1}], r"vllm_deployments\[0\]\.name = None"),
    (["vllm"], r"vllm_deployments\[0\] = 'vllm'; expected a mapping"),
    ([{"name": "a", "port": 8000, "api_key": "x"}], r"sets api_key, which a deployment cannot set.*box-wide"),
    ([{"name": "a", "port": 70000}], r"port = 70000; expected an integer from 1 to 65535"),
    ([{"name": "a", "port": 8000, "priority": "high"}], r"priority = 'high'; expected an integer"),
    ([{"name": "a", "port": 8000, "priority": True}], r"priority = True; expected an integer"),
    ([{"name": "a", "port": 8000}, {"name": "a", "port": 8001}], r"a and a have the same container name a"),
    ([{"name": "a", "port": 8000}, {"name": "b", "port": 8000}], r"a and b have the same port 8000"),
    ([{"name": "a", "port": 8000}, {"name": "b", "port": 29501}], r"the master port 29501 of a is the API port of b"),
    ("vllm", r"expected a list of mappings"),
])
def test_mistakes_are_refused_with_what_to_do(deployments: object, expected: str) -> None:
    errors = planner.resolve(deployments, BASE)["errors"]
    assert errors, deployments
    assert any(re.search(expected, error) for error in errors), errors


def test_every_mistake_is_listed_at_once() -> None:
    errors = planner.resolve([{"name": "a"}, {"name": "b"}, {"port": 3}], BASE)["errors"]
    assert len(errors) == 3


def test_a_cluster_member_serves_one_deployment() -> None:
    cluster = {"name": "pair1", "members": ["a", "b"], "head": "a", "rank": 0, "role": "head", "size": 2}
    two = [{"name": "chat", "port": 8000}, {"name": "coder", "port": 8001}]
    errors = planner.resolve(two, {**BASE, "cluster": cluster})["errors"]
    assert errors == [
        "the box is a member of the cluster pair1 (a, b) and lists 2 deployments (chat, coder); a cluster member "
        "serves one model, its cluster's. List one deployment on the cluster's members, or take the box out of the "
        "cluster's group to serve several models on it"]
    assert planner.resolve(two[:1], {**BASE, "cluster": cluster})["errors"] == []
    assert planner.resolve(two, {**BASE, "cluster": {}})["errors"] == []


def test_a_deployment_dropped_from_the_list_is_found_in_the_record() -> None:
    recorded = {"deployments": [{"name": "chat", "model_dir": "/srv/models/a"},
                                {"name": "coder", "model_dir": "/srv/models/b"}]}
    wanted = planner.resolve([{"name": "chat", "port": 8000}], BASE)["deployments"]
    assert planner.dropped(recorded, wanted) == [{"name": "coder", "model_dir": "/srv/models/b"}]
    assert planner.dropped(recorded, planner.resolve([{"name": "chat", "port": 8000}, {"name": "coder", "port": 8001}],
                                                     BASE)["deployments"]) == []
    assert planner.dropped({}, wanted) == []


def _plan(name: str, share_gib: float) -> dict:
    return {"name": name, "share": int(share_gib * GIB), "weights": int(share_gib * GIB / 2),
            "activations": 4 * GIB, "kv": int(share_gib * GIB / 2 - 4 * GIB)}


def test_admission_adds_up_every_share_and_the_runtime_overhead() -> None:
    total = int(121.7 * GIB)
    fits = planner.admission([_plan("chat", 60), _plan("coder", 30)], total, 90, 6 * GIB, 2 * GIB)
    # 90 % of 121.7 less 6 = 103.5 GiB; 60 + 2 + 30 + 2 = 94 GiB.
    assert fits["fits"]
    assert fits["used"] == 94 * GIB
    assert "left 9.5 GiB" in fits["table"]
    assert "chat" in fits["table"] and "coder" in fits["table"]
    refused = planner.admission([_plan("chat", 60), _plan("coder", 30), _plan("embed", 10)], total, 90, 6 * GIB,
                                2 * GIB)
    assert not refused["fits"]
    assert "left -2.5 GiB" in refused["table"]


def test_admission_without_a_watchdog_counts_all_of_memtotal() -> None:
    result = planner.admission([_plan("chat", 100)], int(110 * GIB), None, 6 * GIB, 2 * GIB)
    assert result["fits"]
    assert "MemTotal less" in result["table"]


def test_a_deployment_declares_the_cuda_its_image_requires() -> None:
    """Each deployment runs its own image: the CUDA check reads each one's image_cuda_version."""
    result = planner.resolve([{"name": "chat", "port": 8000, "image": "registry.example:5000/team/vllm:dev",
                               "image_cuda_version": "13.0"}, {"name": "coder", "port": 8001}], BASE)
    assert result["errors"] == []
    assert [item["settings"] for item in result["deployments"]] == [
        {"image": "registry.example:5000/team/vllm:dev", "image_cuda_version": "13.0"}, {}]
