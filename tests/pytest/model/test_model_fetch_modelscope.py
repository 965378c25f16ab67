"""The fetch program's ModelScope source against the stand-in hub, through the real modelscope
1.40.0 / modelscope-hub 0.5.1 client."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from model_fetch_helpers import GATED, TOKEN, Hub, Runner, journal, leftovers, sha256_of, transfers

MS = {"source": "modelscope", "revision": "master"}


def assert_complete(run: Runner, hub: Hub) -> None:
    for path, meta in hub.files("master").items():
        assert sha256_of(run.local_dir / path) == meta["sha256"], path
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=run.local_dir, capture_output=True, check=False)
    assert check.returncode == 0
    assert leftovers(run.local_dir) == []


def test_modelscope_download_is_verified_and_a_rerun_transfers_nothing(run: Runner, hub: Hub):
    first = run(**MS)
    assert first.rc == 0, first.stderr
    assert first.state["commit"] == hub.commit("master")
    assert_complete(run, hub)
    manifest = json.loads((run.local_dir / "sparkfleet-manifest.json").read_text())
    assert (manifest["source"], manifest["revision"], manifest["commit"]) == (
        "modelscope",
        "master",
        hub.commit("master"),
    )
    assert "%|" not in first.stderr  # no client progress bars in the unit's journal

    hub.clear_requests()
    again = run(**MS)
    assert again.rc == 0 and again.state["changed"] is False and again.state["bytes_downloaded"] == 0
    assert transfers(hub) == []


def test_modelscope_corrupt_bytes_fail_with_nothing_in_place(run: Runner, hub: Hub):
    hub.faults(corrupt=True)
    result = run("--include", "model-00001-*", **MS)
    assert result.rc == 1 and result.kind == "HashMismatch"
    assert not (run.local_dir / "model-00001-of-00004.safetensors").exists()


def test_modelscope_errors_are_named(run: Runner):
    assert run(repo="nobody/no-such-model", **MS).kind == "RepoNotFound"
    assert run(**MS | {"revision": "no-such-tag"}).kind == "RevisionNotFound"
    assert run(repo=GATED, **MS).kind == "GatedRepo"
    assert run(repo=GATED, token="wrong", **MS).kind == "BadToken"
    good = run(repo=GATED, token=TOKEN, **MS)
    assert good.rc == 0, good.stderr


def test_modelscope_resumes_a_killed_download(run: Runner, hub: Hub):
    hub.faults(throttle_bps=10_000_000)
    process = run.popen(**MS)
    deadline = time.monotonic() + 30
    while True:
        try:
            state = json.loads(run.state_file.read_text())
            if state["bytes_done"] > state["bytes_total"] // 3:
                break
        except (OSError, ValueError):
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    partials = sum(p.stat().st_size for p in run.local_dir.rglob("*.incomplete"))
    assert partials, "the kill was meant to land mid-file"
    placed = sum(hub.files("master")[p]["size"] for p in journal(run))

    hub.faults(reset=True)
    hub.clear_requests()
    after = run(**MS)
    assert after.rc == 0, after.stderr
    assert_complete(run, hub)
    # The client asked for the rest of each partial file, not for all of it again.
    resumed = [r for r in transfers(hub) if (r.get("range") or "").startswith("bytes=")]
    assert resumed, transfers(hub)
    served = sum(r["bytes"] for r in transfers(hub))
    total = sum(f["size"] for f in hub.files("master").values())
    assert served == total - placed - partials  # nothing received before the kill crossed again
