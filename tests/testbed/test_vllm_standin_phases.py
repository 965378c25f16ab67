"""The stand-in's start-up goes through vLLM's phases in the release's words and order, and the health
gate's parser (plugins/module_utils/vllm_startup.py) names each phase from them.

A real start (the stand-in's own release) with a simulated kernel autotuning
(VLLM_STANDIN_AUTOTUNE_SECONDS), its lines stamped as they arrive, as `docker logs --timestamps` does;
and each release's lines printed by the stand-in's phase functions in-process.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest
from test_vllm_standin import STABLE_FLAGS, STANDIN, clean_env, free_port, load_module, make_model

STARTUP = load_module(Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "vllm_startup.py",
                      "vllm_startup")


@pytest.fixture(scope="module")
def standin() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("vllm_standin_phases", str(STANDIN))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("vllm_standin_phases", loader))
    loader.exec_module(module)
    return module


def stamped_start(model: Path, env: dict[str, str], extra: list[str] | None = None) -> list[tuple[float, str]]:
    """Starts the stand-in, stamps every line of both streams when it arrives, and stops it once /health
    answers: the lines as `docker logs --timestamps` gives them."""
    port = free_port()
    full_env = {**clean_env(), "VLLM_STANDIN_SHM_MIN_BYTES": "0", "VLLM_STANDIN_READY_FILE": os.devnull, **env}
    proc = subprocess.Popen([sys.executable, str(STANDIN), "serve", str(model), "--host", "127.0.0.1", "--port",
                             str(port), *STABLE_FLAGS, *(extra or [])], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full_env)
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def pump(stream: io.TextIOBase) -> None:
        for line in stream:
            lines.put((time.time(), line.rstrip("\n")))

    for stream in (proc.stdout, proc.stderr):
        threading.Thread(target=pump, args=(stream,), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the stand-in ended before it served"
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                break
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    out = []
    while not lines.empty():
        out.append(lines.get())
    return sorted(out, key=lambda entry: entry[0])


def phases(entries: list[tuple[float, str]]) -> list[str]:
    return [phase for _at, phase in STARTUP.timeline(entries)]


def test_a_start_goes_through_its_releases_phases_and_autotuning_takes_its_time(tmp_path: Path):
    entries = stamped_start(make_model(tmp_path), {"VLLM_STANDIN_STARTUP_SECONDS": "0.5",
                                                   "VLLM_STANDIN_AUTOTUNE_SECONDS": "2"})
    assert STARTUP.logged_version([line for _at, line in entries]) == "0.19.1"
    # --enforce-eager: no torch.compile and no CUDA graphs; 0.19.1 sizes its KV cache before the warm-up,
    # whose FlashInfer autotuning it does not log (it shows as warm-up).
    assert phases(entries) == ["engine", "weights", "profile", "kv_cache", "warmup", "api_server", "ready"]
    events = STARTUP.timeline(entries)
    spans = STARTUP.durations(events, entries[0][0], events[-1][0])
    assert spans["warmup"] >= 1.9
    assert spans["weights"] >= 0.4
    assert sum(spans.values()) == pytest.approx(events[-1][0] - entries[0][0], abs=0.5)


def test_autotuning_off_is_said_and_takes_no_time(tmp_path: Path):
    entries = stamped_start(make_model(tmp_path), {"VLLM_STANDIN_STARTUP_SECONDS": "0.1",
                                                   "VLLM_STANDIN_AUTOTUNE_SECONDS": "5"},
                            ["--no-enable-flashinfer-autotune"])
    assert any("Skipping FlashInfer autotune because it is disabled." in line for _at, line in entries)
    assert entries[-1][0] - entries[0][0] < 4


def printed(standin: ModuleType, monkeypatch: pytest.MonkeyPatch, release: str, *, eager: bool) -> list[str]:
    """The lines the stand-in's phase functions print for a release (in-process, no pauses)."""
    monkeypatch.setattr(standin, "VERSION", release)
    monkeypatch.setattr(standin.time, "sleep", lambda _s: None)
    args = argparse.Namespace(enforce_eager=eager, model="/model", model_tag=None, max_model_len=16384,
                              max_num_batched_tokens=16384, enable_flashinfer_autotune=None, kernel_config=None,
                              optimization_level=2, tensor_parallel_size=1, pipeline_parallel_size=1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        standin.phase_log(standin.engine_log, "engine", version=release, config="model='/model'")
        ctx = {"kv_tokens": 41_000, "kv_mib_per_token": standin.KV_MIB_PER_TOKEN, "weights_gib": standin.WEIGHTS_GIB}
        standin.load_weights(args, ctx, standin.engine_log)
        standin.start_engine(args, ctx, standin.engine_log)
        standin.phase_log(standin.log, "server", address="http://0.0.0.0:8000")
        standin.uvicorn_log("Application startup complete.")
    return [line for line in out.getvalue().replace("\r", "\n").splitlines() if line.strip()]


@pytest.mark.parametrize(("release", "eager", "expected"), [
    ("0.19.1", True, ["engine", "weights", "profile", "kv_cache", "warmup", "api_server", "ready"]),
    ("0.19.1", False, ["engine", "weights", "profile", "compile", "profile", "kv_cache", "warmup", "cuda_graphs",
                       "api_server", "ready"]),
    ("0.34.0", True, ["engine", "weights", "profile", "kv_cache", "autotune", "kv_cache", "api_server", "ready"]),
    ("0.34.0", False, ["engine", "weights", "profile", "compile", "profile", "kv_cache", "warmup", "autotune",
                       "cuda_graphs", "kv_cache", "api_server", "ready"]),
])
def test_each_releases_lines_in_its_order(standin: ModuleType, monkeypatch: pytest.MonkeyPatch, release: str,
                                          eager: bool, expected: list[str]):
    lines = printed(standin, monkeypatch, release, eager=eager)
    entries = [(float(n), line) for n, line in enumerate(lines)]
    assert STARTUP.logged_version(lines) == release
    assert phases(entries) == expected


@pytest.mark.parametrize("release", ["0.19.1", "0.34.0"])
def test_every_line_the_stand_in_prints_for_a_phase_is_a_marker_of_its_release(release: str, standin: ModuleType):
    markers = STARTUP.MARKERS[release]
    for name, (_where, template) in standin.PHASE_LINES[release].items():
        if name == "concurrency":  # printed right after the KV cache's size, of the same phase
            continue
        assert any(marker.anchor in template for marker in markers), (name, template)
