"""The stand-in hub must serve the REAL clients: huggingface_hub 2.4.0 and modelscope 1.40.0
download from it unmodified, and its errors surface as the clients' own exception classes.

Expected hashes come from the stand-in's own listing (GET /_standin/repos) and are checked
against what the clients wrote to disk.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import httpx2  # huggingface_hub's HTTP client
import pytest
import requests  # modelscope's HTTP client
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from modelscope import snapshot_download as ms_snapshot_download
from modelscope.hub.api import HubApi as MsApi
from modelscope_hub.errors import FileDownloadError

sys.path.insert(0, str(Path(__file__).resolve().parent / "hub-standin"))
from hubproc import GATED, MODEL, TOKEN, Hub, hub_fixture, hub_state_dir_fixture

# pytest finds the fixtures `hub` and `hub_state_dir` as names of this module.
FIXTURES = (hub_fixture, hub_state_dir_fixture)

SHARD = "model-00004-of-00004.safetensors"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def client_env(hub: Hub, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING", "MODELSCOPE"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home / "hf-home"), HF_HUB_DISABLE_XET="1",
               HF_HUB_DISABLE_TELEMETRY="1", MODELSCOPE_ENDPOINT=hub.url, MODELSCOPE_CACHE=str(home / "ms-cache"),
               HOME=str(home))
    return env


def assert_same_files(directory: Path, expected: dict[str, dict[str, Any]]) -> None:
    got = {p.relative_to(directory).as_posix(): sha256_of(p)
           for p in directory.rglob("*") if p.is_file() and not p.relative_to(directory).parts[0].startswith(".cache")
           and p.name not in {".mdl", ".msc", ".mv"}}
    assert got == {path: meta["sha256"] for path, meta in expected.items()}


def test_hf_download_cli_fetches_every_file_through_the_cdn(hub: Hub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    result = subprocess.run(["hf", "download", MODEL, "--local-dir", str(target)], env=client_env(hub, tmp_path),
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    files = hub.files("main")
    assert_same_files(target, files)
    log = hub.requests()
    commit = hub.commit("main")
    assert any(r["path"] == f"/api/models/{MODEL}/revision/main" and r["status"] == 200 for r in log)
    assert any(r["path"].startswith(f"/api/models/{MODEL}/tree/{commit}?recursive=true") for r in log)
    weights = [p for p, meta in files.items() if meta["lfs"]]
    redirects = {r["path"].rsplit("/", 1)[1] for r in log if r["status"] == 302}
    assert redirects == set(weights)
    cdn_bytes = sum(r["bytes"] for r in log if r["path"].startswith("/repos/") and r["method"] == "GET")
    assert cdn_bytes == sum(files[p]["size"] for p in weights)


@pytest.mark.parametrize("revision", ["v1", "commit-of-v1", "main"])
def test_snapshot_download_of_each_revision(hub: Hub, tmp_path: Path, revision: str) -> None:
    wanted = hub.commit("v1") if revision == "commit-of-v1" else revision
    path = snapshot_download(MODEL, revision=wanted, local_dir=tmp_path / "m", endpoint=hub.url,
                             cache_dir=tmp_path / "cache")
    assert_same_files(Path(path), hub.files(wanted))


def test_the_newer_commit_changes_one_shard_and_the_config(hub: Hub) -> None:
    old, new = hub.files("v1"), hub.files("main")
    assert old.keys() == new.keys()
    changed = sorted(p for p in old if old[p]["sha256"] != new[p]["sha256"])
    assert changed == ["config.json", SHARD]


def test_model_info_and_tree_carry_the_hashes(hub: Hub, tmp_path: Path) -> None:
    api = HfApi(endpoint=hub.url)
    info = api.model_info(MODEL, revision="v1", files_metadata=True)
    assert info.sha == hub.commit("v1")
    tree = {f.path: f for f in api.list_repo_tree(MODEL, revision=info.sha, recursive=True)}
    assert {s.rfilename for s in info.siblings} == set(tree)
    config = Path(hf_hub_download(MODEL, "config.json", revision=info.sha, local_dir=tmp_path, endpoint=hub.url))
    assert tree["config.json"].blob_id == git_blob_id(config.read_bytes())
    assert tree["config.json"].lfs is None
    shard = Path(hf_hub_download(MODEL, SHARD, revision=info.sha, local_dir=tmp_path, endpoint=hub.url))
    sibling = next(s for s in info.siblings if s.rfilename == SHARD)
    assert tree[SHARD].lfs.sha256 == sibling.lfs.sha256 == sha256_of(shard)
    assert tree[SHARD].size == sibling.size == shard.stat().st_size
    # An LFS file's git oid is the blob id of its pointer file, not of the content.
    pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256_of(shard)}\n"
               f"size {shard.stat().st_size}\n")
    assert tree[SHARD].blob_id == git_blob_id(pointer.encode())


@pytest.mark.parametrize("case", [
    ("nobody/no-such-model", "main", "config.json", RepositoryNotFoundError),
    (MODEL, "no-such-branch", "config.json", RevisionNotFoundError),
    (MODEL, "main", "no-such-file.json", EntryNotFoundError),
    (GATED, "main", "config.json", GatedRepoError),
], ids=lambda case: case[3].__name__)
def test_errors_surface_as_the_clients_exceptions(
        hub: Hub, tmp_path: Path, case: tuple[str, str, str, type[Exception]]) -> None:
    repo, revision, filename, error = case
    with pytest.raises(error):
        hf_hub_download(repo, filename, revision=revision, local_dir=tmp_path, endpoint=hub.url, token=False)
    if error is not EntryNotFoundError:
        with pytest.raises(error):
            snapshot_download(repo, revision=revision, local_dir=tmp_path / "snap", endpoint=hub.url, token=False)


def test_the_gated_repo_needs_the_token_and_refuses_a_wrong_one(hub: Hub, tmp_path: Path) -> None:
    path = snapshot_download(GATED, local_dir=tmp_path / "ok", endpoint=hub.url, token=TOKEN)
    assert_same_files(Path(path), hub.files("main", GATED))
    with pytest.raises(HfHubHTTPError) as wrong:
        hf_hub_download(GATED, "config.json", local_dir=tmp_path / "bad", endpoint=hub.url, token="hf_wrong")
    assert wrong.value.response.status_code == 401
    assert not isinstance(wrong.value, (RepositoryNotFoundError, GatedRepoError))


def test_require_token_gates_every_repo(hub: Hub, tmp_path: Path) -> None:
    hub.faults(require_token=True)
    with pytest.raises(GatedRepoError):
        hf_hub_download(MODEL, "config.json", local_dir=tmp_path / "a", endpoint=hub.url, token=False)
    hf_hub_download(MODEL, "config.json", local_dir=tmp_path / "b", endpoint=hub.url, token=TOKEN)
    hub.faults(reset=True)
    hf_hub_download(MODEL, "config.json", local_dir=tmp_path / "c", endpoint=hub.url, token=False)


def cdn_location(hub: Hub, filename: str, revision: str = "main") -> str:
    """The signed CDN URL `resolve` redirects a weight file to."""
    url = f"{hub.url}/{MODEL}/resolve/{revision}/{filename}"
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(urllib.request.Request(url, method="HEAD"))
    assert redirect.value.code == 302
    headers = redirect.value.headers
    meta = hub.files(revision)[filename]
    assert headers["X-Linked-Etag"] == f'"{meta["sha256"]}"'
    assert int(headers["X-Linked-Size"]) == meta["size"]
    assert headers["X-Repo-Commit"] == hub.commit(revision)
    return headers["Location"]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_range_requests_answer_206_with_the_tail(hub: Hub) -> None:
    location = cdn_location(hub, SHARD)
    whole = urllib.request.urlopen(location).read()
    assert hashlib.sha256(whole).hexdigest() == hub.files()[SHARD]["sha256"]
    with urllib.request.urlopen(urllib.request.Request(location, headers={"Range": "bytes=1000-"})) as part:
        assert part.status == 206
        assert part.headers["Content-Range"] == f"bytes 1000-{len(whole) - 1}/{len(whole)}"
        assert part.read() == whole[1000:]
    with pytest.raises(urllib.error.HTTPError) as beyond:
        urllib.request.urlopen(urllib.request.Request(location, headers={"Range": f"bytes={len(whole)}-"}))
    assert beyond.value.code == 416


def test_the_cdn_refuses_an_unsigned_url(hub: Hub) -> None:
    location = cdn_location(hub, SHARD)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(location.split("?")[0])
    assert refused.value.code == 403


def test_cut_closes_the_connection_mid_file(hub: Hub) -> None:
    location = cdn_location(hub, SHARD)
    hub.faults(cut_after_bytes=3_000_000)
    with pytest.raises(http.client.IncompleteRead) as short:
        urllib.request.urlopen(location).read()
    assert len(short.value.partial) == 3_000_000


def test_the_client_resumes_a_cut_transfer_with_range(hub: Hub, tmp_path: Path) -> None:
    # http_get keeps only whole 10 MiB chunks (huggingface_hub 2.4.0 constants.py:40) and
    # resumes from there with Range (file_download.py:376-378): each response carries 15 MB.
    hub.faults(cut_after_bytes=15_000_000)
    path = hf_hub_download(MODEL, SHARD, local_dir=tmp_path, endpoint=hub.url)
    assert sha256_of(Path(path)) == hub.files()[SHARD]["sha256"]
    ranges = [r for r in hub.requests() if r["path"].startswith("/repos/") and r["range"]]
    assert ranges and all(r["status"] == 206 for r in ranges)


def test_a_transfer_cut_before_the_first_chunk_fails_in_the_client(hub: Hub, tmp_path: Path) -> None:
    hub.faults(cut_after_bytes=1_000_000)
    with pytest.raises(httpx2.RemoteProtocolError):
        hf_hub_download(MODEL, SHARD, local_dir=tmp_path, endpoint=hub.url)
    cdn = [r for r in hub.requests() if r["path"].startswith("/repos/")]
    assert len(cdn) > 1 and all(r["bytes"] == 1_000_000 for r in cdn)  # retried from 0, never resumed


# ---------------------------------------------------------------- transient faults, as the real clients meet them


def test_a_stalled_api_times_out_in_the_client_and_files_still_flow(hub: Hub, tmp_path: Path) -> None:
    hub.faults(stall_api_seconds=30)
    began = time.monotonic()
    with pytest.raises(httpx2.ReadTimeout):
        HfApi(endpoint=hub.url).model_info(MODEL, timeout=1)
    assert time.monotonic() - began < 10
    # The CDN and resolve are not the API: a download of a known file goes on.
    path = hf_hub_download(MODEL, "config.json", local_dir=tmp_path, endpoint=hub.url)
    assert sha256_of(Path(path)) == hub.files()["config.json"]["sha256"]


def test_one_503_from_the_api_is_an_http_error_the_next_request_is_served(hub: Hub) -> None:
    hub.faults(api_503_count=1)
    with pytest.raises(HfHubHTTPError) as unavailable:
        HfApi(endpoint=hub.url).model_info(MODEL, timeout=10)
    assert unavailable.value.response.status_code == 503
    assert HfApi(endpoint=hub.url).model_info(MODEL, timeout=10).sha == hub.commit("main")
    assert hub.faults()["api_503_count"] == 0


def test_one_503_per_file_then_the_file(hub: Hub, tmp_path: Path) -> None:
    hub.faults(file_503_once=True)
    for name in ("config.json", SHARD):  # resolve (a small file), the CDN (a weight file)
        with pytest.raises((HfHubHTTPError, OSError)):
            hf_hub_download(MODEL, name, local_dir=tmp_path / "first", endpoint=hub.url)
        path = hf_hub_download(MODEL, name, local_dir=tmp_path / "second", endpoint=hub.url)
        assert sha256_of(Path(path)) == hub.files()[name]["sha256"]
    assert [r["status"] for r in hub.requests() if r["method"] == "GET" and r["status"] == 503] == [503, 503]


def test_a_reset_once_per_file_is_resumed_by_the_client(hub: Hub, tmp_path: Path) -> None:
    hub.faults(cut_once_after_bytes=12 * 1024 * 1024)
    path = hf_hub_download(MODEL, SHARD, local_dir=tmp_path, endpoint=hub.url)
    assert sha256_of(Path(path)) == hub.files()[SHARD]["sha256"]
    cdn = [r for r in hub.requests() if r["path"].startswith("/repos/") and r["method"] == "GET"]
    assert cdn[0]["bytes"] == 12 * 1024 * 1024  # cut, then resumed with Range
    assert len(cdn) == 2 and cdn[1]["status"] == 206


def test_the_transient_switches_refuse_wrong_types_and_reset(hub: Hub) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        hub.faults(stall_api_seconds=True)
    assert refused.value.code == 400
    hub.faults(api_503_count=2, file_503_once=True, cut_once_after_bytes=5, stall_file_seconds=3)
    assert hub.faults(reset=True) == {
        "throttle_bps": None, "cut_after_bytes": None, "corrupt": False, "require_token": False,
        "stall_api_seconds": None, "api_503_count": None, "file_503_once": False, "cut_once_after_bytes": None,
        "stall_file_seconds": None}


def test_corrupt_bytes_have_the_right_size_and_the_wrong_hash(hub: Hub, tmp_path: Path) -> None:
    hub.faults(corrupt=True)
    # huggingface_hub checks the size only: it accepts the corrupt file.
    path = Path(hf_hub_download(MODEL, SHARD, local_dir=tmp_path, endpoint=hub.url))
    meta = hub.files()[SHARD]
    assert path.stat().st_size == meta["size"]
    assert sha256_of(path) != meta["sha256"]
    config = Path(hf_hub_download(MODEL, "config.json", local_dir=tmp_path, endpoint=hub.url))
    assert sha256_of(config) == hub.files()["config.json"]["sha256"]  # only weight files are corrupted


def test_the_request_log_records_and_clears(hub: Hub, tmp_path: Path) -> None:
    hf_hub_download(MODEL, "config.json", local_dir=tmp_path, endpoint=hub.url)
    log = hub.requests()
    entry = next(r for r in log if r["method"] == "GET" and r["path"].endswith("/config.json"))
    assert entry["status"] == 200
    assert entry["bytes"] == hub.files()["config.json"]["size"]
    assert entry["client"] == "127.0.0.1"
    assert {"time", "method", "host", "path", "status", "bytes", "client"} <= entry.keys()
    hub.clear_requests()
    assert hub.requests() == []


def test_bad_fault_values_are_refused(hub: Hub) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        hub.faults(throttle_bps="fast")
    assert refused.value.code == 400
    assert json.loads(refused.value.read())["error"].startswith("throttle_bps")
    assert hub.faults(throttle_bps=1_000_000)["throttle_bps"] == 1_000_000


# ---------------------------------------------------------------- ModelScope


def ms_download(hub: Hub, tmp_path: Path, repo: str = MODEL, **kwargs: Any) -> Path:
    """modelscope's snapshot_download, pointed at the stand-in by its endpoint argument."""
    return Path(ms_snapshot_download(repo, endpoint=hub.url, cache_dir=str(tmp_path / "ms-cache"), **kwargs))


