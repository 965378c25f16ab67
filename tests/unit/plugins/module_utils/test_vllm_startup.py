# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Log lines are quoted as vLLM writes them; long lines are split into adjacent literals.
"""vLLM's start-up phases from its log: each marker's text at its cited place in the release's sdist
(when the sdist is here), and the parser on each release's lines in the release's order."""

from __future__ import annotations

import functools
import os
import tarfile
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_startup import (
    MARKERS,
    UVICORN,
    current_phase,
    duration_text,
    durations,
    is_marker,
    logged_version,
    parse_timestamp,
    split_timestamped,
    table_for,
    timeline,
)

# Where the sdists are: VLLM_SOURCES (directories, os.pathsep between them) holding vllm-X.Y.Z.tar.gz
# (from PyPI) or its unpacked vllm-X.Y.Z/, and uvicorn-0.38.0 likewise; /tmp/vsrc when it is not set.
SOURCES = [Path(p) for p in os.environ.get("VLLM_SOURCES", "/tmp/vsrc:/tmp/uvsrc").split(os.pathsep) if p]


@functools.cache
def tarball_files(tarball: Path, package: str) -> dict[str, list[str]]:
    """The cited files of an sdist's tarball, read in one pass (a .tar.gz cannot be read out of order)."""
    wanted = {f"{package}/{marker.file}" for table in MARKERS.values() for marker in table} | {
        f"{package}/uvicorn/lifespan/on.py"}
    found: dict[str, list[str]] = {}
    with tarfile.open(tarball, "r|gz") as archive:
        for member in archive:
            if member.name in wanted:
                handle = archive.extractfile(member)
                if handle:
                    found[member.name.split("/", 1)[1]] = handle.read().decode("utf-8").splitlines()
    return found


def source_lines(package: str, path: str) -> list[str] | None:
    """A file of an sdist, unpacked or in its tarball; None when neither is here."""
    for root in SOURCES:
        unpacked = root / package / path
        if unpacked.is_file():
            return unpacked.read_text(encoding="utf-8").splitlines()
        tarball = root / f"{package}.tar.gz"
        if tarball.is_file():
            return tarball_files(tarball, package).get(path)
    return None


CITED = [(release, marker) for release, table in MARKERS.items() for marker in table]


@pytest.mark.parametrize(("release", "marker"), CITED,
                         ids=[f"{release}-{marker.file.rsplit('/', 1)[-1]}:{marker.line}" for release, marker in CITED])
def test_each_anchor_is_at_its_cited_place(release: str, marker):
    if marker.file == UVICORN:
        package, path = "uvicorn-0.38.0", "uvicorn/lifespan/on.py"
    else:
        package, path = f"vllm-{release}", marker.file
    lines = source_lines(package, path)
    if lines is None:
        pytest.skip(f"{package}'s sdist is not here (VLLM_SOURCES)")
    assert marker.anchor in lines[marker.line - 1], (
        f"{path}:{marker.line} of {package} reads {lines[marker.line - 1].strip()!r}, not {marker.anchor!r}")


