"""Runs the stand-in hub as a local process for pytest.

    import sys; sys.path.insert(0, "<repo>/tests/testbed/hub-standin")
    from hubproc import hub_fixture, hub_state_dir_fixture
    FIXTURES = (hub_fixture, hub_state_dir_fixture)  # pytest finds `hub`, `hub_state_dir` here

    def test_x(hub):                       # a fresh process per test, faults off, empty log
        hub.url                            # http://127.0.0.1:PORT (HF_ENDPOINT, MODELSCOPE_ENDPOINT)
        hub.faults(corrupt=True)           # POST /_standin/faults
        hub.requests()                     # GET /_standin/requests
        hub.repos()["repos"][hub.MODEL]    # commits, refs, file sizes and hashes

Outside pytest: `with running_hub(state_dir) as h: ...`. The generated repositories (about
120 MB) are made once per state directory and reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
HUB = HERE / "hub.py"
MODEL = "Qwen/Qwen3.5-35B-A3B-FP8"
GATED = "sparkfleet-test/gated-model"
TOKEN = "hf_sparkfleet_standin_token"


@dataclass
class Hub:
    url: str
    state_dir: Path
    process: subprocess.Popen[str]
    MODEL = MODEL
    GATED = GATED
    TOKEN = TOKEN

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def faults(self, **switches: Any) -> dict[str, Any]:
        return self.call("POST", "/_standin/faults", switches)

    def requests(self) -> list[dict[str, Any]]:
        return self.call("GET", "/_standin/requests")

    def clear_requests(self) -> None:
        self.call("DELETE", "/_standin/requests")

    def repos(self) -> dict[str, Any]:
        return self.call("GET", "/_standin/repos")

    def commit(self, revision: str, repo: str = MODEL) -> str:
        data = self.repos()["repos"][repo]
        if revision in data["commits"]:
            return revision
        return data["refs"]["branches"].get(revision) or data["refs"]["tags"][revision]

    def files(self, revision: str = "main", repo: str = MODEL) -> dict[str, dict[str, Any]]:
        """path -> {size, sha256, blob_id, lfs, ...} at a revision."""
        data = self.repos()["repos"][repo]
        return data["commits"][self.commit(revision, repo)]["files"]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def running_hub(state_dir: Path, *extra_args: str) -> Iterator[Hub]:
    """Starts hub.py on a free port of 127.0.0.1 and stops it on exit."""
    process = subprocess.Popen(
        [sys.executable, str(HUB), "--port", "0", "--state-dir", str(state_dir), *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    first = process.stdout.readline().strip()
    if not first.startswith("listening on "):
        process.kill()
        err = process.communicate()[1]
        raise RuntimeError(f"hub stand-in did not start: {first!r} {err}")
    hub = Hub(url=first.removeprefix("listening on "), state_dir=state_dir, process=process)
    try:
        yield hub
    finally:
        hub.stop()


@pytest.fixture(scope="session", name="hub_state_dir")
def hub_state_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated repositories, made once per test session."""
    state = tmp_path_factory.mktemp("hub-standin-state")
    subprocess.run([sys.executable, str(HERE / "generate.py"), str(state)], check=True, stdout=subprocess.DEVNULL)
    return state


@pytest.fixture(name="hub")
def hub_fixture(hub_state_dir: Path) -> Iterator[Hub]:
    """A fresh stand-in hub process per test: no faults, an empty request log."""
    with running_hub(hub_state_dir) as running:
        yield running
