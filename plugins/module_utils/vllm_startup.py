# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vLLM's start-up phases, named from its own log lines.

A first start of vLLM can take half an hour on a DGX Spark: weights, torch.compile, the KV cache,
kernel warm-up and autotuning (vLLM 0.26 and later tune GEMM/MoE kernels at start-up, 18 minutes and
more on a first start: https://github.com/spark-arena/recipe-registry/pull/19), CUDA graphs, then the
API server. The health gate names the phase a starting server is in, and how long each took, from the
lines vLLM logs as it enters them. Each marker below is the constant part of a log call's format
string (or, for tqdm's progress bars, of their description), quoted with its file and line in the
release's sdist (vllm-0.19.1.tar.gz and vllm-0.34.0.tar.gz from PyPI); "Application startup
complete." is uvicorn's (uvicorn/lifespan/on.py:62, uvicorn 0.38.0), which serves vLLM's API.
tests/unit/plugins/module_utils/test_vllm_startup.py checks each anchor at its place in the sdists.

What a line means can differ between releases: 0.34.0 sizes its (extensible) KV cache after the
CUDA graphs are captured (vllm/v1/core/kv_cache_planning.py:1905), 0.19.1 before the warm-up. The
log names its release ("Initializing a V1 LLM engine (v0.34.0) ..."); the table of the newest
release at or below it is read, 0.19.1's for older ones, the newest's before the line is seen.
Pure functions, standard library only: the module on the host and the action on the controller
both use them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone

# What the health gate says of each phase: "vllm: autotuning kernels (...)".
PHASES = {
    "start": "starting vLLM",
    "engine": "starting the engine",
    "weights": "loading weights",
    "profile": "profiling memory",
    "compile": "compiling the model (torch.compile)",
    "kv_cache": "allocating the KV cache",
    "warmup": "warming up kernels",
    "autotune": "autotuning kernels",
    "cuda_graphs": "capturing CUDA graphs",
    "api_server": "starting the API server",
    "ready": "API server up",
}


@dataclass(frozen=True)
class Marker:
    """A log line that says vLLM entered a phase: its text (anchor), where the release logs it, and
    the phase vLLM is in once the line is printed."""

    anchor: str
    phase: str
    file: str
    line: int


UVICORN = "uvicorn/lifespan/on.py (uvicorn 0.38.0)"

# Each release's markers in the order it logs them on a start.
MARKERS: dict[str, tuple[Marker, ...]] = {
    "0.19.1": (
        Marker("Initializing a V1 LLM engine (v", "engine", "vllm/v1/engine/core.py", 106),
        Marker("Starting to load model ", "weights", "vllm/v1/worker/gpu_model_runner.py", 4736),
        Marker("Loading safetensors checkpoint shards", "weights",
               "vllm/model_executor/model_loader/weight_utils.py", 864),
        Marker("Loading weights took ", "weights", "vllm/model_executor/model_loader/default_loader.py", 385),
        Marker("Model loading took ", "profile", "vllm/v1/worker/gpu_model_runner.py", 4821),
        Marker("Dynamo bytecode transform time: ", "compile", "vllm/compilation/backends.py", 1112),
        Marker("Directly load the compiled graph(s) for compile range ", "compile",
               "vllm/compilation/backends.py", 286),
        Marker("Compiling a graph for compile range ", "compile", "vllm/compilation/backends.py", 391),
        Marker("torch.compile and initial profiling/warmup ", "profile", "vllm/compilation/decorators.py", 622),
        Marker("Available KV cache memory: ", "kv_cache", "vllm/v1/worker/gpu_worker.py", 437),
        # The KV cache is in place; compile_or_warm_up_model follows. 0.19.1's FlashInfer autotune
        # (vllm/model_executor/warmup/kernel_warmup.py:46) logs nothing of its own: it shows as warm-up.
        Marker("GPU KV cache size: ", "warmup", "vllm/v1/core/kv_cache_utils.py", 1319),
        Marker("Compile and warming up model for size ", "warmup", "vllm/v1/worker/gpu_worker.py", 578),
        Marker("Skipping FlashInfer autotune because it is disabled.", "warmup",
               "vllm/model_executor/warmup/kernel_warmup.py", 44),
        Marker("Warming up FlashInfer attention.", "warmup", "vllm/model_executor/warmup/kernel_warmup.py", 69),
        Marker("Capturing CUDA graphs", "cuda_graphs", "vllm/v1/worker/gpu_model_runner.py", 6108),
        Marker("Graph capturing finished in ", "api_server", "vllm/v1/worker/gpu_model_runner.py", 6047),
        Marker("init engine (profile, create kv cache, warmup model) took ", "api_server",
               "vllm/v1/engine/core.py", 284),
        Marker("Starting vLLM server on ", "api_server", "vllm/entrypoints/openai/api_server.py", 596),
        Marker("Application startup complete.", "ready", UVICORN, 62),
    ),
    "0.34.0": (
        Marker("Initializing a V1 LLM engine (v", "engine", "vllm/v1/engine/core.py", 154),
        Marker("Loading model from scratch...", "weights", "vllm/v1/worker/gpu/model_runner.py", 412),
        Marker("Loading safetensors checkpoint shards", "weights",
               "vllm/model_executor/model_loader/weight_utils.py", 1140),
        Marker("Loading weights took ", "weights", "vllm/model_executor/model_loader/default_loader.py", 544),
        Marker("Model loading took ", "profile", "vllm/v1/worker/gpu/model_runner.py", 442),
        Marker("Dynamo bytecode transform time: ", "compile", "vllm/compilation/backends.py", 1168),
        Marker("Directly load the compiled graph(s) for compile", "compile", "vllm/compilation/backends.py", 315),
        Marker("Compiling a graph for compile range ", "compile", "vllm/compilation/backends.py", 422),
        Marker("torch.compile and initial profiling/warmup ", "profile", "vllm/compilation/decorators.py", 716),
        Marker("Available KV cache memory: ", "kv_cache", "vllm/v1/worker/gpu_worker.py", 796),
        Marker("Compile and warming up model for size ", "warmup", "vllm/v1/worker/gpu_worker.py", 1059),
        Marker("JIT kernel warmup starting.", "warmup", "vllm/model_executor/warmup/kernel_warmup.py", 294),
        Marker("JIT kernel warmup finished in ", "warmup", "vllm/model_executor/warmup/kernel_warmup.py", 305),
        # flashinfer_autotune (kernel_warmup.py): the cache it reads and writes, then each tuning pass.
        Marker("Using FlashInfer managed autotune cache (root=", "autotune",
               "vllm/model_executor/warmup/kernel_warmup.py", 592),
        Marker("Using FlashInfer autotune cache file: ", "autotune",
               "vllm/model_executor/warmup/kernel_warmup.py", 603),
        Marker("Running FlashInfer autotune with ", "autotune", "vllm/model_executor/warmup/kernel_warmup.py", 477),
        Marker("Skipping FlashInfer autotune because it is disabled.", "warmup",
               "vllm/model_executor/warmup/kernel_warmup.py", 390),
        Marker("Warming up FlashInfer attention.", "warmup", "vllm/model_executor/warmup/kernel_warmup.py", 119),
        Marker("Capturing CUDA graphs", "cuda_graphs", "vllm/v1/worker/gpu/cudagraph_utils.py", 459),
        # The extensible KV cache (on by default on CUDA, vllm/config/cache.py:395) is sized after capture.
        Marker("Graph capturing finished in ", "kv_cache", "vllm/v1/worker/gpu/model_runner.py", 1217),
        Marker(" KV cache size: ", "kv_cache", "vllm/v1/core/kv_cache_utils.py", 1169),
        Marker("init engine (profile, create kv cache, warmup model) took ", "api_server",
               "vllm/v1/engine/core.py", 442),
        Marker("Starting vLLM server on ", "api_server", "vllm/entrypoints/launchers/api_server/entry.py", 139),
        Marker("Application startup complete.", "ready", UVICORN, 62),
    ),
}
RELEASES = tuple(sorted(MARKERS, key=lambda r: tuple(int(p) for p in r.split("."))))
VERSION_LINE = re.compile(r"Initializing a V1 LLM engine \(v(\d+)\.(\d+)\.(\d+)")
# `docker logs --timestamps`: RFC 3339 with nanoseconds, then a space.
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ?")


def table_for(version: str | None) -> tuple[Marker, ...]:
    """The markers of the newest release at or below version (0.19.1's below it; the newest's when
    the version is not known yet)."""
    if not version:
        return MARKERS[RELEASES[-1]]
    try:
        wanted = tuple(int(part) for part in version.split(".")[:3])
    except ValueError:
        return MARKERS[RELEASES[-1]]
    fitting = [r for r in RELEASES if tuple(int(p) for p in r.split(".")) <= wanted]
    return MARKERS[fitting[-1] if fitting else RELEASES[0]]


def is_marker(line: str) -> bool:
    """Whether a log line is one of any release's markers (the module keeps only these)."""
    return any(marker.anchor in line for table in MARKERS.values() for marker in table)


def logged_version(lines: list[str]) -> str | None:
    """The vLLM release a log names in its engine's first line, e.g. 0.34.0."""
    for line in lines:
        found = VERSION_LINE.search(line)
        if found:
            return ".".join(found.groups())
    return None


def phase_of(line: str, version: str | None) -> str | None:
    """The phase vLLM is in once it printed this line, or None for a line that is no marker.
    A tqdm line holds many updates (separated by carriage returns): one marker for all of them."""
    for marker in table_for(version):
        if marker.anchor in line:
            return marker.phase
    return None


def parse_timestamp(text: str) -> float | None:
    """Docker's RFC 3339 timestamp (nanoseconds, Z or an offset) -> epoch seconds; None if not one."""
    found = TIMESTAMP.match(text or "")
    if not found:
        return None
    base, fraction, zone = found.groups()
    zone = "+00:00" if zone == "Z" else zone
    try:
        moment = datetime.strptime(base + zone, "%Y-%m-%dT%H:%M:%S%z")
    except ValueError:
        return None
    return moment.timestamp() + (float("0." + fraction) if fraction else 0.0)


def split_timestamped(line: str) -> tuple[float | None, str]:
    """A line of `docker logs --timestamps` -> (epoch seconds or None, the line vLLM wrote)."""
    found = TIMESTAMP.match(line)
    if not found:
        return None, line
    return parse_timestamp(line), line[found.end():]


def timeline(entries: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """(epoch seconds, log line) in log order -> the phases entered: [(when, phase)], a phase that
    goes on (several markers of one phase in a row) once."""
    version = logged_version([line for _at, line in entries])
    out: list[tuple[float, str]] = []
    for at, line in entries:
        phase = phase_of(line, version)
        if phase and (not out or out[-1][1] != phase):
            out.append((at, phase))
    return out


def current_phase(events: list[tuple[float, str]], started: float | None) -> tuple[str, float | None]:
    """The phase now and since when: the last one entered, or "start" (since the container started)."""
    if events:
        return events[-1][1], events[-1][0]
    return "start", started


def durations(events: list[tuple[float, str]], started: float | None, until: float) -> dict[str, float]:
    """Seconds spent in each phase from the container's start until `until` (the server answered),
    summed where a phase came back (0.34.0 logs its CUDA graphs once while profiling and once for
    good). "ready" takes no time: the time after it is the gate's, not vLLM's start."""
    spans: dict[str, float] = {}
    points = ([(started, "start")] if started is not None else []) + list(events)
    for (at, phase), nxt in zip(points, [*points[1:], (until, "")], strict=True):
        if phase == "ready":
            continue
        end = min(nxt[0], until)
        if end > at:
            spans[phase] = round(spans.get(phase, 0.0) + end - at, 1)
    return spans


def duration_text(seconds: float) -> str:
    """3 min 10 s, 45 s, 1 h 2 min: how a person reads a wait."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def iso_utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
