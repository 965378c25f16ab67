"""Verify the model role on a simulated Spark against the stand-in hub: the converged copy,
a no-op re-run, a full verify that finds a flipped byte, a new revision, a download killed
for real and resumed, progress lines, ModelScope, a gated repository with a token, check
mode on a fresh box, and every refusal (failures.yml).

The hub is tests/testbed/hub-standin (a container on the scenario's network); the tests set
its fault switches and read its request log from inside the box (curl), where its names
resolve. Timings are written to /tmp/sparkfleet-molecule-timings/model.json for the notes,
never asserted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from spark_testinfra import recap_changed

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
BOX = "model-spark-1"
REPO = "Qwen/Qwen3.5-35B-A3B-FP8"
MODEL_DIR = "/srv/models/Qwen3.5-35B-A3B-FP8"
HUB = "http://hub.sparkfleet.test"
TIMINGS = Path("/tmp/sparkfleet-molecule-timings/model.json")


# --- helpers ---------------------------------------------------------------------------------

def playbook(name: str, extra: dict | None = None, *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook on the scenario's inventory as Molecule runs it (JSON results, no colour)."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    command = ["ansible-playbook", "--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent), *args]
    if extra:
        command += ["--extra-vars", json.dumps(extra)]
    command.append(str(SCENARIO / name))
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)


def record_timing(key: str, seconds: float) -> None:
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    data[key] = round(seconds, 1)
    TIMINGS.write_text(json.dumps(data, indent=1))


def hub(host, method: str, path: str, body: dict | None = None):
    data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
    return json.loads(host.check_output(f"curl -fsS -X {method} {data} {HUB}/_standin/{path}"))


def faults(host, **switches) -> None:
    hub(host, "POST", "faults", {"reset": True, **switches})


def requests_log(host) -> list[dict]:
    return hub(host, "GET", "requests")


def clear_log(host) -> None:
    hub(host, "DELETE", "requests")


def file_downloads(log: list[dict]) -> list[dict]:
    """Requests that carried file content: resolve (small files) and the CDN (weights)."""
    return [r for r in log if r["method"] == "GET" and r["status"] in (200, 206)
            and ("/resolve/" in r["path"] or r["path"].startswith("/repos/"))]


def downloaded_bytes(log: list[dict]) -> int:
    return sum(r["bytes"] for r in file_downloads(log))


@pytest.fixture(scope="module")
def repo(host) -> dict:
    return hub(host, "GET", "repos")["repos"][REPO]


def commit_files(repo: dict, ref: str) -> dict:
    refs = {**repo["refs"]["branches"], **repo["refs"]["tags"]}
    return repo["commits"][refs.get(ref, ref)]["files"]


def manifest(host, directory: str = MODEL_DIR) -> dict:
    return json.loads(host.file(f"{directory}/sparkfleet-manifest.json").content_string)


def sums_pass(host, directory: str = MODEL_DIR) -> bool:
    return host.run(f"cd {directory} && sha256sum --quiet -c SHA256SUMS").rc == 0


def leftovers(host, directory: str) -> list[str]:
    out = host.run(f"find {directory} -name '*.incomplete' -o -name '.sparkfleet-staging' -o -type l").stdout
    return out.split()


# --- the converged copy ----------------------------------------------------------------------

def test_converged_copy_is_the_main_commit_verified(host, repo):
    got = manifest(host)
    assert got["repo"] == REPO and got["source"] == "huggingface"
    assert got["commit"] == repo["refs"]["branches"]["main"]
    expected = commit_files(repo, "main")
    assert {f["path"]: f["sha256"] for f in got["files"]} == {p: m["sha256"] for p, m in expected.items()}
    assert sums_pass(host)
    assert leftovers(host, MODEL_DIR) == []


def test_venv_has_the_pinned_clients_and_the_system_python_does_not(host):
    freeze = host.check_output("/opt/sparkfleet/model-venv/bin/python -m pip freeze")
    assert "huggingface_hub==2.4.0" in freeze.replace("-", "_") or "huggingface-hub==2.4.0" in freeze
    assert "modelscope==1.40.0" in freeze
    assert "modelscope-hub==0.5.1" in freeze.replace("_", "-")
    assert host.run("/usr/bin/python3 -c 'import huggingface_hub'").rc != 0


def test_nothing_is_left_running_or_behind(host):
    for unit in ("sparkfleet-model-fetch.service", "sparkfleet-model-seed.service"):
        assert host.check_output(f"systemctl show -p ActiveState --value {unit}") == "inactive"
    assert not host.file("/run/sparkfleet-model-token").exists


# --- re-runs --------------------------------------------------------------------------------

def test_noop_rerun_changes_nothing_and_transfers_no_file_byte(host):
    clear_log(host)
    begin = time.monotonic()
    result = playbook("converge.yml")
    record_timing("noop_rerun_seconds", time.monotonic() - begin)
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) == 0
    assert file_downloads(requests_log(host)) == []


def test_full_verify_finds_a_byte_flipped_with_its_mtime_kept(host, repo):
    shard = sorted(p for p in commit_files(repo, "main") if p.endswith(".safetensors"))[1]
    path = f"{MODEL_DIR}/{shard}"
    host.check_output(
        "python3 -c \"import os,sys; p=sys.argv[1]; s=os.stat(p); f=open(p,'r+b'); f.seek(4096); b=f.read(1); "
        "f.seek(4096); f.write(bytes([b[0]^1])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))\" " + path)
    assert not sums_pass(host)
    clear_log(host)
    begin = time.monotonic()
    full = playbook("converge.yml", {"model_verify": "full"})
    record_timing("full_verify_seconds", time.monotonic() - begin)
    assert full.returncode == 0, full.stdout[-3000:]
    assert recap_changed(full.stdout) >= 1
    assert sums_pass(host)
    fetched = {r["path"] for r in file_downloads(requests_log(host))}
    assert len(fetched) == 1 and (shard in next(iter(fetched)) or "/repos/" in next(iter(fetched)))


def test_new_revision_fetches_only_what_changed(host, repo):
    main, v1 = commit_files(repo, "main"), commit_files(repo, "v1")
    changed = sorted(p for p in main if main[p]["sha256"] != v1.get(p, {}).get("sha256"))
    assert changed, "the stand-in's two commits differ"
    # Check mode plans what the run then fetches: the small files the move did not change are kept.
    planned = playbook("converge.yml", {"model_revision": "v1"}, "--check")
    assert planned.returncode == 0, planned.stdout[-3000:]
    assert f"would download {len(changed)} of {len(v1)} files" in planned.stdout
    clear_log(host)
    result = playbook("converge.yml", {"model_revision": "v1"})
    assert result.returncode == 0, result.stdout[-3000:]
    assert recap_changed(result.stdout) >= 1
    assert manifest(host)["commit"] == repo["refs"]["tags"]["v1"]
    assert sums_pass(host)
    assert downloaded_bytes(file_downloads(requests_log(host))) == sum(v1[p]["size"] for p in changed)


# --- an interrupted download, progress ----------------------------------------------------------

def state_of(host) -> dict:
    result = host.run("cat /var/lib/sparkfleet/model/fetch-state.json")
    try:
        return json.loads(result.stdout) if result.rc == 0 else {}
    except ValueError:
        return {}


def test_download_killed_mid_file_then_rerun_completes(host, repo):
    directory = "/srv/models/killed"
    files = commit_files(repo, "main")
    total = sum(m["size"] for m in files.values())
    # Per connection; the program fetches 4 files at once: about 4 MiB/s in all, ~25 s for the model.
    faults(host, throttle_bps=1024 * 1024)
    clear_log(host)
    # The previous run's final state must not be mistaken for this one's progress.
    host.run("rm -f /var/lib/sparkfleet/model/fetch-state.json")
    log_path = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "killed-run.log"
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
           "ANSIBLE_COLLECTIONS_PATH": str(PROJECT / ".ansible" / "collections")}
    with log_path.open("w") as out:
        run = subprocess.Popen(
            ["ansible-playbook", "--inventory", str(Path(env["MOLECULE_INVENTORY_FILE"]).parent),
             "--extra-vars", json.dumps({"model_local_dir": directory, "model_progress_interval": 2}),
             str(SCENARIO / "converge.yml")], stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + 300
            state: dict = {}
            while time.monotonic() < deadline:
                time.sleep(0.5)
                state = state_of(host)
                if state.get("phase") == "downloading" and state.get("bytes_done", 0) >= 30 * 1024 * 1024:
                    break
            assert state.get("phase") == "downloading", f"the throttled download did not get going: {state}"
            killed = host.run("systemctl kill -s KILL sparkfleet-model-fetch.service")
            assert killed.rc == 0, killed.stderr
            assert run.wait(timeout=180) != 0
        finally:
            run.kill()
    output = log_path.read_text()
    progress = re.findall(r"model: [\w-]+: downloading [\d.]+ \w+ / [\d.]+ \w+ \([\d.]+%\), [\d.]+ \w+/s, ETA",
                          output)
    assert progress, output[-3000:]
    assert "stopped without saying why" in output
    verified_before = state_of(host).get("fetched") or state.get("fetched") or []
    faults(host)
    clear_log(host)
    begin = time.monotonic()
    rerun = playbook("converge.yml", {"model_local_dir": directory})
    record_timing("resume_after_kill_seconds", time.monotonic() - begin)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert sums_pass(host, directory)
    assert leftovers(host, directory) == []
    again = downloaded_bytes(requests_log(host))
    kept = sum(files[p]["size"] for p in verified_before if p in files)
    record_timing("killed_at_bytes", state.get("bytes_done", 0))
    record_timing("killed_rerun_bytes", again)
    record_timing("killed_total_bytes", total)
    # At most the files in flight are fetched again: nothing verified before the kill.
    assert again <= total - kept
    host.run(f"rm -rf {directory}")


# --- other sources and tokens -----------------------------------------------------------------

def test_modelscope_source(host, repo):
    directory = "/srv/models/modelscope"
    clear_log(host)
    result = playbook("converge.yml", {"model_source": "modelscope", "model_local_dir": directory})
    assert result.returncode == 0, result.stdout[-3000:]
    got = manifest(host, directory)
    assert got["source"] == "modelscope"
    assert got["commit"] == repo["refs"]["branches"]["master"]
    assert sums_pass(host, directory)
    assert any(r["path"].startswith("/api/v1/models/") for r in requests_log(host))
    host.check_output(f"rm -rf {directory}")


def test_gated_repository_with_the_token_leaves_no_trace_of_it(host):
    directory = "/srv/models/gated"
    token = hub(host, "GET", "repos")["token"]
    result = playbook("converge.yml", {"model_repo_id": "sparkfleet-test/gated-model", "model_token": token,
                                       "model_local_dir": directory})
    assert result.returncode == 0, result.stdout[-3000:]
    assert sums_pass(host, directory)
    assert token not in result.stdout
    assert not host.file("/run/sparkfleet-model-token").exists
    assert token not in host.check_output("journalctl --no-pager -o cat -n 2000")
    assert host.run(f"grep -rl {token} /var/lib/sparkfleet /opt/sparkfleet {directory}").stdout == ""
    host.check_output(f"rm -rf {directory}")


# --- transient faults: a one-off 503 on every file, the published result --------------------------

def test_one_503_per_file_is_retried_and_shown_and_the_result_is_published(host, repo):
    directory = "/srv/models/flaky"
    files = commit_files(repo, "main")
    faults(host, file_503_once=True)
    clear_log(host)
    try:
        result = playbook("published.yml", {"model_local_dir": directory})
    finally:
        faults(host)
    assert result.returncode == 0, result.stdout[-3000:]
    assert sums_pass(host, directory)
    refused = [r for r in requests_log(host) if r["status"] == 503]
    assert len(refused) == len(files)
    state = state_of(host)
    assert state["retries"] == len(files) and state["last_retry"]["why"] == "HTTP 503"
    assert state["bytes_downloaded"] == downloaded_bytes(requests_log(host))
    published = json.loads(re.search(r"PUBLISHED (\{.*\}) END", result.stdout.replace("\\\"", '"')).group(1))
    planned, ready = published["planned"], published["ready"]
    assert planned["stage"] == "planned" and ready["stage"] == "ready"
    assert planned["files_to_fetch"] == len(files) and planned["needs_download"] is True
    assert planned["config_json"] == "absent" and ready["config_json"] == "file"
    assert ready["complete"] is True and ready["files_to_fetch"] == 0 and ready["bytes_to_fetch"] == 0
    assert ready["commit"] == planned["commit"] == repo["refs"]["branches"]["main"]
    assert {f["path"]: f["size"] for f in ready["files"]} == {p: m["size"] for p, m in files.items()}
    assert ready["bytes"] == sum(m["size"] for m in files.values())
    assert ready["weights_bytes"] == sum(m["size"] for p, m in files.items() if p.endswith(".safetensors"))
    assert (ready["dir"], ready["source"], ready["repo"], ready["revision"]) == (
        directory, "huggingface", REPO, "main")
    host.check_output(f"rm -rf {directory}")


# --- check mode on a fresh box ------------------------------------------------------------------

def test_check_mode_on_a_fresh_directory_says_what_it_would_download(host, repo):
    directory = "/srv/models/fresh-check"
    result = playbook("converge.yml", {"model_local_dir": directory}, "--check")
    assert result.returncode == 0, result.stdout[-3000:]
    files = commit_files(repo, "main")
    total = sum(m["size"] for m in files.values())
    assert f"would download {len(files)} of {len(files)} files" in result.stdout
    assert f"({total} bytes)" in result.stdout
    assert not host.file(directory).exists


# --- refusals -----------------------------------------------------------------------------------

CASES = {
    "unknown-repo": ("nobody/no-such-model", "model_repo_id"),
    "unknown-revision": ("no-such-branch", "model_revision"),
    "gated": ("gated", "model_token"),
    "bad-token": ("token was refused", "model_token"),
    "unreachable": ("unreachable", "model_endpoint"),
    "disk": ("Not enough disk space", "model_local_dir"),
    "corrupt": ("HashMismatch", "model_endpoint"),
    "stalled": ("2 attempts", "model_api_timeout"),
    "read-only": ("NotWritable", "model_local_dir"),
}


@pytest.fixture(scope="module")
def failure_records(host) -> Path:
    records = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "model-failures"
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    begin = time.monotonic()
    result = playbook("failures.yml", {"failures_records": str(records)})
    record_timing("failures_playbook_seconds", time.monotonic() - begin)
    assert result.returncode == 0, result.stdout[-3000:]
    return records


@pytest.mark.parametrize("case", sorted(CASES))
def test_refusal_names_what_was_found_and_what_to_set(failure_records: Path, case: str):
    got = json.loads((failure_records / f"{case}.json").read_text())
    assert got["failed"] is True, f"{case}: the role did not fail"
    found, variable = CASES[case]
    assert found in got["msg"], got["msg"]
    assert variable in got["msg"], got["msg"]


def test_corrupt_bytes_leave_nothing_corrupt_in_place(host):
    directory = "/srv/models/corrupt"
    weights = host.run(f"ls {directory}/*.safetensors").stdout.split()
    assert weights == []
    assert not host.file(f"{directory}/sparkfleet-manifest.json").exists


# --- the draft model of speculative decoding ----------------------------------------------------------------

DRAFT_REPO = "nvidia/gpt-oss-120b-Eagle3-v3"
DRAFT_DIR = "/srv/models/gpt-oss-120b-Eagle3-v3"


def test_a_recipes_draft_model_is_downloaded_and_verified_beside_the_weights(host):
    """roles/vllm/recipes/gpt-oss-120b-eagle3.yml's draft, staged as site.yml stages it: from the hub, verified,
    with its manifest, in its own directory and state; the main weights and their state stay as they were."""
    main_before = host.check_output(f"cat {MODEL_DIR}/sparkfleet-manifest.json && sha256sum {MODEL_DIR}/*.safetensors")
    state_before = host.check_output("ls -l --time-style=full-iso /var/lib/sparkfleet/model/ 2>/dev/null || true")
    draft = hub(host, "GET", "repos")["repos"][DRAFT_REPO]
    result = playbook("draft.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    got = manifest(host, DRAFT_DIR)
    assert got["repo"] == DRAFT_REPO
    assert got["commit"] == draft["refs"]["branches"]["main"]
    assert sums_pass(host, DRAFT_DIR)
    expected = commit_files(draft, "main")["model.safetensors"]["sha256"]
    assert host.check_output(f"sha256sum {DRAFT_DIR}/model.safetensors").split()[0] == expected
    assert leftovers(host, DRAFT_DIR) == []
    assert host.file("/var/lib/sparkfleet/model-draft").is_directory
    # The main weights, their manifest and the main state directory: untouched.
    assert host.check_output(f"cat {MODEL_DIR}/sparkfleet-manifest.json && sha256sum {MODEL_DIR}/*.safetensors") \
        == main_before
    state_after = host.check_output("ls -l --time-style=full-iso /var/lib/sparkfleet/model/ 2>/dev/null || true")
    assert state_after == state_before
    # Run again: nothing to fetch, nothing changed.
    again = playbook("draft.yml")
    assert again.returncode == 0 and recap_changed(again.stdout) == 0, again.stdout[-3000:]