# A 0.19.1 start with torch.compile and CUDA graphs on (its V1 model runner), and a 0.34.0 one
# (Model Runner V2, FlashInfer autotuning, the extensible KV cache sized after capture); tqdm's bars
# as Docker keeps them: the updates of one bar in one line, separated by carriage returns.
LOG_0_19_1 = [
    "(EngineCore_DP0 pid=280) INFO 12-01 10:00:05 [core.py:106] Initializing a V1 LLM engine (v0.19.1) with"
    " config: model='/model', speculative_config=None, tokenizer='/model'",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:00:20 [gpu_model_runner.py:4736] Starting to load model /model...",
    "\rLoading safetensors checkpoint shards:   0% Completed | 0/14 [00:00<?, ?it/s]"
    "\rLoading safetensors checkpoint shards: 100% Completed | 14/14 [03:01<00:00, 12.9s/it]",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:03:21 [default_loader.py:385] Loading weights took 181.30 seconds",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:03:30 [gpu_model_runner.py:4821] Model loading took 34.86 GiB memory"
    " and 190.100000 seconds",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:03:50 [backends.py:1112] Dynamo bytecode transform time: 19.80 s",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:05:10 [backends.py:391] Compiling a graph for compile range (1, 16384)"
    " takes 80.02 s",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:05:20 [decorators.py:622] torch.compile and initial profiling/warmup"
    " run together took 110.10 s in total",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:05:30 [gpu_worker.py:437] Available KV cache memory: 7.51 GiB",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:05:31 [kv_cache_utils.py:1319] GPU KV cache size: 41,072 tokens",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:05:31 [kv_cache_utils.py:1325] Maximum concurrency for 16,384 tokens"
    " per request: 2.51x",
    "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/67 [00:00<?, ?it/s]"
    "\rCapturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:30<00:00,  2.2it/s]",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:08:40 [gpu_model_runner.py:6047] Graph capturing finished in 35 secs,"
    " took 0.93 GiB",
    "(EngineCore_DP0 pid=280) INFO 12-01 10:08:41 [core.py:284] init engine (profile, create kv cache, warmup model)"
    " took 311.02 seconds",
    "(APIServer pid=1) INFO 12-01 10:09:00 [api_server.py:596] Starting vLLM server on http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
LOG_0_34_0 = [
    "(EngineCore pid=280) INFO 12-01 10:00:05 [core.py:154] Initializing a V1 LLM engine (v0.34.0) with config:"
    " model='/model', speculative_config=None",
    "(EngineCore pid=280) INFO 12-01 10:00:20 [model_runner.py:412] Loading model from scratch...",
    "\rLoading safetensors checkpoint shards: 100% Completed | 14/14 [01:40<00:00,  7.1s/it]",
    "(EngineCore pid=280) INFO 12-01 10:02:00 [default_loader.py:544] Loading weights took 100.00 seconds",
    "(EngineCore pid=280) INFO 12-01 10:02:10 [model_runner.py:442] Model loading took 21.40 GiB memory and"
    " 110.000000 seconds",
    "(EngineCore pid=280) INFO 12-01 10:02:30 [backends.py:1168] Dynamo bytecode transform time: 20.00 s",
    "(EngineCore pid=280) INFO 12-01 10:03:30 [backends.py:422] Compiling a graph for compile range (1, 8192) takes"
    " 60.00 s",
    "(EngineCore pid=280) INFO 12-01 10:03:40 [decorators.py:716] torch.compile and initial profiling/warmup run"
    " together took 90.00 s in total",
    "(EngineCore pid=280) INFO 12-01 10:04:00 [gpu_worker.py:796] Available KV cache memory: 60.12 GiB",
    "(EngineCore pid=280) INFO 12-01 10:04:05 [kernel_warmup.py:294] JIT kernel warmup starting.",
    "(EngineCore pid=280) INFO 12-01 10:05:05 [kernel_warmup.py:305] JIT kernel warmup finished in 60.00s.",
    "(EngineCore pid=280) INFO 12-01 10:05:06 [kernel_warmup.py:603] Using FlashInfer autotune cache file:"
    " /root/.cache/vllm/flashinfer_autotune_cache/1a2b/autotune_configs_dp0_rank0.json. Pass"
    " --disable-flashinfer-autotune to skip autotuning.",
    "(EngineCore pid=280) INFO 12-01 10:05:07 [kernel_warmup.py:477] Running FlashInfer autotune with 8192 tokens"
    " and token buckets [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192].",
    "\rCapturing CUDA graphs (PIECEWISE): 100%|##########| 51/51 [00:20<00:00,  2.5it/s]",
    "(EngineCore pid=280) INFO 12-01 10:23:40 [model_runner.py:1217] Graph capturing finished in 33 secs, took"
    " 1.10 GiB",
    "(EngineCore pid=280) INFO 12-01 10:23:45 [kv_cache_utils.py:1169] GPU KV cache size: 640,000 tokens, Maximum"
    " concurrency for 262,144 tokens per request: 2.44x",
    "(EngineCore pid=280) INFO 12-01 10:23:50 [core.py:459] init engine (profile, create kv cache, warmup model)"
    " took 1405.00 s",
    "(APIServer pid=1) INFO 12-01 10:24:00 [entry.py:139] Starting vLLM server on http://0.0.0.0:8000",
    "(APIServer pid=1) INFO:     Application startup complete.",
]
STAMPS_0_34_0 = [5, 20, 110, 120, 130, 150, 210, 220, 240, 245, 305, 306, 307, 1387, 1420, 1425, 1430, 1440, 1445]


def stamped(lines: list[str], seconds: list[int] | None = None) -> list[tuple[float, str]]:
    base = 1_800_000_000.0
    return [(base + (seconds[n] if seconds else n * 10), line) for n, line in enumerate(lines)]


def test_every_marker_line_of_both_logs_is_recognised():
    for line in LOG_0_19_1 + LOG_0_34_0:
        if "Maximum concurrency for 16,384" in line:
            continue
        assert is_marker(line), line
    assert not is_marker("(APIServer pid=1) INFO 12-01 10:00:01 [utils.py:253] non-default args: {}")


def test_the_log_names_its_release():
    assert logged_version(LOG_0_19_1) == "0.19.1"
    assert logged_version(LOG_0_34_0) == "0.34.0"
    assert logged_version(["no engine yet"]) is None


def test_0_19_1_phases_in_order():
    assert [phase for _at, phase in timeline(stamped(LOG_0_19_1))] == [
        "engine", "weights", "profile", "compile", "profile", "kv_cache", "warmup", "cuda_graphs", "api_server",
        "ready"]


def test_0_34_0_phases_in_order_autotuning_among_them():
    assert [phase for _at, phase in timeline(stamped(LOG_0_34_0, STAMPS_0_34_0))] == [
        "engine", "weights", "profile", "compile", "profile", "kv_cache", "warmup", "autotune", "cuda_graphs",
        "kv_cache", "api_server", "ready"]


def test_one_line_means_what_its_release_says():
    # After capture 0.34.0 sizes its extensible KV cache; 0.19.1 is done with its engine.
    line = "(EngineCore pid=1) INFO [model_runner.py:1217] Graph capturing finished in 33 secs, took 1.10 GiB"
    assert [p for _a, p in timeline([(0.0, "Initializing a V1 LLM engine (v0.34.0) with config:"), (1.0, line)])][-1] \
        == "kv_cache"
    assert [p for _a, p in timeline([(0.0, "Initializing a V1 LLM engine (v0.19.1) with config:"), (1.0, line)])][-1] \
        == "api_server"


@pytest.mark.parametrize(("version", "table"), [
    ("0.19.1", "0.19.1"), ("0.18.0", "0.19.1"), ("0.26.2", "0.19.1"), ("0.34.0", "0.34.0"), ("0.35.1", "0.34.0"),
    (None, "0.34.0"), ("garbage", "0.34.0"),
])
def test_the_table_of_the_newest_release_at_or_below(version: str | None, table: str):
    assert table_for(version) is MARKERS[table]


def test_0_34_0_durations_show_the_long_autotuning():
    entries = stamped(LOG_0_34_0, STAMPS_0_34_0)
    events = timeline(entries)
    started = entries[0][0] - 5
    spans = durations(events, started, entries[-1][0] + 2)
    # From the autotune cache's line to the CUDA graphs' bar (306 s to 1387 s).
    assert spans["autotune"] == 1081.0
    assert spans["weights"] == 110.0
    assert spans["compile"] == 70.0
    # Before the warm-up (240 s to 245 s) and after the capture (1420 s to 1430 s).
    assert spans["kv_cache"] == 15.0
    assert spans["start"] == 5.0
    assert "ready" not in spans
    assert sum(spans.values()) == pytest.approx(entries[-1][0] - started)


def test_the_current_phase_and_since_when():
    entries = stamped(LOG_0_34_0, STAMPS_0_34_0)[:13]
    phase, since = current_phase(timeline(entries), 0.0)
    assert phase == "autotune"
    assert since == entries[11][0]
    assert current_phase([], 42.0) == ("start", 42.0)


def test_docker_timestamps():
    assert parse_timestamp("2027-01-15T08:00:00Z") == 1_800_000_000.0
    assert parse_timestamp("2027-01-15T08:00:00.5Z") == 1_800_000_000.5
    assert parse_timestamp("2027-01-15T09:00:00.250000000+01:00") == 1_800_000_000.25
    assert parse_timestamp("not a time") is None
    assert split_timestamped("2027-01-15T08:00:00.123456789Z (APIServer pid=1) INFO x") == (
        pytest.approx(1_800_000_000.123456789), "(APIServer pid=1) INFO x")
    assert split_timestamped("no stamp") == (None, "no stamp")


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0 s"), (45.4, "45 s"), (190, "3 min 10 s"), (1800, "30 min"), (3720, "1 h 2 min"), (-3, "0 s"),
])
def test_duration_text(seconds: float, text: str):
    assert duration_text(seconds) == text
