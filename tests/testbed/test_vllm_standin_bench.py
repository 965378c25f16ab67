"""The stand-in's `vllm bench serve` must take vLLM 0.19.1's flags, refuse what it refuses, send
real requests to the stand-in server and report vLLM's result keys.

The option table is not written here: generate.py read it from the release's argparse calls
(vllm-standin/vllm_bench_serve.json); these tests hold the stand-in to it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

STANDIN_DIR = Path(__file__).resolve().parent / "vllm-standin"
STANDIN = STANDIN_DIR / "vllm"
RELEASES = ("0.19.1", "0.34.0")
TABLES = {release: json.loads((STANDIN_DIR / "releases" / release / "vllm_bench_serve.json").read_text(
    encoding="utf-8")) for release in RELEASES}
TABLE = TABLES["0.19.1"]  # the release the stand-in plays by default
SERVED = "qwen3.5-35b"
KEY = "sk-bench-test"
# The keys main_async and benchmark put in the result (vllm/benchmarks/serve.py, 0.19.1) for
# a generation run with --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,95.
RESULT_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
    "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
    "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{stat}_{metric}_ms" for stat in ("mean", "median", "std", "p50", "p95")
      for metric in ("ttft", "tpot", "itl", "e2el")),
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "OPENAI_"))}
    return {**env, **extra}


class Server:
    """The stand-in `vllm serve`, its log in a file (a pipe nobody reads would fill up)."""

    def __init__(self, tmp: Path, max_num_seqs: int = 16, decode_tps: str = "500") -> None:
        model = tmp / "model"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({
            "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
            "quantization_config": {"quant_method": "fp8"}}))
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = (tmp / "server.log").open("w")
        env = clean_env(VLLM_STANDIN_STARTUP_SECONDS="0.1", VLLM_STANDIN_SHM_MIN_BYTES="0",
                        VLLM_STANDIN_READY_FILE=os.devnull, VLLM_STANDIN_DECODE_TOKENS_PER_SECOND=decode_tps,
                        VLLM_STANDIN_PREFILL_TOKENS_PER_SECOND="100000")
        self.proc = subprocess.Popen(
            [sys.executable, str(STANDIN), "serve", str(model), "--host", "127.0.0.1", "--port", str(self.port),
             "--served-model-name", SERVED, "--enforce-eager", "--max-model-len", "16384",
             "--gpu-memory-utilization", "0.75", "--max-num-seqs", str(max_num_seqs), "--api-key", KEY],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (tmp / "server.log").read_text()
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("stand-in did not become healthy")

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(self.base + "/metrics", timeout=5) as resp:
            text = resp.read().decode()
        found = re.findall(r"^(vllm:[a-z_]+)\{[^}]*\} (\S+)$", text, re.M)
        return {name: float(value) for name, value in found}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture
def server(tmp_path: Path):
    srv = Server(tmp_path)
    yield srv
    srv.stop()


def bench(args: list[str], key: str | None = KEY, **kw) -> subprocess.CompletedProcess:
    env = clean_env(**({"OPENAI_API_KEY": key} if key else {}))
    return subprocess.run([sys.executable, str(STANDIN), "bench", "serve", *args], capture_output=True, text=True,
                          env=env, timeout=kw.get("timeout", 60), check=False)


def workload(port: int, out: Path, prompts: int = 12, concurrency: int = 4) -> list[str]:
    return ["--port", str(port), "--model", "/model", "--served-model-name", SERVED, "--num-prompts", str(prompts),
            "--max-concurrency", str(concurrency), "--input-len", "64", "--output-len", "16",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95", "--save-result",
            "--result-dir", str(out), "--result-filename", "result.json", "--disable-tqdm"]


# --- the table and the parser ----------------------------------------------------------------

@pytest.mark.parametrize(("release", "datasets"), [
    ("0.19.1", "vllm/benchmarks/datasets.py"),
    # 0.34.0 made vllm/benchmarks/datasets a package.
    ("0.34.0", "vllm/benchmarks/datasets/datasets.py")])
def test_table_comes_from_the_release(release: str, datasets: str):
    table = TABLES[release]
    assert table["vllm_version"] == release
    options = {o for row in table["options"] for o in row["options"]}
    # The flags the benchmark playbook passes are vLLM's.
    for flag in ("--num-prompts", "--max-concurrency", "--input-len", "--output-len", "--model",
                 "--served-model-name", "--percentile-metrics", "--metric-percentiles", "--save-result",
                 "--result-dir", "--result-filename", "--port", "--host", "--seed", "--request-rate"):
        assert flag in options
    rows = {row["dest"]: row for row in table["options"]}
    assert rows["num_prompts"]["default"] == 1000 and rows["num_prompts"]["file"] == datasets
    assert rows["request_rate"]["default"] == "inf" and rows["metric_percentiles"]["default"] == "99"
    assert "random" in rows["dataset_name"]["choices"] and "openai" in rows["backend"]["choices"]


@pytest.mark.skipif(not os.environ.get("VLLM_SDIST"), reason="set VLLM_SDIST=vllm-0.19.1.tar.gz to compare")
def test_table_is_up_to_date():
    done = subprocess.run([sys.executable, str(STANDIN_DIR / "generate.py"), "--sdist", os.environ["VLLM_SDIST"],
                           "--bench-only", "--check"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def parse(argv: list[str], release: str = "0.19.1"):
    """The stand-in's bench_serve module playing `release` (it reads VLLM_STANDIN_RELEASE when imported)."""
    del argv
    name = "bench_serve_" + release.replace(".", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, STANDIN_DIR / "bench_serve.py")
        module = importlib.util.module_from_spec(spec)
        saved = os.environ.get("VLLM_STANDIN_RELEASE")
        os.environ["VLLM_STANDIN_RELEASE"] = release
        try:
            sys.modules[name] = module  # dataclasses look the module up by name
            spec.loader.exec_module(module)
        finally:
            os.environ.pop("VLLM_STANDIN_RELEASE")
            if saved is not None:
                os.environ["VLLM_STANDIN_RELEASE"] = saved
    return sys.modules[name]


