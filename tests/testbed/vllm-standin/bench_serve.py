# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""STAND-IN for `vllm bench serve` (vLLM 0.19.1): a test fixture, standard library only.

The real command ships in the vllm/vllm-openai image; the stand-in image has no vLLM, so
this module plays it, following vllm/benchmarks/serve.py of the pinned release (places
cited below as serve.py:LINE, datasets.py:LINE, endpoint_request_func.py:LINE, all under
vllm/benchmarks/ of the vllm-0.19.1 sdist):

* the option table (every flag, type, default and choice) is vllm_bench_serve.json, which
  generate.py reads from the release's argparse calls; flags the stand-in does not implement
  are refused when given a value other than their default, with a message that says so;
* the `random` dataset: input/output lengths drawn as datasets.py:660-711 draws them, with the
  same refusals; a stand-in tokenizer (one word = one token, no special tokens), because the
  real one is the model's Hugging Face tokenizer;
* real HTTP: each request is a streamed POST to /v1/completions with the payload of
  endpoint_request_func.py:168 (the key from OPENAI_API_KEY), timed as there (TTFT at the first
  chunk with choices, ITL between chunks, output tokens from the usage chunk);
* the metrics of calculate_metrics (serve.py:392) and the printed table and result JSON keys of
  benchmark (serve.py:604) and main_async (serve.py:1635), with numpy's mean/median/std/
  percentile (linear interpolation) re-done in Python.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DATA_NAME = "vllm_bench_serve.json"
# The release's table: releases/<version>/ in the repository, or where the image puts it.
RELEASE = os.environ.get("VLLM_STANDIN_RELEASE") or "0.19.1"
DATA_PATHS = (os.path.join(os.path.dirname(os.path.abspath(__file__)), "releases", RELEASE, DATA_NAME),
              "/usr/local/share/vllm-standin/" + DATA_NAME)
# endpoint_request_func.py:781 (ASYNC_REQUEST_FUNCS): the backends that post to /v1/completions.
COMPLETIONS_BACKENDS = ("vllm", "openai")
# Options the stand-in cannot do; given any value but the default, they are refused.
NOT_IMPLEMENTED = {
    "profile", "lora_modules", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps",
    "skip_tokenizer_init", "plot_timeline", "plot_dataset_stats", "tokenizer", "tokenizer_mode",
    "random_batch_size",
}
# The stand-in tokenizer: token i is the word "t<i>".
VOCAB_SIZE = 32000
MS = 1000


def load_table() -> dict[str, Any]:
    explicit = os.environ.get("VLLM_STANDIN_BENCH_DATA")
    for path in ([explicit] if explicit else DATA_PATHS):
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
    raise SystemExit(f"vllm stand-in: {DATA_NAME} not found in {DATA_PATHS}; run generate.py")


TABLE = load_table()


# --- the command line ---------------------------------------------------------------------

