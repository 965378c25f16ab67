"""Seed mode: a box copies another box's verified copy over the LAN, served by the stdlib's
`python3 -m http.server` as the role serves it, verified against the seed's manifest."""

from __future__ import annotations

import functools
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_fetch_helpers import MODEL, Runner, copy_model, leftovers, sha256_of, transfers

SHARD = "model-00002-of-00004.safetensors"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def seed_dir(tmp_path: Path, copies: dict[str, Path]) -> Path:
    target = tmp_path / "seed"
    copy_model(copies["main"], target)
    return target


@pytest.fixture
def http_server(seed_dir: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The stdlib server exactly as the role starts it."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(seed_dir), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.05)
    yield url, process
    process.terminate()
    process.wait()


def peer(tmp_path: Path, endpoint: str) -> Runner:
    return Runner(tmp_path, endpoint, tmp_path / "peer", tmp_path / "peer-state.json")


def seed_args(seed_dir: Path) -> dict[str, str]:
    manifest = json.loads((seed_dir / "sparkfleet-manifest.json").read_text())
    return {"source": "seed", "repo": manifest["repo"], "revision": manifest["revision"]}


def test_a_peer_copies_the_seed_and_verifies_it(tmp_path: Path, seed_dir: Path, http_server):
    url, process = http_server
    run = peer(tmp_path, url)
    result = run(**seed_args(seed_dir))
    assert result.rc == 0, result.stderr
    seed_manifest = json.loads((seed_dir / "sparkfleet-manifest.json").read_text())
    manifest = json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())
    for key in ("source", "repo", "revision", "commit", "endpoint"):
        assert manifest[key] == seed_manifest[key], key
    assert manifest["copied_from"] == url
    assert [(f["path"], f["sha256"]) for f in manifest["files"]] == [
        (f["path"], f["sha256"]) for f in seed_manifest["files"]
    ]
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=run.local_dir, capture_output=True, check=False)
    assert check.returncode == 0
    assert leftovers(run.local_dir) == []
    assert result.state["bytes_downloaded"] == sum(f["size"] for f in seed_manifest["files"])

    # Re-run pinned to the commit, with the seed gone: the manifest suffices, no request at all.
    process.terminate()
    process.wait()
    again = run(**seed_args(seed_dir) | {"revision": seed_manifest["commit"]})
    assert again.rc == 0 and again.state["changed"] is False and again.state["bytes_downloaded"] == 0


def test_a_seeded_copy_checked_against_the_hub_is_unchanged(tmp_path: Path, seed_dir: Path, http_server, hub):
    run = peer(tmp_path, http_server[0])
    assert run(**seed_args(seed_dir)).rc == 0
    hub.clear_requests()
    checked = run(endpoint=hub.url)  # the role's fallback source on a later run
    assert checked.rc == 0, checked.stderr
    assert checked.state["changed"] is False and checked.state["bytes_downloaded"] == 0
    assert transfers(hub) == []
    assert json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())["copied_from"] == http_server[0]


def test_an_unreachable_seed_is_named(tmp_path: Path):
    endpoint = f"http://127.0.0.1:{free_port()}"
    result = peer(tmp_path, endpoint)(source="seed", repo=MODEL, revision="main")
    assert result.rc == 1 and result.kind == "SeedUnreachable"
    assert endpoint in result.state["error"]["message"] and "model_seed_host" in result.state["error"]["message"]


def test_a_seed_holding_another_revision_is_not_used(tmp_path: Path, seed_dir: Path, http_server):
    result = peer(tmp_path, http_server[0])(**seed_args(seed_dir) | {"revision": "v1"})
    assert result.kind == "SeedUnreachable" and "not " + MODEL + "@v1" in result.state["error"]["message"]


def test_a_seed_serving_wrong_bytes_leaves_nothing_in_place(tmp_path: Path, seed_dir: Path, http_server):
    shard = seed_dir / SHARD
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    run = peer(tmp_path, http_server[0])
    result = run(**seed_args(seed_dir))
    assert result.rc == 1 and result.kind == "HashMismatch"
    assert not (run.local_dir / SHARD).exists()
    assert not list(run.local_dir.rglob(f"{SHARD}*"))  # not even a partial
    assert not (run.local_dir / "sparkfleet-manifest.json").exists()


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """A file server that honours Range (the stdlib's does not): proves the resume path."""

    ranges: list[str] = []  # noqa: RUF012 - shared log of Range headers seen

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        header = self.headers.get("Range")
        match = re.fullmatch(r"bytes=(\d+)-", header or "")
        if not match:
            return super().do_GET()
        type(self).ranges.append(header)
        path = Path(self.translate_path(self.path))
        data = path.read_bytes()
        start = int(match.group(1))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])
        return None


@pytest.fixture
def range_server(seed_dir: Path) -> Iterator[str]:
    RangeHandler.ranges = []
    handler = functools.partial(RangeHandler, directory=str(seed_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def stage_partial(run: Runner, seed_dir: Path, keep: int) -> None:
    """What a killed copy leaves: the first `keep` bytes of a file in staging."""
    part = run.local_dir / ".sparkfleet-staging" / f"{SHARD}.part"
    part.parent.mkdir(parents=True)
    part.write_bytes((seed_dir / SHARD).read_bytes()[:keep])


def test_a_staged_partial_is_resumed_with_range_and_verified(tmp_path: Path, seed_dir: Path, range_server: str):
    run = peer(tmp_path, range_server)
    stage_partial(run, seed_dir, 10_000_000)
    result = run(**seed_args(seed_dir))
    assert result.rc == 0, result.stderr
    assert RangeHandler.ranges == ["bytes=10000000-"]
    total = sum(f["size"] for f in json.loads((seed_dir / "sparkfleet-manifest.json").read_text())["files"])
    assert result.state["bytes_downloaded"] == total - 10_000_000  # the staged bytes did not cross again
    assert sha256_of(run.local_dir / SHARD) == sha256_of(seed_dir / SHARD)
    assert leftovers(run.local_dir) == []


def test_a_partial_of_wrong_bytes_costs_one_retry_not_a_failure(tmp_path: Path, seed_dir: Path, range_server: str):
    run = peer(tmp_path, range_server)
    stage_partial(run, seed_dir, 0)
    (run.local_dir / ".sparkfleet-staging" / f"{SHARD}.part").write_bytes(b"\0" * 5_000_000)
    result = run(**seed_args(seed_dir))
    assert result.rc == 0, result.stderr
    assert sha256_of(run.local_dir / SHARD) == sha256_of(seed_dir / SHARD)


def test_the_stdlib_server_ignores_range_and_the_partial_restarts(tmp_path: Path, seed_dir: Path, http_server):
    run = peer(tmp_path, http_server[0])
    stage_partial(run, seed_dir, 10_000_000)
    result = run(**seed_args(seed_dir))
    assert result.rc == 0, result.stderr
    assert sha256_of(run.local_dir / SHARD) == sha256_of(seed_dir / SHARD)
    assert SHARD in result.state["fetched"]
