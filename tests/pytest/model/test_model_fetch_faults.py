"""The fetch program against the stand-in hub's transient faults: a stalled API, a one-off 503 from the
API and from the CDN, a connection reset mid-file, and a target it cannot write. Each is what a real
WAN and a busy hub do now and then; the program bounds every wait, retries what passes, and names
what does not."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from model_fetch_helpers import Hub, Runner, leftovers, sha256_of, transfers

FAST = ("--api-timeout", "2", "--retries", "2")


def assert_complete(run: Runner, hub: Hub, revision: str = "main") -> None:
    for path, meta in hub.files(revision).items():
        assert sha256_of(run.local_dir / path) == meta["sha256"], path
    assert leftovers(run.local_dir) == []


def served(hub: Hub) -> int:
    return sum(r["bytes"] for r in transfers(hub) if r["status"] in (200, 206))


def test_a_stalled_api_ends_in_hub_unreachable_naming_the_endpoint_and_the_attempts(run: Runner, hub: Hub):
    hub.faults(stall_api_seconds=30)
    result = run("--api-timeout", "1", "--retries", "1")
    assert result.rc == 1 and result.kind == "HubUnreachable", result.stderr
    message = result.state["error"]["message"]
    assert hub.url in message and "model_endpoint" in message
    assert "/api/models/" in message and "failed 2 times" in message and "timeout 1 s" in message
    assert result.state["retries"] == 1
    assert "Timeout" in result.state["last_retry"]["why"]
    assert "retry 1/1 of GET" in result.stderr
    assert transfers(hub) == []


def test_one_503_from_the_api_is_retried_and_shown(run: Runner, hub: Hub):
    hub.faults(api_503_count=1)
    result = run(*FAST, "--include", "*.json")
    assert result.rc == 0, result.stderr
    assert result.state["retries"] == 1
    assert result.state["last_retry"]["why"] == "HTTP 503"
    assert "/api/models/" in result.state["last_retry"]["what"]
    assert "1 retries" in result.stdout


def test_too_many_503s_from_the_api_fail_with_what_was_tried(run: Runner, hub: Hub):
    hub.faults(api_503_count=10)
    result = run(*FAST)
    assert result.rc == 1 and result.kind == "HubUnreachable"
    assert "failed 3 times" in result.state["error"]["message"] and "HTTP 503" in result.state["error"]["message"]


def test_one_503_per_file_from_the_cdn_and_resolve_still_completes(run: Runner, hub: Hub):
    hub.faults(file_503_once=True)
    result = run(*FAST)
    assert result.rc == 0, result.stderr
    assert_complete(run, hub)
    files = hub.files()
    assert result.state["retries"] == len(files)  # one per file, each shown
    refused = [r for r in transfers(hub) if r["status"] == 503]
    assert len(refused) == len(files)
    assert result.state["bytes_downloaded"] == sum(f["size"] for f in files.values()) == served(hub)


def test_a_reset_mid_file_resumes_and_counts_each_byte_once(run: Runner, hub: Hub):
    shard = "model-00001-of-00004.safetensors"
    hub.faults(cut_once_after_bytes=12 * 1024 * 1024)
    result = run(*FAST, "--include", shard)
    assert result.rc == 0, result.stderr
    assert_complete_one = sha256_of(run.local_dir / shard) == hub.files()[shard]["sha256"]
    assert assert_complete_one and leftovers(run.local_dir) == []
    size = hub.files()[shard]["size"]
    ranges = [r["range"] for r in transfers(hub) if r.get("range")]
    assert ranges and all(r.startswith("bytes=") and r != "bytes=0-" for r in ranges)  # resumed, not restarted
    # Counted: the bytes the client kept (it keeps whole 10 MiB chunks of a cut body: constants.py:40).
    assert result.state["bytes_downloaded"] == size <= served(hub)


def test_modelscope_retries_a_503_per_file_and_counts_true(run: Runner, hub: Hub):
    hub.faults(file_503_once=True)
    result = run(*FAST, "--include", "*.json", "--include", "model-00001-*", source="modelscope", revision="master")
    assert result.rc == 0, result.stderr
    assert result.state["retries"] >= 1
    assert result.state["bytes_downloaded"] == served(hub)


@pytest.mark.parametrize(("source", "revision"), [("huggingface", "main"), ("modelscope", "master")])
def test_a_stalled_cdn_ends_in_hub_unreachable_as_a_stalled_api_does(run: Runner, hub: Hub, source: str, revision: str):
    """A weight file's GET accepted and never answered (a stalled CDN edge): each attempt ends after
    --api-timeout, as an API request does, through either client; then HubUnreachable names the file."""
    hub.faults(stall_file_seconds=100)
    result = run("--api-timeout", "1", "--retries", "1", "--include", "model-00001-*", source=source,
                 revision=revision)
    assert result.rc == 1 and result.kind == "HubUnreachable", result.stderr[-3000:]
    message = result.state["error"]["message"]
    assert "model-00001-" in message and "failed 2 times" in message and "timeout 1 s" in message, message
    assert result.state["retries"] == 1
    # One stalled GET per attempt: no retry loop of a client's own multiplies the wait (huggingface_hub's
    # http_get made 6 of each until the program turned it off).
    held = [r for r in transfers(hub) if not r.get("status")]
    assert len(held) == 2, [(r["path"], r.get("status")) for r in transfers(hub)]


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """A read-only bind mount of `directory` on itself (root only; skipped where mounts are refused)."""
    mounted = subprocess.run(["mount", "--bind", str(directory), str(directory)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {mounted.stderr.decode().strip()}")
    try:
        remount = ["mount", "-o", "remount,bind,ro", str(directory)]
        assert subprocess.run(remount, capture_output=True, check=False).returncode == 0
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=False)


def test_a_read_only_target_fails_as_not_writable_before_any_transfer(run: Runner, hub: Hub):
    run.local_dir.mkdir()
    with read_only(run.local_dir):
        result = run(*FAST)
    assert result.rc == 1 and result.kind == "NotWritable", result.stderr
    message = result.state["error"]["message"]
    assert str(run.local_dir) in message and "read-only filesystem" in message and "model_local_dir" in message
    assert transfers(hub) == []


def test_an_unwritable_directory_maps_to_not_writable(fm, tmp_path: Path, monkeypatch):
    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / ".sparkfleet-staging"))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(fm.FetchError) as error:
        fm.check_writable(tmp_path)
    assert error.value.kind == "NotWritable" and "not writable" in error.value.message
    assert "EACCES" in error.value.message


def test_a_modelscope_resume_counts_only_the_bytes_received_now(run: Runner, hub: Hub):
    """The client reports the partial it resumes as progress (_download.py:1872-1876): not downloaded."""
    shard = "model-00001-of-00004.safetensors"
    hub.faults(cut_after_bytes=5 * 1024 * 1024)  # every transfer cut: the run fails, a partial stays
    failed = run("--api-timeout", "2", "--retries", "0", "--include", shard, source="modelscope", revision="master")
    assert failed.rc == 1
    partial = sum(p.stat().st_size for p in run.local_dir.rglob("*.incomplete"))
    assert partial > 0
    hub.faults(reset=True)
    hub.clear_requests()
    after = run(*FAST, "--include", shard, source="modelscope", revision="master")
    assert after.rc == 0, after.stderr
    size = hub.files("master")[shard]["size"]
    assert served(hub) == size - partial
    assert after.state["bytes_downloaded"] == served(hub)
    assert f"{size - partial} bytes downloaded" in after.stdout
    assert json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())["files"][0]["path"] == shard