class ValidateDatasetArgs(argparse.Action):
    """datasets.py:1389 _ValidateDatasetArgs: `random` with a --dataset-path is an error."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        name = getattr(namespace, "dataset_name", "random")
        path = getattr(namespace, "dataset_path", None)
        if name == "random" and path is not None:
            parser.error("Cannot use 'random' dataset with --dataset-path. Please specify the appropriate "
                         "--dataset-name (e.g., 'sharegpt', 'custom', 'sonnet') for your dataset file: "
                         f"{path}")


TYPES = {"int": int, "float": float, "str": str, "json": json.loads, None: None}


def default_of(row: dict[str, Any]) -> Any:
    value = row["default"]
    if value == "inf" and row["type"] == "float":
        return float("inf")
    if isinstance(value, dict) and "expression" in value:
        # serve.py:1466: f"bench-{uuid.uuid4().hex[:8]}-", new on every run.
        return f"bench-{uuid.uuid4().hex[:8]}-" if row["dest"] == "request_id_prefix" else None
    return value


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """`vllm bench serve`, as vllm/entrypoints/cli/benchmark/main.py nests it."""
    top = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (stand-in)")
    sub = top.add_subparsers(required=False, dest="subparser")
    bench = sub.add_parser("bench", usage="vllm bench <bench_type> [options]")
    bench_sub = bench.add_subparsers(required=True, dest="bench_type")
    serve = bench_sub.add_parser("serve", usage=TABLE["usage"])
    defaults = {}
    for row in TABLE["options"]:
        kwargs: dict[str, Any] = {"dest": row["dest"], "default": default_of(row)}
        defaults[row["dest"]] = kwargs["default"]
        if row["action"] == "store_true":
            kwargs["action"] = "store_true"
        else:
            if row["options"][0] in ("--dataset-name", "--dataset-path"):
                kwargs["action"] = ValidateDatasetArgs
            kind = row["type"] or None
            kwargs["type"] = str if kind and kind.startswith("custom:") else TYPES[kind]
            kwargs.update(nargs=row["nargs"], choices=row["choices"])
            if row["required"]:
                kwargs["required"] = True
        serve.add_argument(*row["options"], **kwargs)
    return top, defaults


def rewrite(argv: list[str]) -> list[str]:
    """FlexibleArgumentParser (vllm/utils/argparse_utils.py) accepts --foo_bar for --foo-bar."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        out.append(key.replace("_", "-") + eq + value if arg.startswith("--") else arg)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    """argv follows `vllm`; exits 2 like argparse for what the stand-in refuses."""
    top, defaults = build_parser()
    args = top.parse_args(rewrite(argv))
    bad = sorted(d for d in NOT_IMPLEMENTED if getattr(args, d) != defaults[d])
    if args.backend not in COMPLETIONS_BACKENDS:
        bad.append(f"backend {args.backend!r} (only {', '.join(COMPLETIONS_BACKENDS)})")
    if args.dataset_name != "random":
        bad.append(f"dataset {args.dataset_name!r} (only random)")
    if bad:
        print("usage: vllm bench serve [options]", file=sys.stderr)
        print(f"vllm bench serve: error: the stand-in does not implement: {', '.join(bad)} "
              "(tests/testbed/vllm-standin/README.md)", file=sys.stderr)
        raise SystemExit(2)
    return args


# --- the random dataset with a word tokenizer ----------------------------------------------

@dataclass
class SampleRequest:
    prompt: str
    prompt_len: int
    expected_output_len: int
    request_id: str


def words(text: str) -> list[str]:
    return text.split()


def range_ratios(value: Any) -> tuple[float, float]:
    """(input, output) of --random-range-ratio: a float for both (0.19.1's type=float) or, from vLLM 0.34.0 (type=str),
    a float or a JSON dict with "input" and "output" (vllm/benchmarks/datasets/datasets.py:2041-2050
    _parse_range_ratio, vllm/benchmarks/datasets/utils.py:19-33 _resolve_range_ratios, 0.34.0)."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            value = json.loads(value)
    if isinstance(value, dict):
        try:
            return float(value["input"]), float(value["output"])
        except KeyError:
            raise ValueError("When range_ratio is a dict it must contain 'input' and "
                             f"'output' keys, got: {sorted(value)}") from None
    return float(value), float(value)


def random_samples(args: argparse.Namespace) -> list[SampleRequest]:
    """RandomDataset.sample (datasets.py:529) with get_sampling_params (datasets.py:660)."""
    rng = random.Random(args.seed)
    input_len, output_len = args.random_input_len, args.random_output_len
    (ratio, out_ratio), prefix_len = range_ratios(args.random_range_ratio), args.random_prefix_len
    num_special = 0  # the stand-in tokenizer adds no special tokens
    real_input_len = max(0, int(input_len) - num_special)
    min_total = int(prefix_len) + math.floor(real_input_len * (1.0 - float(ratio)))
    if min_total < 1:
        raise ValueError(
            "--random-input-len is too small: with tokenizer special "
            f"tokens {num_special} and --random-range-ratio {ratio}, "
            "the minimum possible total input tokens (prefix + sampled) is "
            f"{min_total}. Increase --random-input-len and/or "
            "--random-prefix-len, or decrease --random-range-ratio so that "
            "prefix_len + floor(max(0, random_input_len - num_special)) "
            "* (1 - range_ratio) >= 1.")
    if not (0.0 <= ratio < 1.0 and 0.0 <= out_ratio < 1.0):
        raise ValueError("range_ratio must be in [0, 1).")
    in_low, in_high = math.floor(real_input_len * (1 - ratio)), math.ceil(real_input_len * (1 + ratio))
    out_low = max(math.floor(output_len * (1 - out_ratio)), 1)
    out_high = max(math.ceil(output_len * (1 + out_ratio)), 1)
    prefix = [f"t{rng.randrange(VOCAB_SIZE)}" for _position in range(prefix_len)]
    requests = []
    for i in range(args.num_prompts):
        n_in, n_out = rng.randint(in_low, in_high), rng.randint(out_low, out_high)
        offset = rng.randrange(VOCAB_SIZE)
        # datasets.py:741: (offset + index + arange(input_len)) % vocab.
        inner = [f"t{(offset + i + k) % VOCAB_SIZE}" for k in range(n_in)]
        prompt = " ".join(prefix + inner)
        requests.append(SampleRequest(prompt, len(words(prompt)), n_out, args.request_id_prefix + str(i)))
    return requests


# --- one request: endpoint_request_func.py:150 async_request_openai_completions --------------

@dataclass
class RequestOutput:
    generated_text: str = ""
    success: bool = False
    latency: float = 0.0
    output_tokens: int = 0
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    prompt_len: int = 0
    error: str = ""
    start_time: float = 0.0


def headers_for(extra: dict[str, str] | None, request_id: str | None) -> dict[str, str]:
    """_get_headers and _update_headers_common (endpoint_request_func.py:135-148)."""
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    headers |= extra or {}
    if request_id:
        headers["x-request-id"] = request_id
    return headers


def sse_messages(buffer: str) -> tuple[list[str], str]:
    messages = []
    while "\n\n" in buffer:
        message, buffer = buffer.split("\n\n", 1)
        if message.strip():
            messages.append(message.strip())
    return messages, buffer


def request_completion(api_url: str, payload: dict[str, Any], headers: dict[str, str],
                       prompt_len: int) -> RequestOutput:
    output = RequestOutput(prompt_len=prompt_len)
    url = urllib.parse.urlsplit(api_url)
    st = time.perf_counter()
    output.start_time = recent = st
    first = False
    text = ""
    try:
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=6 * 60 * 60)
        conn.request("POST", url.path, body=json.dumps(payload), headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            output.error = response.reason or ""
            response.read()
            conn.close()
            return output
        buffer = ""
        while chunk := response.read1(65536):
            messages, buffer = sse_messages(buffer + chunk.decode("utf-8"))
            for message in messages:
                if message.startswith(":"):
                    continue
                data = message.removeprefix("data: ")
                if data == "[DONE]":
                    continue
                body = json.loads(data)
                if choices := body.get("choices"):
                    now = time.perf_counter()
                    if not first:
                        first, output.ttft = True, now - st
                    else:
                        output.itl.append(now - recent)
                    recent = now
                    text += choices[0].get("text") or ""
                elif usage := body.get("usage"):
                    output.output_tokens = usage.get("completion_tokens")
        conn.close()
        output.success = first
        if not first:
            output.error = "Never received a valid chunk to calculate TTFT.This response will be marked as failed!"
        output.generated_text = text
        output.latency = recent - st
    except Exception:  # as upstream: any failure marks the request failed
        output.error = traceback.format_exc()
    return output


# --- metrics: serve.py:392 calculate_metrics -----------------------------------------------

def percentile(values: list[float], p: float) -> float:
    """numpy.percentile with its default linear interpolation; 0 for no values (`x or 0`)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict[str, float]:
    vals = values or [0.0]
    return {"mean": statistics.fmean(vals), "median": statistics.median(vals), "std": statistics.pstdev(vals)}


def calculate_metrics(requests: list[SampleRequest], outputs: list[RequestOutput], duration: float,
                      percentiles: list[float], goodput: dict[str, float]) -> dict[str, Any]:
    lens, ttfts, tpots, all_tpots, itls, e2els = [], [], [], [], [], []
    total_input = completed = good = 0
    for req, out in zip(requests, outputs, strict=True):
        if not out.success:
            lens.append(0)
            continue
        n = out.output_tokens or len(words(out.generated_text))
        lens.append(n)
        total_input += req.prompt_len
        tpot = (out.latency - out.ttft) / (n - 1) if n > 1 else 0
        if n > 1:
            tpots.append(tpot)
        all_tpots.append(tpot)
        itls += out.itl
        ttfts.append(out.ttft)
        e2els.append(out.latency)
        completed += 1
    if goodput:
        slo = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        picked = [(slo[k], v / MS) for k, v in goodput.items()]
        rows = zip(*[metric for metric, _slo in picked], strict=True)
        good = sum(1 for row in rows if all(slo >= r for (_metric, slo), r in zip(picked, row, strict=True)))
    ok = [o for o in outputs if o.success]
    peak_tokens, peak_concurrent = peak(ok)
    metrics: dict[str, Any] = {
        "completed": completed, "failed": len(outputs) - len(ok), "total_input": total_input,
        "total_output": sum(lens), "request_throughput": completed / duration,
        "request_goodput": good / duration, "output_throughput": sum(lens) / duration,
        "total_token_throughput": (total_input + sum(lens)) / duration,
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_concurrent, "rtfx": 0.0,
        "lens": lens,
    }
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        stats = summary(values)
        for key, value in stats.items():
            metrics[f"{key}_{name}_ms"] = value * MS
        metrics[f"percentiles_{name}_ms"] = [(p, percentile(values, p) * MS) for p in percentiles]
    return metrics


def peak(outputs: list[RequestOutput]) -> tuple[float, int]:
    """Output tokens per one-second bucket and requests active in it (serve.py:501-545)."""
    if not outputs:
        return 0.0, 0
    start = min(o.start_time for o in outputs)
    end = max(o.start_time + o.latency for o in outputs)
    buckets = math.ceil(end - start) + 1
    tokens, active = [0] * buckets, [0] * buckets
    for out in outputs:
        t = out.start_time + out.ttft
        stamps = [t]
        for gap in out.itl:
            t += gap
            stamps.append(t)
        for stamp in stamps:
            if 0 <= int(stamp - start) < buckets:
                tokens[int(stamp - start)] += 1
        for second in range(int(out.start_time - start), int(out.start_time + out.latency - start) + 1):
            active[second] += 1
    return float(max(tokens)), int(max(active))


# --- the run: serve.py:604 benchmark and serve.py:1635 main_async ---------------------------

def first_model(base_url: str, headers: dict[str, str] | None) -> tuple[str, str]:
    """serve.py:65 get_first_model_from_server (only --header's headers, not the API key)."""
    url = f"{base_url}/v1/models"
    parts = urllib.parse.urlsplit(url)
    try:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=300)
        conn.request("GET", parts.path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        if response.status >= 400:
            raise OSError(f"{response.status}, message='{response.reason}', url='{url}'")
        data = json.loads(body)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"Failed to fetch models from server at {url}. Check that:\n1. The server is running\n"
                           f"2. The server URL is correct\nError: {exc}") from exc
    if data.get("data"):
        return data["data"][0]["id"], data["data"][0]["root"]
    raise ValueError(f"No models found on the server at {base_url}. "
                     "Make sure the server is running and has models loaded.")


def parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"Invalid {what} format. Please use KEY=VALUE format.")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def parse_goodput(pairs: list[str] | None) -> dict[str, float]:
    """serve.py:1126 check_goodput_args and serve.py:1148 parse_goodput."""
    out: dict[str, float] = {}
    try:
        for pair in pairs or []:
            name, value = pair.split(":")
            out[name] = float(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            "Invalid format found for service level objectives. "
            'Specify service level objectives for goodput as "KEY:VALUE" '
            "pairs, where the key is a metric name, and the value is a "
            "number in milliseconds.") from err
    for name, value in out.items():
        if name not in ("ttft", "tpot", "e2el"):
            raise ValueError(f"Invalid metric name found, {name}: {value}. The service level objective name "
                             "should be one of ['ttft', 'tpot', 'e2el']. ")
        if value < 0:
            raise ValueError(f"Invalid value found, {name}: {value}. The service level objective value should "
                             "be non-negative.")
    return out


