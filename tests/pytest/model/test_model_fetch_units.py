"""The fetch program's pure parts: hashes, selection, manifest, quick/full verify, planning, disk
check, state file, leftovers, token, error mapping. No hub, no client downloads."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from model_fetch_helpers import fetch_module as fm

COMMIT = "a" * 40
OTHER = "b" * 40


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def remote_for(data: bytes, path: str = "w.safetensors", lfs: bool = True) -> object:
    if lfs:
        return fm.RemoteFile(path, len(data), hashlib.sha256(data).hexdigest(), "0" * 40)
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    return fm.RemoteFile(path, len(data), None, blob)


def test_git_blob_hash_is_what_git_computes(tmp_path: Path):
    path = write(tmp_path / "config.json", b'{"model_type": "qwen3"}\n')
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    hashes = fm.hash_file(path)
    assert hashes.git_sha1 == git
    assert hashes.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_matches_uses_sha256_when_listed_else_the_git_blob_id(tmp_path: Path):
    data = b"x" * 1000
    path = write(tmp_path / "f", data)
    hashes = fm.hash_file(path)
    assert fm.matches(remote_for(data), hashes)
    assert fm.matches(remote_for(data, lfs=False), hashes)
    assert not fm.matches(remote_for(b"y" * 1000), hashes)
    assert not fm.matches(remote_for(b"y" * 1000, lfs=False), hashes)
    # A listed LFS file's git blob id is its pointer's: never compared with the content's.
    assert not fm.matches(fm.RemoteFile("f", 1000, None, None), hashes)


@pytest.mark.parametrize(
    ("path", "include", "exclude", "wanted"),
    [
        ("model-00001-of-00004.safetensors", [], [], True),
        ("model-00001-of-00004.safetensors", ["*.json"], [], False),
        ("config.json", ["*.json"], ["tokenizer*"], True),
        ("tokenizer_config.json", ["*.json"], ["tokenizer*"], False),
        ("original/consolidated.pth", [], ["original/"], False),
        ("original/consolidated.pth", ["original/"], [], True),
    ],
)
def test_include_exclude_like_huggingface_hub(path, include, exclude, wanted):
    assert fm.planner.selected(path, include, exclude) is wanted


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "a/../../b", ".sparkfleet-staging/x", ""])
def test_listed_paths_cannot_leave_the_model_directory(path):
    with pytest.raises(fm.FetchError):
        fm.safe_relpath(path)


def listing(*files: object, commit: str = COMMIT) -> object:
    return fm.Listing(commit, tuple(files), "huggingface", "org/model", "main", "http://hub")


def verified(local_dir: Path, data: bytes, path: str = "w.safetensors", lfs: bool = True, commit: str = COMMIT):
    """A file in place plus the manifest entry an earlier run wrote for it."""
    target = write(local_dir / path, data)
    remote = remote_for(data, path, lfs)
    entry = fm.entry_for(target, path, fm.hash_file(target), commit)
    return remote, entry


def flip_keep_mtime(path: Path) -> None:
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_quick_trusts_size_and_mtime_full_rehashes(tmp_path: Path):
    remote, entry = verified(tmp_path, os.urandom(5000))
    assert fm.check_file(tmp_path, remote, entry, COMMIT, full=False).action == "keep"
    flip_keep_mtime(tmp_path / remote.path)
    # Quick verify reads no byte: the flipped byte passes, by design, and full verify catches it.
    assert fm.check_file(tmp_path, remote, entry, COMMIT, full=False).action == "keep"
    assert fm.check_file(tmp_path, remote, entry, COMMIT, full=True).action == "repair"


def test_a_touched_file_is_hashed_and_kept_when_intact(tmp_path: Path):
    remote, entry = verified(tmp_path, os.urandom(5000))
    os.utime(tmp_path / remote.path, (1, 1))
    planned = fm.check_file(tmp_path, remote, entry, COMMIT, full=False)
    assert planned.action == "keep" and planned.entry["mtime"] == 1


def test_missing_truncated_and_unknown_files(tmp_path: Path):
    data = os.urandom(5000)
    remote = remote_for(data)
    assert fm.check_file(tmp_path, remote, None, COMMIT, full=False).action == "fetch"
    write(tmp_path / remote.path, data[:100])
    assert fm.check_file(tmp_path, remote, None, COMMIT, full=False).action == "repair"
    write(tmp_path / remote.path, data)  # a copy put there by hand, no manifest: hashed and kept
    assert fm.check_file(tmp_path, remote, None, COMMIT, full=False).action == "keep"


def test_an_older_revisions_verified_file_is_an_update_not_a_repair(tmp_path: Path):
    _remote, entry = verified(tmp_path, b"old content", commit=OTHER)
    new = remote_for(b"new content, longer")
    assert fm.check_file(tmp_path, new, entry, COMMIT, full=False).action == "fetch"
    small_new = remote_for(b"new", "config.json", lfs=False)
    _remote, small_entry = verified(tmp_path, b"old", "config.json", lfs=False, commit=OTHER)
    assert fm.check_file(tmp_path, small_new, small_entry, COMMIT, full=False).action == "fetch"


def test_small_files_are_kept_by_commit_or_git_blob_id(tmp_path: Path):
    remote, entry = verified(tmp_path, b'{"a": 1}', "config.json", lfs=False)
    assert fm.check_file(tmp_path, remote, entry, COMMIT, full=False).action == "keep"
    # Another commit (a branch moved): the manifest's git blob id says it is the same file, unread.
    assert fm.check_file(tmp_path, remote, {**entry, "commit": OTHER}, COMMIT, full=False).action == "keep"
    # An older manifest without the blob id: fetched (a few bytes), as the check, which cannot read it, plans.
    no_blob = {k: v for k, v in entry.items() if k != "git_sha1"}
    assert fm.check_file(tmp_path, remote, no_blob, OTHER, full=False).action == "fetch"


def test_a_symlink_is_replaced_by_a_plain_file(tmp_path: Path):
    data = os.urandom(100)
    target = write(tmp_path / "elsewhere", data)
    (tmp_path / "w.safetensors").symlink_to(target)
    assert fm.check_file(tmp_path, remote_for(data), None, COMMIT, full=True).action == "repair"


def test_manifest_and_sums_are_rewritten_only_when_they_change(tmp_path: Path):
    _remote, entry = verified(tmp_path, b"weights")
    assert fm.write_manifest(tmp_path, listing(), [entry]) is True
    manifest = json.loads((tmp_path / fm.MANIFEST).read_text())
    assert set(manifest) == {
        "format", "source", "endpoint", "repo", "revision", "commit", "include", "exclude", "copied_from",
        "written_at", "files",
    }  # fmt: skip
    assert manifest["files"] == [{k: entry[k] for k in ("path", "size", "sha256", "git_sha1", "mtime")}]
    assert (manifest["include"], manifest["exclude"]) == ([], [])
    assert fm.write_manifest(tmp_path, listing(), [entry]) is False
    # Provenance alone (another endpoint, a seed) is no change to the copy in place.
    seeded = fm.Listing(COMMIT, (), "huggingface", "org/model", "main", "http://mirror", copied_from="http://seed")
    assert fm.write_manifest(tmp_path, seeded, [entry]) is False
    assert fm.write_manifest(tmp_path, listing(commit=OTHER), [entry]) is True
    sums = (tmp_path / fm.SUMS).read_text()
    assert sums == f"{hashlib.sha256(b'weights').hexdigest()}  w.safetensors\n"
    check = subprocess.run(["sha256sum", "-c", fm.SUMS], cwd=tmp_path, capture_output=True, check=False)
    assert check.returncode == 0


def test_a_manifest_of_another_repo_or_source_proves_nothing(tmp_path: Path):
    _remote, entry = verified(tmp_path, b"weights")
    fm.write_manifest(tmp_path, listing(), [entry])
    assert fm.load_manifest(tmp_path, "huggingface", "org/model") is not None
    assert fm.load_manifest(tmp_path, "huggingface", "org/other") is None
    assert fm.load_manifest(tmp_path, "modelscope", "org/model") is None
    assert fm.load_manifest(tmp_path, "seed", "org/model") is not None  # a peer's copy of any source


def test_the_journal_of_an_interrupted_run_counts_as_verified(tmp_path: Path):
    (tmp_path / fm.STAGING).mkdir()
    _remote, entry = verified(tmp_path, b"weights")
    fm.journal_add(tmp_path, entry)
    (tmp_path / fm.STAGING / fm.JOURNAL).open("a").write('{"truncated line')
    known = fm.planner.known_entries(None, fm.load_journal(tmp_path))
    assert known["w.safetensors"]["sha256"] == entry["sha256"]


def args_for(**overrides: object) -> object:
    argv = ["--source", "huggingface", "--endpoint", "http://hub", "--repo", "org/model", "--local-dir", "/x"]
    argv += ["--revision", str(overrides.pop("revision", COMMIT))]
    return fm.parse_args(argv + [str(a) for a in overrides.pop("extra", [])])


def test_a_pinned_commit_in_the_manifest_needs_no_listing(tmp_path: Path):
    manifest = fm.manifest_body(listing(), [verified(tmp_path, b"w")[1]])
    assert fm.pinned_listing(args_for(), manifest).commit == COMMIT
    assert fm.pinned_listing(args_for(revision="main"), manifest) is None  # a branch can move
    assert fm.pinned_listing(args_for(revision=OTHER), manifest) is None
    assert fm.pinned_listing(args_for(extra=["--verify", "full"]), manifest) is None
    # A manifest written with a narrower selection does not list every file a wider one needs.
    narrow = fm.manifest_body(listing(), [verified(tmp_path, b"w")[1]], {"include": ["*.json"], "exclude": []})
    assert fm.pinned_listing(args_for(), narrow) is None
    assert fm.pinned_listing(args_for(extra=["--include", "*.json"]), narrow).commit == COMMIT


def test_plan_output_and_disk_check(tmp_path: Path):
    small, big = remote_for(b"s", "a"), remote_for(b"b" * 10, "b")
    plan = [fm.PlanEntry(small, "keep"), fm.PlanEntry(big, "fetch")]
    out = fm.plan_output(listing(small, big), plan, free=100, margin=50)
    assert out == {
        "commit": COMMIT,
        "bytes_total": 11,
        "bytes_to_fetch": 10,
        "free_bytes": 100,
        "enough_disk": True,
        "files": [{"path": "a", "size": 1, "action": "keep"}, {"path": "b", "size": 10, "action": "fetch"}],
    }
    assert fm.plan_output(listing(small, big), plan, free=100, margin=95)["enough_disk"] is False
    with pytest.raises(fm.FetchError) as error:
        fm.check_disk(tmp_path / "not" / "yet", 10**6, 10**18)
    assert error.value.kind == "DiskFull"
    assert "1000000 bytes" in error.value.message and "model_local_dir" in error.value.message
    fm.check_disk(tmp_path, 0, 10**18)  # nothing to fetch needs no space


def test_state_counts_bytes_rate_and_eta():
    state = fm.State(None)
    state.bytes_total = 1000
    state.samples = [(0.0, 0)]
    state.received("a", 300)
    state.received("a", -100)  # the client rewound a response that ignored Range
    state.placed("b", 200, repaired=True)
    snap = state.snapshot()
    # The rewind drops bytes from the file, not from what arrived: 300 bytes crossed the network.
    assert snap["bytes_done"] == 400 and snap["bytes_downloaded"] == 300
    assert snap["repaired"] == ["b"] and snap["changed"] is True and snap["files_done"] == 1
    assert snap["rate_bps"] == 0 and snap["eta_seconds"] is None  # one sample in 10 s: no rate yet
    state.samples = [(time.time() - 2, 0)]
    snap = state.snapshot()
    assert 140 <= snap["rate_bps"] <= 160 and snap["eta_seconds"] > 0


def test_state_file_is_written_while_running_and_at_the_end(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(fm, "STATE_INTERVAL", 0.05)
    state = fm.State(tmp_path / "state.json")
    with fm.state_writer(state):
        state.phase = "downloading"
        time.sleep(0.3)
        assert json.loads((tmp_path / "state.json").read_text())["phase"] == "downloading"
        state.phase = "done"
    written = json.loads((tmp_path / "state.json").read_text())
    assert written["phase"] == "done" and written["pid"] == os.getpid()
    assert not list(tmp_path.glob(".state.json.*"))  # atomic: no temporary file left


def test_leftovers_go_resumable_partials_and_the_journal_stay(tmp_path: Path):
    staging = tmp_path / fm.STAGING
    hf_partial = write(staging / ".cache/huggingface/download/abc.0123.deadbeef.incomplete", b"x")
    old_partial = write(tmp_path / ".cache/huggingface/download/abc.feed.incomplete", b"x")
    unverified = write(staging / "model-00001.safetensors", b"x")
    seed_part = write(staging / "model-00002.safetensors.part", b"x")
    other_part = write(staging / "gone.safetensors.part", b"x")
    journal = write(staging / fm.JOURNAL, b"{}\n")
    fm.clean_leftovers(tmp_path, {"model-00002.safetensors.part"})
    assert not hf_partial.exists() and not old_partial.exists() and not unverified.exists()
    assert not other_part.exists()
    assert seed_part.exists() and journal.exists()


def test_token_from_credentials_directory_first(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "from-env")
    monkeypatch.setenv("MODELSCOPE_API_TOKEN", "ms-env")
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    assert fm.read_token("huggingface") == "from-env"
    assert fm.read_token("modelscope") == "ms-env"
    (tmp_path / "model-token").write_text("from-credential\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert fm.read_token("huggingface") == "from-credential"


def test_ms_commit_is_the_newest_files_commit():
    blobs = [
        {"Path": "a", "Revision": OTHER, "CommittedDate": 100},
        {"Path": "b", "Revision": COMMIT, "CommittedDate": 200},
    ]
    assert fm.ms_commit("master", blobs) == COMMIT
    assert fm.ms_commit(OTHER, blobs) == OTHER
    assert fm.ms_commit("master", [{"Path": "a"}]) == "master"


def hf_error(status: int, url: str, code: str | None = None, message: str | None = None) -> Exception:
    """The exception huggingface_hub itself raises for such a response (its hf_raise_for_status)."""
    httpx2 = pytest.importorskip("httpx2")
    hf_raise_for_status = pytest.importorskip("huggingface_hub.utils").hf_raise_for_status

    headers = {k: v for k, v in {"X-Error-Code": code, "X-Error-Message": message}.items() if v}
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("GET", url))
    with pytest.raises(Exception) as raised:
        hf_raise_for_status(response)
    return raised.value


API = "https://hub/api/models/org/model/revision/main"


@pytest.mark.parametrize(
    ("status", "url", "code", "message", "token", "kind", "names"),
    [
        (404, API, "RepoNotFound", None, False, "RepoNotFound", "model_repo_id"),
        (401, API, None, None, False, "RepoNotFound", "model_token"),
        (401, API.replace("https:", "http:"), None, None, False, "RepoNotFound", "model_token"),
        (404, API, "RevisionNotFound", None, False, "RevisionNotFound", "model_revision"),
        (403, API, "GatedRepo", None, True, "GatedRepo", "model_token"),
        (401, API, None, "Invalid credentials in Authorization header", True, "BadToken", "model_token"),
        (404, "http://hub/org/model/resolve/c/x.json", "EntryNotFound", None, False, "EntryNotFound", "x.json"),
        (503, API, None, None, False, "HubUnreachable", "model_endpoint"),
    ],
)
def test_huggingface_errors_map_to_kinds(status, url, code, message, token, kind, names):  # noqa: PLR0917
    error = hf_error(status, url, code, message)
    mapped = fm.map_hf_error(error, "http://hub", "org/model", "main", token)
    assert mapped.kind == kind
    assert names in mapped.message or names in str(error)


def test_connection_errors_name_the_endpoint():
    httpx2 = pytest.importorskip("httpx2")
    mapped = fm.map_hf_error(httpx2.ConnectError("refused"), "http://mirror:8080", "org/model", "main", False)
    assert mapped.kind == "HubUnreachable" and "http://mirror:8080" in mapped.message
    assert "model_endpoint" in mapped.message


def test_wrapped_errors_are_mapped_by_their_cause():
    pytest.importorskip("huggingface_hub")
    source = fm.HuggingFaceSource("http://hub", "org/model", "main", None, fm.State(None))
    inner = hf_error(403, API, "GatedRepo")
    try:
        try:
            raise inner
        except Exception as error:
            raise ValueError("Force download failed due to the above error.") from error
    except ValueError as outer:
        assert source.map_error(outer).kind == "GatedRepo"


def test_checking_reports_the_bytes_read(tmp_path: Path):
    state = fm.State(None)
    first, _entry = verified(tmp_path, os.urandom(3000), "a")
    second = remote_for(os.urandom(2000), "b")  # not there: decided without reading
    state.bytes_total = 5000
    state.phase = "checking"
    seen = []
    original = state.checked

    def spy(count: int, whole_file: bool = False) -> None:
        original(count, whole_file)
        seen.append(state.snapshot()["bytes_done"])

    state.checked = spy
    plan = fm.make_plan(tmp_path, listing(first, second), {}, full=True, state=state)
    assert [p.action for p in plan] == ["keep", "fetch"]
    assert seen == [3000, 3000, 5000]  # hashed bytes of "a", then "a" decided, then "b" decided
