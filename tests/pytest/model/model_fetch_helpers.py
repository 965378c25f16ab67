"""Helpers for the fetch program's tests: the program loaded as a module (its pure parts) and run
as a process, as the role runs it on a box, against the stand-in hub."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
PROGRAM = ROOT / "roles" / "model" / "files" / "sparkfleet_model_fetch.py"
sys.path.insert(0, str(ROOT / "tests" / "testbed" / "hub-standin"))

from hubproc import GATED, MODEL, TOKEN, Hub, running_hub  # noqa: E402

__all__ = ["GATED", "MODEL", "TOKEN", "running_hub"]


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("sparkfleet_model_fetch", PROGRAM)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sparkfleet_model_fetch"] = module
    spec.loader.exec_module(module)
    return module


fetch_module = _load()


def generated_state() -> Path:
    """The stand-in's generated repositories: generate.py reuses a directory while its own source is
    unchanged, so one directory per user serves every session."""
    state = Path(f"/tmp/sparkfleet-hub-standin-{os.getuid()}")
    subprocess.run(
        [sys.executable, str(ROOT / "tests/testbed/hub-standin/generate.py"), str(state)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return state


@dataclass
class Result:
    rc: int
    state: dict[str, Any]
    stdout: str
    stderr: str

    @property
    def kind(self) -> str | None:
        return (self.state.get("error") or {}).get("kind")


@dataclass
class Runner:
    """Runs the program as the role does: its own process, the token only in the environment."""

    tmp: Path
    endpoint: str
    local_dir: Path
    state_file: Path

    def env(self, token: str | None, credentials: Path | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "MODELSCOPE_", "CREDENTIALS_"))}
        # Client caches of their own: a cached copy elsewhere would hide a transfer.
        env.update(HOME=str(self.tmp / "home"), HF_HOME=str(self.tmp / "hf-home"))
        env["MODELSCOPE_CACHE"] = str(self.tmp / "ms-cache")
        if token:
            env["HF_TOKEN"] = env["MODELSCOPE_API_TOKEN"] = token
        if credentials:
            env["CREDENTIALS_DIRECTORY"] = str(credentials)
        return env

    def argv(self, *extra: str, **options: str) -> list[str]:
        opts = {"source": "huggingface", "endpoint": self.endpoint, "repo": MODEL, "revision": "main"}
        opts |= {"local_dir": str(self.local_dir), "state": str(self.state_file)} | options
        argv = [sys.executable, str(PROGRAM)]
        for key, value in opts.items():
            argv += [f"--{key.replace('_', '-')}", value]
        return argv + list(extra)

    def popen(self, *extra: str, token: str | None = None, **options: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*extra, **options),
            env=self.env(token, None),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(
        self, *extra: str, token: str | None = None, credentials: Path | None = None, **options: str
    ) -> Result:
        self.state_file.unlink(missing_ok=True)
        done = subprocess.run(
            self.argv(*extra, **options),
            check=False,
            env=self.env(token, credentials),
            capture_output=True,
            text=True,
            timeout=120,
        )
        state = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        return Result(done.returncode, state, done.stdout, done.stderr)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def transfers(hub: Hub) -> list[dict[str, Any]]:
    """Requests that moved file bytes, as opposed to listings: Hugging Face resolve and CDN GETs,
    ModelScope's `/api/v1/models/{repo}/repo?FilePath=` and CDN GETs."""

    def listing(path: str) -> bool:
        return path.startswith("/api/") and "/repo?" not in path

    return [r for r in hub.requests() if r["method"] == "GET" and not listing(r["path"])]


def leftovers(local_dir: Path) -> list[str]:
    """Partial or staged files a finished run must not leave behind."""
    found = [p for p in local_dir.rglob("*") if p.suffix in (".incomplete", ".part", ".parallel_tmp")]
    found += list(local_dir.glob(".sparkfleet-staging"))
    return sorted(str(p.relative_to(local_dir)) for p in found)


def make_copies(state_dir: Path, root: Path, revisions: tuple[str, ...]) -> dict[str, Path]:
    """Complete, verified copies made once per session with the program itself: tests that start
    from a complete copy take one of these instead of downloading 100 MB again."""
    copies: dict[str, Path] = {}
    with running_hub(state_dir) as hub:
        for revision in revisions:
            runner = Runner(root, hub.url, root / revision, root / f"{revision}.json")
            if copies:  # from the previous copy: only the files that differ cross the wire
                copy_model(next(iter(copies.values())), runner.local_dir)
            result = runner(revision=revision)
            assert result.rc == 0, result.stderr
            copies[revision] = runner.local_dir
    return copies


def copy_model(source: Path, target: Path) -> None:
    """A copy with the mtimes kept (copy2), as the manifest recorded them."""
    shutil.copytree(source, target, copy_function=shutil.copy2)


def journal(run: Runner) -> list[str]:
    """The files an interrupted run had verified and placed (its journal in staging)."""
    path = run.local_dir / ".sparkfleet-staging" / "verified.jsonl"
    return [json.loads(line)["path"] for line in path.read_text().splitlines()] if path.exists() else []