def arrival_gaps(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """serve.py:243 get_request: gamma-distributed gaps (shape burstiness), none for inf."""
    if rate == float("inf"):
        return [0.0] * n
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    return [rng.gammavariate(burstiness, theta) for _request in range(n)]


def run_requests(requests: list[SampleRequest], payload_for: Any, headers: dict[str, str] | None,
                 api_url: str, args: argparse.Namespace) -> list[RequestOutput]:
    limit = threading.Semaphore(args.max_concurrency) if args.max_concurrency else None
    outputs: list[RequestOutput | None] = [None] * len(requests)

    def one(i: int) -> None:
        req = requests[i]
        if limit:
            limit.acquire()
        try:
            outputs[i] = request_completion(api_url, payload_for(req), headers_for(headers, req.request_id),
                                            req.prompt_len)
        finally:
            if limit:
                limit.release()

    threads = []
    for i, gap in enumerate(arrival_gaps(len(requests), args.request_rate, args.burstiness, args.seed)):
        time.sleep(gap)
        thread = threading.Thread(target=one, args=(i,), daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return [o or RequestOutput(error="not run") for o in outputs]


def line(label: str, value: Any, fmt: str = "") -> None:
    print(("{:<40} {:<10" + fmt + "}").format(label, value))


def report(metrics: dict[str, Any], args: argparse.Namespace, duration: float, selected: list[str],
           goodput: dict[str, float]) -> dict[str, Any]:
    """The table benchmark() prints (serve.py:902-1119) and the result it returns."""
    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    line("Successful requests:", metrics["completed"])
    line("Failed requests:", metrics["failed"])
    if args.max_concurrency is not None:
        line("Maximum request concurrency:", args.max_concurrency)
    if args.request_rate != float("inf"):
        line("Request rate configured (RPS):", args.request_rate, ".2f")
    line("Benchmark duration (s):", duration, ".2f")
    line("Total input tokens:", metrics["total_input"])
    line("Total generated tokens:", metrics["total_output"])
    line("Request throughput (req/s):", metrics["request_throughput"], ".2f")
    if goodput:
        line("Request goodput (req/s):", metrics["request_goodput"], ".2f")
    line("Output token throughput (tok/s):", metrics["output_throughput"], ".2f")
    line("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], ".2f")
    line("Peak concurrent requests:", metrics["max_concurrent_requests"], ".2f")
    line("Total token throughput (tok/s):", metrics["total_token_throughput"], ".2f")
    result: dict[str, Any] = {
        "duration": duration, "completed": metrics["completed"], "failed": metrics["failed"],
        "total_input_tokens": metrics["total_input"], "total_output_tokens": metrics["total_output"],
        "request_throughput": metrics["request_throughput"],
        "request_goodput": metrics["request_goodput"] if goodput else None,
        "output_throughput": metrics["output_throughput"],
        "total_token_throughput": metrics["total_token_throughput"],
        "max_output_tokens_per_s": metrics["max_output_tokens_per_s"],
        "max_concurrent_requests": metrics["max_concurrent_requests"], "rtfx": metrics["rtfx"],
    }
    headers = (("ttft", "TTFT", "Time to First Token"), ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
               ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency"))
    for attr, name, header in headers:
        if attr not in selected:
            continue
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        line(f"Mean {name} (ms):", metrics[f"mean_{attr}_ms"], ".2f")
        line(f"Median {name} (ms):", metrics[f"median_{attr}_ms"], ".2f")
        for key in ("mean", "median", "std"):
            result[f"{key}_{attr}_ms"] = metrics[f"{key}_{attr}_ms"]
        for p, value in metrics[f"percentiles_{attr}_ms"]:
            word = str(int(p)) if int(p) == p else str(p)
            line(f"P{word} {name} (ms):", value, ".2f")
            result[f"p{word}_{attr}_ms"] = value
    print("=" * 50)
    return result


def urls(args: argparse.Namespace) -> tuple[str, str]:
    if args.base_url is not None:
        return f"{args.base_url}{args.endpoint}", args.base_url
    host = f"[{args.host}]" if ":" in args.host else args.host
    return f"http://{host}:{args.port}{args.endpoint}", f"http://{host}:{args.port}"


def model_names(args: argparse.Namespace, base_url: str, headers: dict[str, str] | None) -> tuple[str, str]:
    if args.model is not None:
        return args.served_model_name, args.model
    print("Model not specified, fetching first model from server...")
    model_name, model_id = first_model(base_url, headers)
    print(f"First model name: {model_name}, first model id: {model_id}")
    return model_name, model_id


def sampling_body(args: argparse.Namespace) -> dict[str, Any]:
    """serve.py:1752-1781: the sampling parameters given, then --extra-body over them."""
    sampling = {k: v for k, v in {
        "top_p": args.top_p, "top_k": args.top_k, "min_p": args.min_p, "temperature": args.temperature,
        "frequency_penalty": args.frequency_penalty, "presence_penalty": args.presence_penalty,
        "repetition_penalty": args.repetition_penalty}.items() if v is not None}
    if "temperature" not in sampling:
        print("WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by default. The default "
              "will be determined on the server side and can be model/API specific. For the old behavior, include "
              "--temperature=0.")
    return {**sampling, **(args.extra_body or {})}


def bench(args: argparse.Namespace) -> dict[str, Any]:
    print(args)
    api_url, base_url = urls(args)
    headers = parse_pairs(args.header, "header") if args.header else None
    model_name, model_id = model_names(args, base_url, headers)
    tokenizer_id = args.tokenizer if args.tokenizer is not None else model_id
    if args.input_len is not None:
        args.random_input_len = args.input_len
    if args.output_len is not None:
        args.random_output_len = args.output_len
    # serve.py:1735: the random dataset ignores EOS on OpenAI-compatible backends.
    args.ignore_eos = True
    requests = random_samples(args)
    goodput = parse_goodput(args.goodput)
    extra_body = sampling_body(args)
    selected = (args.percentile_metrics or "ttft,tpot,itl").split(",")
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]
    # endpoint_request_func.py:113 _validate_api_url, before the first request.
    if not api_url.endswith(("completions", "profile")):
        raise ValueError("OpenAI Completions API URL must end with one of: {'completions', 'profile'}.")

    def payload_for(req: SampleRequest) -> dict[str, Any]:
        payload = {"model": model_name or model_id, "prompt": req.prompt, "repetition_penalty": 1.0,
                   "max_tokens": req.expected_output_len, "logprobs": args.logprobs, "stream": True,
                   "stream_options": {"include_usage": True}}
        if args.ignore_eos:
            payload["ignore_eos"] = True
        payload.update(extra_body)
        return payload

    print("Starting initial single prompt test run...")
    if args.ready_check_timeout_sec > 0:
        wait_ready(api_url, payload_for(requests[0]), headers, requests[0].prompt_len, args.ready_check_timeout_sec)
    else:
        print("Skipping endpoint ready check.")
    if args.num_warmups > 0:
        print(f"Warming up with {args.num_warmups} requests...")
        run_requests([requests[0]] * args.num_warmups, payload_for, headers, api_url,
                     argparse.Namespace(**{**vars(args), "request_rate": float("inf")}))
        print("Warmup run completed.")
    print("Starting main benchmark run...")
    print(f"Traffic request rate: {args.request_rate}")
    print(f"Burstiness factor: {args.burstiness} "
          f"({'Poisson process' if args.burstiness == 1.0 else 'Gamma distribution'})")
    print(f"Maximum request concurrency: {args.max_concurrency}")
    start = time.perf_counter()
    outputs = run_requests(requests, payload_for, headers, api_url, args)
    duration = time.perf_counter() - start
    metrics = calculate_metrics(requests, outputs, duration, percentiles, goodput)
    failed = [o for o in outputs if not o.success]
    if failed:
        print("Failed requests during benchmark run detected (capping to 10):")
        for i, out in enumerate(failed[:10]):
            print(f"Error {i}: {out.error}")
    result = report(metrics, args, duration, selected, goodput)
    if args.save_detailed:
        result.update(input_lens=[o.prompt_len for o in outputs], output_lens=metrics["lens"],
                      ttfts=[o.ttft for o in outputs], itls=[o.itl for o in outputs],
                      start_times=[o.start_time for o in outputs],
                      generated_texts=[o.generated_text for o in outputs], errors=[o.error for o in outputs])
    return save(args, result, model_id, tokenizer_id)


def wait_ready(api_url: str, payload: dict[str, Any], headers: dict[str, str] | None, prompt_len: int,
               timeout: int) -> None:
    """lib/ready_checker.py wait_for_endpoint: retry every 5 s until one request succeeds."""
    print(f"Waiting for endpoint to become up in {timeout} seconds")
    deadline = time.perf_counter() + timeout
    output = RequestOutput()
    while time.perf_counter() < deadline:
        output = request_completion(api_url, payload, headers_for(headers, None), prompt_len)
        if output.success:
            print("Initial test run completed.")
            return
        time.sleep(min(5, max(0.0, deadline - time.perf_counter())))
    raise ValueError("Initial test run failed - Please make sure benchmark arguments are correctly specified. "
                     f"Error: {output.error}")


def save(args: argparse.Namespace, result: dict[str, Any], model_id: str, tokenizer_id: str) -> dict[str, Any]:
    """main_async's result JSON (serve.py:1852-1968) and compute_result_filename (serve.py:1199)."""
    now = datetime.now().strftime("%Y%m%d-%H%M%S")
    out: dict[str, Any] = {"date": now, "endpoint_type": args.backend, "backend": args.backend,
                           "label": args.label, "model_id": model_id, "tokenizer_id": tokenizer_id,
                           "num_prompts": args.num_prompts}
    out.update(parse_pairs(args.metadata, "metadata"))
    out.update(request_rate=args.request_rate if args.request_rate < float("inf") else "inf",
               burstiness=args.burstiness, max_concurrency=args.max_concurrency)
    out = {**out, **result}
    if args.save_result or args.append_result:
        concurrency = f"-concurrency{args.max_concurrency}" if args.max_concurrency is not None else ""
        name = args.result_filename or (f"{args.label or args.backend}-{args.request_rate}qps{concurrency}-"
                                        f"{model_id.rsplit('/', maxsplit=1)[-1]}-{now}.json")
        if args.result_dir:
            os.makedirs(args.result_dir, exist_ok=True)
            name = os.path.join(args.result_dir, name)
        with open(name, "a+" if args.append_result else "w", encoding="utf-8") as handle:
            if args.append_result and handle.tell() != 0:
                handle.write("\n")
            json.dump(out, handle)
    return out


def main(argv: list[str]) -> int:
    """argv follows `vllm`: ["bench", "serve", ...]."""
    args = parse(argv)
    try:
        bench(args)
    except (ValueError, RuntimeError, argparse.ArgumentTypeError) as exc:
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