def test_modelscope_cli_downloads_every_file(hub: Hub, tmp_path: Path) -> None:
    target = tmp_path / "model"
    result = subprocess.run(["modelscope", "download", "--model", MODEL, "--local_dir", str(target)],
                            env=client_env(hub, tmp_path), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert_same_files(target, hub.files("master"))
    log = hub.requests()
    assert any(r["path"] == f"/api/v1/models/{MODEL}/repo/files?Revision=master&Recursive=True" for r in log)
    weights = {p for p, meta in hub.files("master").items() if meta["lfs"]}
    redirected = {r["path"].rsplit("FilePath=", 1)[1] for r in log if r["status"] == 302}
    assert redirected == weights


@pytest.mark.parametrize("revision", ["v1", "master"])
def test_modelscope_downloads_each_revision(hub: Hub, tmp_path: Path, revision: str) -> None:
    path = ms_download(hub, tmp_path, revision=revision, local_dir=str(tmp_path / "m"))
    assert_same_files(path, hub.files(revision))


def test_modelscope_revision_and_model_apis(hub: Hub) -> None:
    api = MsApi(endpoint=hub.url)
    assert api.get_model_branches_and_tags(MODEL) == (["master"], ["v1"])
    assert api.get_valid_revision(MODEL, revision="v1") == "v1"
    assert api.get_model(MODEL)["Name"] == MODEL.split("/")[1]
    files = {f["Path"]: f["Size"] for f in api.get_model_files(MODEL, revision="v1")}
    assert files == {p: meta["size"] for p, meta in hub.files("v1").items()}


@pytest.mark.parametrize("case", [
    ("nobody/no-such-model", {}, "Model does not exist."),
    (MODEL, {"revision": "no-such-branch"}, "Revision no-such-branch does not exist"),
    (GATED, {"token": "wrong"}, "AccessToken is invalid or expired"),
], ids=["repo", "revision", "bad-token"])
def test_modelscope_errors_carry_the_status_and_message(
        hub: Hub, tmp_path: Path, case: tuple[str, dict[str, str], str]) -> None:
    repo, kwargs, message = case
    with pytest.raises(requests.exceptions.HTTPError, match=re.escape(message)):
        ms_download(hub, tmp_path, repo=repo, local_dir=str(tmp_path / "m"), **kwargs)


def test_modelscope_gated_files_need_the_token(hub: Hub, tmp_path: Path) -> None:
    with pytest.raises(FileDownloadError, match=re.escape("User not logged in.")):
        ms_download(hub, tmp_path, repo=GATED, local_dir=str(tmp_path / "no"))
    path = ms_download(hub, tmp_path, repo=GATED, local_dir=str(tmp_path / "ok"), token=TOKEN)
    assert_same_files(path, hub.files("master", GATED))


def test_modelscope_rejects_corrupt_bytes_by_hash(hub: Hub, tmp_path: Path) -> None:
    hub.faults(corrupt=True)
    with pytest.raises(FileDownloadError, match="Hash mismatch"):
        ms_download(hub, tmp_path, local_dir=str(tmp_path / "m"), allow_patterns=[SHARD])
    assert not (tmp_path / "m" / SHARD).exists()


def test_modelscope_resumes_a_cut_transfer_with_range(hub: Hub, tmp_path: Path) -> None:
    hub.faults(cut_after_bytes=13_000_000)  # two responses: one retry
    path = ms_download(hub, tmp_path, local_dir=str(tmp_path / "m"), allow_patterns=[SHARD])
    assert sha256_of(path / SHARD) == hub.files("master")[SHARD]["sha256"]
    resumed = [r for r in hub.requests() if r["path"].startswith("/repos/") and r["range"]]
    assert resumed and all(r["status"] == 206 for r in resumed)


def test_modelscope_domain_variable_with_a_scheme_reaches_the_hub(hub: Hub, tmp_path: Path) -> None:
    # MODELSCOPE_DOMAIN is deprecated; without a scheme modelscope-hub 0.5.1 prepends https://
    # (config.py:136-146), which no plain-HTTP mirror answers.
    env = {k: v for k, v in client_env(hub, tmp_path).items() if k != "MODELSCOPE_ENDPOINT"}
    env["MODELSCOPE_DOMAIN"] = hub.url
    result = subprocess.run(["modelscope", "download", "--model", MODEL, "config.json", "--local_dir", str(tmp_path)],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert sha256_of(tmp_path / "config.json") == hub.files("master")["config.json"]["sha256"]


def test_a_throttled_transfer_is_seen_in_flight_and_delivers_the_same_bytes(hub: Hub, tmp_path: Path) -> None:
    hub.faults(throttle_bps=1_000_000)  # a 24 MiB shard would take 25 s
    download = concurrent.futures.ThreadPoolExecutor(max_workers=1).submit(
        hf_hub_download, MODEL, SHARD, local_dir=tmp_path, endpoint=hub.url)
    size = hub.files()[SHARD]["size"]
    in_flight = None
    for _poll in range(200):  # every 50 ms, at most 10 s
        in_flight = next((r for r in hub.requests()
                          if r["path"].startswith("/repos/") and not r["done"] and r["bytes"] > 0), None)
        if in_flight:
            break
        time.sleep(0.05)
    assert in_flight is not None and in_flight["status"] == 200 and in_flight["bytes"] < size
    hub.faults(reset=True)  # the rest at full speed
    assert sha256_of(Path(download.result(timeout=120))) == hub.files()[SHARD]["sha256"]
    done = [r for r in hub.requests() if r["path"].startswith("/repos/")]
    assert [(r["done"], r["bytes"]) for r in done] == [(True, size)]