@pytest.mark.parametrize("release", RELEASES)
def test_defaults_are_the_tables(release: str):
    mod = parse([], release)
    assert mod.TABLE["vllm_version"] == release
    args = mod.parse(["bench", "serve"])
    for row in TABLES[release]["options"]:
        value = getattr(args, row["dest"])
        if row["dest"] == "request_id_prefix":
            assert re.fullmatch(r"bench-[0-9a-f]{8}-", value)
        elif row["default"] == "inf":
            assert value == float("inf")
        elif not isinstance(row["default"], dict):
            assert value == row["default"], row["dest"]


def test_underscores_are_accepted_as_vllm_does():
    args = parse([]).parse(["bench", "serve", "--max_concurrency", "3", "--num_prompts", "5"])
    assert (args.max_concurrency, args.num_prompts) == (3, 5)


@pytest.mark.parametrize(("argv", "pattern"), [
    (["--no-such-flag"], r"^vllm: error: unrecognized arguments: --no-such-flag$"),
    # argparse names a nested subcommand after its parent's usage, "vllm bench <bench_type> [options]".
    (["--max-concurrency", "four"],
     r"^vllm bench .* serve: error: argument --max-concurrency: invalid int value: 'four'$"),
    (["--dataset-name", "wiki"], r"^vllm bench .* serve: error: argument --dataset-name: invalid choice: 'wiki'"),
    (["--backend", "tgi"], r"^vllm bench .* serve: error: argument --backend: invalid choice: 'tgi'"),
    (["--dataset-path", "x.json"], r"^vllm bench .* serve: error: Cannot use 'random' dataset with --dataset-path\. "),
    (["--dataset-name", "sharegpt"], r"error: the stand-in does not implement: dataset 'sharegpt'"),
    (["--backend", "openai-chat"], r"error: the stand-in does not implement: backend 'openai-chat'"),
    (["--profile"], r"error: the stand-in does not implement: profile"),
    (["--tokenizer", "gpt2"], r"error: the stand-in does not implement: tokenizer"),
])
def test_refusals_at_argparse(argv: list[str], pattern: str):
    done = bench(argv)
    assert done.returncode == 2
    assert any(re.search(pattern, line) for line in done.stderr.splitlines()), done.stderr


@pytest.mark.parametrize(("argv", "message"), [
    (["--random-range-ratio", "-0.5"], "ValueError: range_ratio must be in [0, 1)."),
    (["--input-len", "0"], "ValueError: --random-input-len is too small"),
    # upstream checks the minimum length first: a ratio of 1 makes it 0.
    (["--random-range-ratio", "1.0"], "minimum possible total input tokens (prefix + sampled) is 0."),
    (["--goodput", "ttft=5"], 'ArgumentTypeError: Invalid format found for service level objectives.'),
    (["--goodput", "latency:5"], "ValueError: Invalid metric name found, latency: 5.0."),
    (["--header", "novalue"], "ValueError: Invalid header format. Please use KEY=VALUE format."),
])
def test_refusals_after_argparse(argv: list[str], message: str, tmp_path: Path):
    done = bench(["--port", str(free_port()), "--model", "/model", "--num-prompts", "2", *argv])
    assert done.returncode == 1
    assert message in done.stderr, done.stderr


