"""Verify the image fetched once per fleet: fleet-1 runs the pull-through cache (roles/registry_cache,
Debian's docker-registry), every box's Docker engine uses it as its registry mirror, and the test
bed's Docker Hub is a real registry too (molecule/resources/registry-upstream.yml) whose access log
says who fetched what. The boxes pulled vllm/vllm-openai pinned by digest and image ID in converge.

Counted from the registries' own access logs (combined log format: address, request, status, bytes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import testinfra
from spark_testinfra import run_playbook

SCENARIO = Path(__file__).resolve().parents[1]
PULL = SCENARIO.parent / "resources" / "vllm-image.yml"
BOXES = ("fleet-1", "fleet-2", "fleet-3")
UPSTREAM = "fleet-upstream"
REPOSITORY = "vllm/vllm-openai"
PINS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "upstream-registry"
DIGEST = (PINS / "vllm-image-digest").read_text().strip()
IMAGE_ID = (PINS / "vllm-image-id").read_text().strip()
# 172.18.0.3 - - [02/Dec/2026:03:10:00 +0000] "GET /v2/vllm/vllm-openai/blobs/sha256:... HTTP/1.1" 200 99973658 ...
ACCESS = re.compile(r'^(\S+) \S+ \S+ \[[^]]+\] "([A-Z]+) (/v2/\S*) HTTP/[0-9.]+" (\d{3}) (\d+)')


def box(name: str):
    return testinfra.get_host(f"docker://{name}")


def address(name: str) -> str:
    """The box's address on the scenario's network, as the registries see it."""
    return subprocess.run(["docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name],
                          capture_output=True, text=True, check=True).stdout.strip()


WARM_AGENT = "sparkfleet-registry-warm"


def requests(log: str, warm: bool = False) -> list[tuple[str, str, str, int, int]]:
    """(address, method, path, status, bytes) of each request to the registry's API (/v2/): the boxes' engines'
    (the warm step's, plugins/modules/registry_warm.py, with warm)."""
    found = []
    for line in log.splitlines():
        if (WARM_AGENT in line) != warm:
            continue
        match = ACCESS.search(line)
        if match:
            client, method, path, status, size = match.groups()
            found.append((client, method, path, int(status), int(size)))
    return found


def upstream_log() -> list[tuple[str, str, str, int, int]]:
    result = subprocess.run(["docker", "logs", UPSTREAM], capture_output=True, text=True, check=True)
    return requests(result.stdout + result.stderr)


def cache_log(warm: bool = False) -> list[tuple[str, str, str, int, int]]:
    return requests(box("fleet-1").check_output("journalctl -u docker-registry.service -o cat --no-pager"), warm)


def blob_gets(log: list[tuple[str, str, str, int, int]], client: str, any_status: bool = False) -> dict[str, list[int]]:
    """Each blob this client fetched (GET, 200; with any_status also those its client left, which the distribution's
    registry logs as 500 with the bytes it sent) -> the byte counts of its fetches."""
    blobs: dict[str, list[int]] = {}
    for who, method, path, status, size in log:
        if who == client and method == "GET" and (status == 200 or any_status) and "/blobs/" in path:
            blobs.setdefault(path.rsplit("/", 1)[1], []).append(size)
    return blobs


def test_every_box_runs_the_pinned_image_through_the_fleets_cache():
    for name in BOXES:
        daemon = json.loads(box(name).check_output("cat /etc/docker/daemon.json"))
        assert daemon["registry-mirrors"] == ["http://fleet-1:5000"], name
        image = json.loads(box(name).check_output(f"docker image inspect {REPOSITORY}@{DIGEST}"))[0]
        assert image["Id"] == IMAGE_ID and f"{REPOSITORY}@{DIGEST}" in image["RepoDigests"], name
        assert json.loads(box(name).check_output("docker inspect vllm"))[0]["Image"] == IMAGE_ID, name


def test_upstream_served_the_image_to_the_cache_alone_and_the_cache_to_every_box():
    cache = address("fleet-1")
    # Reads of the image (the controller's push, made in prepare, writes).
    upstream = [request for request in upstream_log() if request[1] == "GET" and f"/{REPOSITORY}/" in request[2]]
    # Nothing read the image upstream but the cache: no box fetched a manifest or a layer from it.
    assert {request[0] for request in upstream} == {cache}
    fetched = blob_gets(upstream, cache, any_status=True)
    served = {name: blob_gets(cache_log(), address(name)) for name in BOXES}
    # Every box got every blob of the image from the cache, once.
    assert all(blobs.keys() == fetched.keys() and all(len(v) == 1 for v in blobs.values())
               for blobs in served.values()), served
    image_bytes = sum(sizes[0] for sizes in served["fleet-1"].values())
    upstream_bytes = sum(sum(sizes) for sizes in fetched.values())
    # distribution 2.8 fetches a blob it does not hold twice on the first request: once to store it,
    # once to stream it to that client (registry/proxy/proxyblobstore.go, ServeBlob, v2.8.2). The warm
    # step (plugins/modules/registry_warm.py) leaves each blob's stream after its first bytes, and the
    # cache stores the blob all the same: upstream sends each blob whole once for the fleet, and only the
    # first buffers of the stream the warm step left.
    sizes = served["fleet-1"]
    # The warm step asked the cache for every blob, before any box.
    assert set(blob_gets(cache_log(warm=True), address("fleet-1"), any_status=True)) == set(fetched)
    for blob, fetches in fetched.items():
        # A small blob's stream can end whole before the warm step leaves it; a large one's cannot.
        if sizes[blob][0] >= 16 * 2**20:
            assert fetches.count(sizes[blob][0]) == 1, (blob, sizes[blob][0], fetches)
    ratio = upstream_bytes / image_bytes
    print(f"image {image_bytes} bytes; from upstream {upstream_bytes} bytes ({ratio:.2f} images) for "
          f"{len(BOXES)} boxes")
    assert ratio < 1.5, ratio


def test_a_box_that_cannot_reach_the_cache_pulls_from_upstream_and_says_so():
    fleet3, cache = box("fleet-3"), address("fleet-1")
    before = len(upstream_log())
    served_before = blob_gets(cache_log(), address("fleet-3"))
    reject = f"OUTPUT -p tcp -d {cache} --dport 5000 -j REJECT --reject-with tcp-reset"
    fleet3.check_output(f"iptables -I {reject}")
    try:
        # The container keeps its image; only the digest reference goes, so the box pulls again.
        fleet3.check_output(f"docker rmi -f {REPOSITORY}@{DIGEST}")
        result = run_playbook(PULL, limit="fleet-3")
    finally:
        fleet3.run(f"iptables -D {reject}")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "WARNING: no registry mirror of fleet-3 answers (http://fleet-1:5000/: " in result.stdout
    assert f"Docker pulls {REPOSITORY}@{DIGEST} from Docker Hub itself" in result.stdout
    # fleet-3's engine went to upstream itself (its layers are on the box, in use by its container, so Docker
    # 20.10 fetched no more than it needed: its /v2/ check at least), and asked the cache for nothing.
    new = upstream_log()[before:]
    assert any(who == address("fleet-3") and status == 200 for who, _method, _path, status, _size in new), new
    assert blob_gets(cache_log(), address("fleet-3")) == served_before
    image = json.loads(fleet3.check_output(f"docker image inspect {REPOSITORY}@{DIGEST}"))[0]
    assert image["Id"] == IMAGE_ID
