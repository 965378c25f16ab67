"""The fetch program against the stand-in hub, through the real huggingface_hub 2.4.0 client:
what the role relies on, proven with the stand-in's request log and the bytes on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from model_fetch_helpers import (
    GATED,
    MODEL,
    TOKEN,
    Hub,
    Runner,
    copy_model,
    journal,
    leftovers,
    sha256_of,
    transfers,
)

SHARD = "model-00004-of-00004.safetensors"
OWN = ("SHA256SUMS", "sparkfleet-manifest.json")


def assert_complete(local_dir: Path, hub: Hub, revision: str = "main") -> None:
    """Every listed file in place with the listed sha256, and `sha256sum -c` agrees."""
    for path, meta in hub.files(revision).items():
        assert sha256_of(local_dir / path) == meta["sha256"], path
    check = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=local_dir, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert len(check.stdout.splitlines()) == len(hub.files(revision))


def nothing_corrupt(local_dir: Path, hub: Hub) -> None:
    """Whatever is in place is a listed file with the listed content."""
    files = hub.files("main")
    for path in local_dir.rglob("*"):
        rel = path.relative_to(local_dir).as_posix()
        if path.is_file() and not rel.startswith(".sparkfleet-staging/") and rel not in OWN:
            assert rel in files, f"unexpected file {rel}"
            assert sha256_of(path) == files[rel]["sha256"], f"corrupt file in place: {rel}"


def test_fresh_download_is_verified_and_a_rerun_transfers_nothing(run: Runner, hub: Hub):
    first = run()
    assert first.rc == 0, first.stderr
    assert first.state["phase"] == "done" and first.state["changed"] is True
    assert first.state["commit"] == hub.commit("main")
    assert sorted(first.state["fetched"]) == sorted(hub.files("main"))
    assert first.state["bytes_done"] == first.state["bytes_total"] == sum(f["size"] for f in hub.files().values())
    assert_complete(run.local_dir, hub)
    assert leftovers(run.local_dir) == []
    assert not any(p.is_symlink() for p in run.local_dir.rglob("*"))
    manifest = json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())
    assert (manifest["source"], manifest["repo"], manifest["revision"]) == ("huggingface", MODEL, "main")
    assert manifest["commit"] == hub.commit("main") and manifest["copied_from"] is None

    hub.clear_requests()
    again = run()
    assert again.rc == 0, again.stderr
    assert again.state["changed"] is False and again.state["bytes_downloaded"] == 0
    assert again.state["fetched"] == again.state["repaired"] == []
    assert transfers(hub) == []  # only the revision and tree listings
    assert (run.local_dir / "sparkfleet-manifest.json").read_text() == json.dumps(manifest, indent=1) + "\n"

    hub.clear_requests()
    pinned = run(revision=hub.commit("main"))
    assert pinned.rc == 0 and pinned.state["changed"] is False
    assert hub.requests() == []  # the manifest already holds that commit: no hub request at all


# One shard and the small files: enough to prove the point, a quarter of the bytes.
SOME = ("--include", "*.json", "--include", "model-00001-*")


def test_corrupt_bytes_from_the_hub_fail_and_leave_nothing_corrupt(run: Runner, hub: Hub):
    hub.faults(corrupt=True)
    result = run(*SOME)
    assert result.rc == 1
    assert result.kind == "HashMismatch"
    assert "model_endpoint" in result.state["error"]["message"]
    assert result.stderr.strip().splitlines()[-1].startswith("HashMismatch: ")
    nothing_corrupt(run.local_dir, hub)
    assert not (run.local_dir / "sparkfleet-manifest.json").exists()

    hub.faults(reset=True)
    healed = run(*SOME)
    assert healed.rc == 0, healed.stderr
    nothing_corrupt(run.local_dir, hub)
    assert "model-00001-of-00004.safetensors" in healed.state["fetched"]
    assert leftovers(run.local_dir) == []


def flip_byte_keep_mtime(path: Path, offset: int = 4096) -> None:
    stat = path.stat()
    with path.open("r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_quick_verify_repairs_a_truncated_file_and_full_verify_a_flipped_byte(run: Runner, hub: Hub, copies):
    copy_model(copies["main"], run.local_dir)
    truncated = "model-00001-of-00004.safetensors"
    with (run.local_dir / truncated).open("r+b") as handle:
        handle.truncate(1000)
    flip_byte_keep_mtime(run.local_dir / SHARD)

    quick = run()
    assert quick.rc == 0, quick.stderr
    # Size and mtime only: the truncated file is caught, the flipped byte (same size, same mtime) is not.
    assert quick.state["repaired"] == [truncated] and quick.state["fetched"] == []
    assert quick.state["bytes_downloaded"] == hub.files()[truncated]["size"]
    assert sha256_of(run.local_dir / SHARD) != hub.files()[SHARD]["sha256"]

    hub.clear_requests()
    full = run("--verify", "full")
    assert full.rc == 0, full.stderr
    assert full.state["repaired"] == [SHARD] and full.state["fetched"] == []
    assert full.state["changed"] is True
    assert full.state["bytes_downloaded"] == hub.files()[SHARD]["size"]
    assert len([r for r in transfers(hub) if r["path"].startswith("/repos/")]) == 1
    assert_complete(run.local_dir, hub)


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_mid_file_the_rerun_completes_and_leaves_no_partials(run: Runner, hub: Hub):
    # ~25 MB shards at 10 MB/s per connection: the kill lands inside shard transfers.
    hub.faults(throttle_bps=10_000_000)
    process = run.popen()

    def a_third_done() -> bool:
        try:
            state = json.loads(run.state_file.read_text())
        except (OSError, ValueError):
            return False
        return state["fetched"] != [] and state["bytes_done"] > state["bytes_total"] // 3

    wait_for(a_third_done)
    process.send_signal(signal.SIGKILL)
    process.wait()
    placed_before = journal(run)
    assert placed_before, "the kill was meant to land after some files were placed"
    # The client's own partials (a name per process, never resumed by it) hold whole 10 MiB chunks.
    sizes = [p.stat().st_size for p in run.local_dir.rglob("*.incomplete") if p.stat().st_size]
    partial_bytes = sum(sizes)
    assert partial_bytes, "the kill was meant to land mid-file"
    assert not (run.local_dir / "sparkfleet-manifest.json").exists()

    hub.faults(reset=True)
    hub.clear_requests()
    after = run()
    assert after.rc == 0, after.stderr
    assert_complete(run.local_dir, hub)
    assert leftovers(run.local_dir) == []
    # Files placed before the kill are not fetched again, and the partials are continued with Range:
    # no byte on disk at the kill crosses the network again.
    assert set(after.state["fetched"]) == set(hub.files()) - set(placed_before)
    total = sum(f["size"] for f in hub.files().values())
    placed = sum(hub.files()[p]["size"] for p in placed_before)
    assert after.state["bytes_downloaded"] == total - placed - partial_bytes
    # (The stand-in logs a request when it ends: the killed run's may still arrive, so bytes served
    # are not summed here; the resumed requests are recognised by their Range header.)
    resumed = [r["range"] for r in transfers(hub) if r.get("range")]
    assert sorted(resumed) == sorted(f"bytes={size}-" for size in sizes)


def test_a_new_revision_fetches_only_what_changed(run: Runner, hub: Hub, copies):
    copy_model(copies["v1"], run.local_dir)
    assert_complete(run.local_dir, hub, "v1")
    v1, main = hub.files("v1"), hub.files("main")
    changed = sorted(p for p in main if v1.get(p, {}).get("sha256") != main[p]["sha256"])
    assert changed == ["config.json", SHARD]

    hub.clear_requests()
    new = run()
    assert new.rc == 0, new.stderr
    assert sorted(new.state["fetched"]) == changed and new.state["repaired"] == []
    assert new.state["bytes_downloaded"] == sum(main[p]["size"] for p in changed)
    assert_complete(run.local_dir, hub, "main")
    assert json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())["commit"] == hub.commit("main")


def test_too_little_disk_fails_before_any_transfer(run: Runner, hub: Hub):
    result = run("--disk-margin-bytes", str(10**18))
    assert result.rc == 1 and result.kind == "DiskFull"
    message = result.state["error"]["message"]
    total = sum(f["size"] for f in hub.files().values())
    assert f"{total} bytes" in message and "free" in message and "model_local_dir" in message
    assert transfers(hub) == []
    assert not run.local_dir.exists()


def test_gated_repo_needs_the_token_and_a_bad_token_is_named(run: Runner, hub: Hub, tmp_path: Path):
    gated = run(repo=GATED)
    assert gated.kind == "GatedRepo" and "model_token" in gated.state["error"]["message"]

    bad = run(repo=GATED, token="hf_wrong")
    assert bad.kind == "BadToken" and "model_token" in bad.state["error"]["message"]
    assert "hf_wrong" not in bad.stderr + json.dumps(bad.state)

    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "model-token").write_text(TOKEN + "\n")
    good = run(repo=GATED, credentials=creds)  # systemd's LoadCredential, not the environment
    assert good.rc == 0, good.stderr
    assert TOKEN not in good.stderr + good.stdout + json.dumps(good.state)
    assert TOKEN not in (run.local_dir / "sparkfleet-manifest.json").read_text()


def test_unknown_repo_and_revision_are_named(run: Runner):
    repo = run(repo="nobody/no-such-model")
    assert repo.rc == 1 and repo.kind == "RepoNotFound"
    assert (
        "'nobody/no-such-model'" in repo.state["error"]["message"] and "model_repo_id" in repo.state["error"]["message"]
    )
    revision = run(revision="no-such-branch")
    assert revision.kind == "RevisionNotFound" and "model_revision" in revision.state["error"]["message"]


def test_an_unreachable_hub_names_the_endpoint(run: Runner):
    result = run(endpoint="http://127.0.0.1:9")
    assert result.rc == 1 and result.kind == "HubUnreachable"
    assert "http://127.0.0.1:9" in result.state["error"]["message"]
    assert "model_endpoint" in result.state["error"]["message"]


def test_plan_says_what_would_be_fetched_and_changes_nothing(run: Runner, hub: Hub, copies):
    fresh = run("--plan")
    assert fresh.rc == 0, fresh.stderr
    plan = json.loads(fresh.stdout)
    sizes = {p: f["size"] for p, f in hub.files().items()}
    assert plan["commit"] == hub.commit("main")
    assert plan["bytes_total"] == plan["bytes_to_fetch"] == sum(sizes.values())
    assert {f["path"]: (f["size"], f["action"]) for f in plan["files"]} == {p: (s, "fetch") for p, s in sizes.items()}
    assert plan["enough_disk"] is True and plan["free_bytes"] > 0
    assert not run.local_dir.exists() and not run.state_file.exists()
    assert transfers(hub) == []

    copy_model(copies["v1"], run.local_dir)
    update = json.loads(run("--plan").stdout)
    assert {f["path"] for f in update["files"] if f["action"] != "keep"} == {"config.json", SHARD}
    assert update["bytes_to_fetch"] == sizes["config.json"] + sizes[SHARD]

    short = json.loads(run("--plan", "--disk-margin-bytes", str(10**18)).stdout)
    assert short["enough_disk"] is False

    missing = run("--plan", repo="nobody/no-such-model")
    assert missing.rc == 1 and json.loads(missing.stdout)["error"]["kind"] == "RepoNotFound"


def test_include_and_exclude_select_files(run: Runner, hub: Hub):
    result = run("--include", "*.json", "--exclude", "tokenizer*")
    assert result.rc == 0, result.stderr
    expected = sorted(p for p in hub.files() if p.endswith(".json") and not p.startswith("tokenizer"))
    assert sorted(result.state["fetched"]) == expected
    assert not any((run.local_dir / p).exists() for p in hub.files() if p not in expected)


def test_sigterm_is_reported_and_the_next_run_continues(run: Runner, hub: Hub):
    hub.faults(throttle_bps=5_000_000)
    process = run.popen("--include", "model-00001-*")
    wait_for(lambda: run.state_file.exists() and json.loads(run.state_file.read_text())["bytes_done"] > 0)
    process.send_signal(signal.SIGTERM)
    stderr = process.communicate(timeout=10)[1]
    assert process.returncode == 143
    state = json.loads(run.state_file.read_text())
    assert state["phase"] == "failed" and state["error"]["kind"] == "Interrupted"
    assert stderr.strip().splitlines()[-1].startswith("Interrupted: ")

    hub.faults(reset=True)
    again = run("--include", "model-00001-*")
    assert again.rc == 0, again.stderr
    assert again.stdout.startswith("done: commit ")
    assert leftovers(run.local_dir) == []