# --- a run against the stand-in server ---------------------------------------------------------

def test_a_run_sends_real_requests_and_reports_vllms_keys(server: Server, tmp_path: Path):
    before = server.metrics()
    done = bench(workload(server.port, tmp_path))
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert set(result) == RESULT_KEYS
    assert (result["completed"], result["failed"], result["num_prompts"]) == (12, 0, 12)
    # The random dataset with ignore_eos: exactly input-len and output-len tokens per request.
    assert (result["total_input_tokens"], result["total_output_tokens"]) == (12 * 64, 12 * 16)
    after = server.metrics()
    # The server counted the same tokens: the requests were real.
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == 12 * 64
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == 12 * 16
    assert result["p95_ttft_ms"] >= result["p50_ttft_ms"] > 0
    assert result["mean_e2el_ms"] > result["mean_ttft_ms"]
    assert result["output_throughput"] == pytest.approx(result["total_output_tokens"] / result["duration"])
    assert "============ Serving Benchmark Result ============" in done.stdout
    assert re.search(r"^Output token throughput \(tok/s\):\s+[0-9.]+", done.stdout, re.M)


def test_without_the_key_every_request_fails(server: Server, tmp_path: Path):
    done = bench(workload(server.port, tmp_path, prompts=3), key=None)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert (result["completed"], result["failed"], result["total_output_tokens"]) == (0, 3, 0)
    assert "Error 0: Unauthorized" in done.stdout


def test_model_from_the_server_needs_the_header_not_the_env_key(server: Server, tmp_path: Path):
    # get_first_model_from_server sends only --header's headers (serve.py:65).
    args = ["--port", str(server.port), "--num-prompts", "1", "--input-len", "8", "--output-len", "2"]
    refused = bench(args)
    assert refused.returncode == 1 and "Failed to fetch models from server" in refused.stderr
    done = bench([*args, "--header", f"Authorization=Bearer {KEY}"])
    assert done.returncode == 0, done.stderr
    assert f"First model name: {SERVED}, first model id: " in done.stdout


def test_the_gauges_follow_the_scheduler(tmp_path: Path):
    """More requests than --max-num-seqs: the rest wait, as vllm:num_requests_waiting says."""
    srv = Server(tmp_path, max_num_seqs=1, decode_tps="20")
    try:
        proc = subprocess.Popen([sys.executable, str(STANDIN), "bench", "serve",
                                 *workload(srv.port, tmp_path, prompts=3, concurrency=3)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=clean_env(OPENAI_API_KEY=KEY))
        seen: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            for name, value in srv.metrics().items():
                seen[name] = max(seen.get(name, 0.0), value)
            time.sleep(0.05)
        assert proc.wait(timeout=30) == 0
        assert seen["vllm:num_requests_running"] == 1.0
        assert seen["vllm:num_requests_waiting"] >= 1.0
        assert 0.0 < seen["vllm:kv_cache_usage_perc"] <= 1.0
        idle = srv.metrics()
        assert (idle["vllm:num_requests_running"], idle["vllm:num_requests_waiting"],
                idle["vllm:kv_cache_usage_perc"]) == (0.0, 0.0, 0.0)
    finally:
        srv.stop()


def test_percentiles_are_numpys():
    numpy = pytest.importorskip("numpy")
    mod = parse([])
    values = [0.3, 0.1, 0.7, 0.2, 0.95, 0.5, 0.11]
    for p in (0, 50, 95, 99, 100, 33.3):
        assert mod.percentile(values, p) == pytest.approx(float(numpy.percentile(values, p)))
    assert mod.percentile([], 50) == 0.0


@pytest.mark.parametrize(("release", "ratio", "inputs", "outputs"), [
    ("0.19.1", "0.5", (5, 15), (10, 30)),
    ("0.34.0", "0.5", (5, 15), (10, 30)),
    # 0.34.0's --random-range-ratio is text: a float, or a JSON dict of input and output ratios.
    ("0.34.0", '{"input": 0.0, "output": 0.5}', (10, 10), (10, 30)),
])
def test_random_lengths_follow_each_releases_range_ratio(release: str, ratio: str, inputs: tuple, outputs: tuple):
    mod = parse([], release)
    args = mod.parse(["bench", "serve", "--random-input-len", "10", "--random-output-len", "20",
                      "--random-range-ratio", ratio, "--num-prompts", "40"])
    samples = mod.random_samples(args)
    assert all(inputs[0] <= len(mod.words(s.prompt)) <= inputs[1] for s in samples), [s.prompt for s in samples]
    assert all(outputs[0] <= s.expected_output_len <= outputs[1] for s in samples)
