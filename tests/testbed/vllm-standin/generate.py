#!/usr/bin/env python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate the vLLM stand-in's data (releases/<version>/) from each supported vLLM release's source.

    python3 tests/testbed/vllm-standin/generate.py                   # every SUPPORTED release, from PyPI
    python3 tests/testbed/vllm-standin/generate.py --version 0.19.1  # one release
    python3 tests/testbed/vllm-standin/generate.py --sdist vllm-0.34.0.tar.gz --check
    python3 tests/testbed/vllm-standin/generate.py --module-only     # vllm_releases.py from the tables

Why run vLLM's own parser rather than read it: `vllm serve`'s options are built at run time
from the config dataclasses' type hints (vllm/engine/arg_utils.py `_compute_kwargs`), so no
static reading gives the real table. The sdist's pure-Python modules are imported with the
heavy native packages (torch, transformers, ...) replaced by inert stubs; nothing of vLLM is
installed or copied into this repository, only the table and outcomes it produces. The sdist is
fetched through PyPI's simple API (JSON form, sha256-checked): `pip download --no-binary :all:
vllm==X` would also try to build vLLM's metadata, which needs torch and CUDA.

What lands in releases/<version>/vllm_serve.json:
* every `vllm serve` option: option strings, dest, action, nargs, value type, choices, default;
* the registered tool-call parsers, reasoning parsers, quantization methods, load formats and
  attention backends, and the compilation modes, which have no argparse choices (an unknown
  name fails at start-up or in pydantic, not in argparse's choices); the MoE and linear kernel
  backends (KernelConfig's Literals), the speculative methods (SpeculativeConfig.method's
  Literal) and the KV-cache dtypes (CacheConfig.cache_dtype's Literal);
* whether the release's FlexibleArgumentParser takes abbreviations (allow_abbrev);
* vLLM's failure messages as format strings, each with its upstream file:line, checked
  against the source text (the literal parts must equal the f-string's literal parts);
* pydantic's messages for the config fields the stand-in checks itself (CacheConfig's
  gpu_memory_utilization bounds, CompilationConfig's mode), produced by running the classes;
* the outcome of every command line in CASES under the real parser, and for names argparse
  lets through, under the real CacheConfig and AttentionConfig code (the tests' expectations).

Each release has its own releases/<version>/vllm_serve.json and vllm_bench_serve.json; a message
whose text or place a release changed is quoted as that release says it (RELEASE_MESSAGES), one the
release lacks is left out. The options, registries, messages and field errors of every SUPPORTED
release also go to plugins/module_utils/vllm_releases.py, the copy the collection's own checks
(vllm_diagnosis.py, vllm_serve_check.py) read.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import io
import json
import re
import sys
import tarfile
import tempfile
import types
import typing
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The releases the collection supports, each with its own tables under releases/<version>/;
# DEFAULT is the one the collection's checks assume when a caller names none.
SUPPORTED = ("0.19.1", "0.34.0")
DEFAULT = "0.34.0"
RELEASES_DIR = HERE / "releases"
SIMPLE_INDEX = "https://pypi.org/simple/vllm/"

# Native or heavy packages the parser's import chain touches but never needs for parsing.
STUBBED_PACKAGES = {
    "torch", "transformers", "msgspec", "triton", "pynvml", "numba", "xgrammar", "tokenizers",
    "safetensors", "einops", "gguf", "cbor2", "zmq", "blake3", "openai_harmony", "tiktoken",
    "sentencepiece", "mistral_common", "prometheus_client", "psutil", "cloudpickle", "huggingface_hub",
    "cachetools", "PIL", "uvloop", "aiohttp", "partial_json_parser", "pybase64", "soundfile", "cv2",
    "llguidance", "compressed_tensors", "depyf", "flashinfer", "ray", "torchvision", "torchaudio",
    "fastapi", "starlette",
}

# Failure messages the stand-in prints, as vLLM formats them: name -> (file, anchor, template).
# The anchor is a literal from the message; the template's literal parts must equal those of
# the f-string at that place (checked by `quote`), so a changed upstream text fails generation.
MESSAGES = {
    "unknown-tool-call-parser": (
        "vllm/entrypoints/openai/api_server.py", "invalid tool call parser: ",
        "invalid tool call parser: {name} (chose from {{ {choices} }})"),
    "unknown-reasoning-parser": (
        "vllm/entrypoints/openai/api_server.py", "invalid reasoning parser: ",
        "invalid reasoning parser: {name} (chose from {{ {choices} }})"),
    "reasoning-parser-not-found": (
        "vllm/reasoning/abs_reasoning_parsers.py", "Reasoning parser '",
        "Reasoning parser '{name}' not found. Available parsers: {registered}"),
    # The API server's own lookup (OpenAIServingRender, OpenAIServingChat): `{name=}` prints the repr.
    "reasoning-parser-not-registered": (
        "vllm/parser/parser_manager.py", "reasoning_parser_name=",
        "reasoning_parser_name={name} has not been registered"),
    "unknown-attention-backend": (
        "vllm/v1/attention/backends/registry.py", "Unknown attention backend: ",
        "Unknown attention backend: '{name}'. Valid options are: {valid_backends}"),
    "attention-backend-twice": (
        "vllm/engine/arg_utils.py", "attention_backend and attention_config.backend",
        "attention_backend and attention_config.backend are mutually exclusive"),
    "invalid-compilation-mode": (
        "vllm/config/compilation.py", "Invalid compilation mode: ",
        "Invalid compilation mode: {value}. Valid modes are: {valid_modes}"),
    "auto-tool-choice-without-parser": (
        "vllm/entrypoints/openai/cli_args.py", "Error: --enable-auto-tool-choice requires",
        "Error: --enable-auto-tool-choice requires --tool-call-parser"),
    "log-outputs-without-log-requests": (
        "vllm/entrypoints/openai/cli_args.py", "Error: --enable-log-outputs requires",
        "Error: --enable-log-outputs requires --enable-log-requests"),
    "model-not-first": (
        "vllm/utils/argparse_utils.py", "`model` should be provided as the first",
        "`model` should be provided as the first positional argument when using `vllm serve`. "
        "i.e. `vllm serve <model> --<arg> <value>`."),
    "unknown-quantization": (
        "vllm/config/model.py", "Unknown quantization method: ",
        "Unknown quantization method: {name}. Must be one of {choices}."),
    "unknown-load-format": (
        "vllm/model_executor/model_loader/__init__.py", "Load format `",
        "Load format `{name}` is not supported"),
    "free-memory-on-startup": (
        "vllm/v1/worker/utils.py", "is less than desired GPU memory utilization",
        "Free memory on device {device} ({free}/{total} GiB) on startup is less than desired GPU memory "
        "utilization ({utilization}, {requested} GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes."),
    "memory-profiling": (
        "vllm/v1/worker/gpu_worker.py", "Error in memory profiling. ",
        "Error in memory profiling. Initial free memory {initial} GiB, current free memory {current} GiB. "
        "This happens when other processes sharing the same container release GPU memory while vLLM is "
        "profiling during initialization. To fix this, ensure consistent GPU memory allocation or isolate "
        "vLLM in its own container."),
    "no-kv-cache-memory": (
        "vllm/v1/core/kv_cache_utils.py", "No available memory for the cache blocks. ",
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
        "the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    "kv-cache-too-small": (
        "vllm/v1/core/kv_cache_utils.py", "To serve at least one request with the models's max seq len ",
        "To serve at least one request with the models's max seq len ({max_model_len}), ({needed} GiB KV "
        "cache is needed, which is larger than the available KV cache memory ({available} GiB). {estimated}"
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    "kv-cache-estimate": (
        "vllm/v1/core/kv_cache_utils.py", "Based on the available memory, ",
        "Based on the available memory, the estimated maximum model length is {estimated_max_len}. "),
    "max-model-len-above-derived": (
        "vllm/config/model.py", "User-specified max_model_len (",
        "User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
        "({max_len_key}={derived} or model_max_length={model_max_length} in model's config.json)."),
    "max-model-len-override": (
        "vllm/config/model.py", " To allow overriding this maximum, set ",
        "{msg} To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {warning}"),
    "max-model-len-warning": (
        "vllm/config/model.py", "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position "
        "encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute "
        "position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds "
        "error."),
    "mamba-align-block-size": (
        "vllm/config/vllm.py", "In Mamba cache align mode, block_size ",
        "In Mamba cache align mode, block_size ({block_size}) must be <= max_num_batched_tokens "
        "({max_num_batched_tokens})."),
    "engine-core-failed": (
        "vllm/v1/engine/utils.py", "Engine core initialization failed. ",
        "Engine core initialization failed. See root cause above. Failed core proc(s): {finished}"),
    # --- multi-node (--nnodes/--node-rank/--master-addr/--master-port/--headless, the mp executor) ---
    # ServeSubcommand.cmd, before anything starts.
    "headless-api-server-count": (
        "vllm/entrypoints/cli/serve.py", "cannot be used with --headless",
        "--api-server-count={count} cannot be used with --headless (no API servers are started in headless mode)."),
    # EngineArgs.create_engine_config: assertions after CacheConfig, before ParallelConfig.
    "nnodes-data-parallel-backend": (
        "vllm/engine/arg_utils.py", "nnodes > 1 is only supported with data_parallel_backend=mp",
        "nnodes > 1 is only supported with data_parallel_backend=mp"),
    "nnodes-world-size": (
        "vllm/engine/arg_utils.py", " must be divisible by nnodes=",
        "world_size={world_size} must be divisible by nnodes={nnodes}."),
    "nnodes-node-rank": (
        "vllm/engine/arg_utils.py", " must be less than nnodes=",
        "node_rank={node_rank} must be less than nnodes={nnodes}."),
    # ParallelConfig.__post_init__ (a pydantic dataclass: a ValidationError for ParallelConfig).
    "world-size-above-gpus": (
        "vllm/config/parallel.py", "is larger than the number of ",
        "World size ({world_size}) is larger than the number of available GPUs ({gpu_count}) in this node. "
        "If this is intentional and you are using:\n- ray, set '--distributed-executor-backend ray'.\n"
        "- multiprocessing, set '--nnodes' appropriately."),
    "nnodes-executor-backend": (
        "vllm/config/parallel.py", "nnodes > 1 can only be set when distributed executor ",
        "nnodes > 1 can only be set when distributed executor backend is mp, uni or external_launcher."),
    # VllmConfig.__post_init__ -> ModelConfig.verify_with_parallel_config.
    "heads-not-divisible-by-tp": (
        "vllm/config/model.py", "Total number of attention heads (",
        "Total number of attention heads ({heads}) must be divisible by tensor parallel size "
        "({tensor_parallel_size})."),
    # run_headless, on a node whose rank is above 0 (a logger call: %-style arguments).
    "headless-worker-launch": (
        "vllm/entrypoints/cli/serve.py", "headless multiproc executor, ",
        "Launching vLLM (v{version}) headless multiproc executor, with head node address {address} for "
        "torch.distributed process group."),
    # A worker process that cannot start (e.g. the rendezvous timed out), and what its parent says.
    "worker-proc-failed-to-start": (
        "vllm/v1/executor/multiproc_executor.py", "WorkerProc failed to start.", "WorkerProc failed to start."),
    "worker-proc-init-failed": (
        "vllm/v1/executor/multiproc_executor.py", "WorkerProc initialization failed due to",
        "WorkerProc initialization failed due to an exception in a background process. See stack trace for root "
        "cause."),
    "engine-core-failed-to-start": (
        "vllm/v1/engine/core.py", "EngineCore failed to start.", "EngineCore failed to start.", "run_engine_core"),
    # A member lost while serving: the next collective fails in the head's worker, the engine dies.
    "nccl-error": ("vllm/distributed/device_communicators/pynccl_wrapper.py", "NCCL error: ", "NCCL error: {error}"),
    "worker-proc-exception": (
        "vllm/v1/executor/multiproc_executor.py", "WorkerProc hit an exception.", "WorkerProc hit an exception."),
    "worker-failed": (
        "vllm/v1/executor/multiproc_executor.py", "Worker failed with error '",
        "Worker failed with error '{error}', please check the stack trace above for the root cause"),
    "engine-core-fatal": (
        "vllm/v1/engine/core.py", "EngineCore encountered a fatal error.", "EngineCore encountered a fatal error.",
        "run_engine_core"),
    "output-handler-failed": (
        "vllm/v1/engine/async_llm.py", "AsyncLLM output_handler failed.", "AsyncLLM output_handler failed."),
    "engine-dead": (
        "vllm/v1/engine/exceptions.py", "EngineCore encountered an issue. ",
        "EngineCore encountered an issue. See stack trace (above) for the root cause."),
}

# Messages whose text or place changed since 0.19.1, as the release that changed them says them
# (its file; `quote` checks the literal parts and finds the line). None: the release has no such
# message (its table leaves it out). A release takes the changes of every listed release up to it.
RELEASE_MESSAGES: dict[str, dict[str, tuple[str, ...] | None]] = {
    "0.34.0": {
        # vllm/entrypoints/openai/cli_args.py became vllm/entrypoints/common/cli_args.py, and
        # validate_api_server_args moved there from api_server.py.
        "unknown-tool-call-parser": (
            "vllm/entrypoints/common/cli_args.py", "invalid tool call parser: ",
            "invalid tool call parser: {name} (chose from {{ {choices} }})", "validate_api_server_args"),
        "unknown-reasoning-parser": (
            "vllm/entrypoints/common/cli_args.py", "invalid reasoning parser: ",
            "invalid reasoning parser: {name} (chose from {{ {choices} }})", "validate_api_server_args"),
        "auto-tool-choice-without-parser": (
            "vllm/entrypoints/common/cli_args.py", "Error: --enable-auto-tool-choice requires",
            "Error: --enable-auto-tool-choice requires --tool-call-parser"),
        "log-outputs-without-log-requests": (
            "vllm/entrypoints/common/cli_args.py", "Error: --enable-log-outputs requires",
            "Error: --enable-log-outputs requires --enable-log-requests"),
        # _check_enough_kv_cache_memory moved to kv_cache_planning.py; the advice became a hint
        # that depends on the configuration (_more_kv_cache_memory_hint).
        "no-kv-cache-memory": (
            "vllm/v1/core/kv_cache_planning.py", "No available memory for the cache blocks. ",
            "No available memory for the cache blocks. {hint} See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
        "kv-cache-too-small": (
            "vllm/v1/core/kv_cache_planning.py", "To serve at least one request with the model's max seq len ",
            "To serve at least one request with the model's max seq len ({max_model_len}), ({needed} GiB KV "
            "cache is needed, which is larger than the available KV cache memory ({available} GiB). {estimated}"
            "{hint} Decreasing `max_model_len` also reduces what is needed. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
        "kv-cache-estimate": (
            "vllm/v1/core/kv_cache_planning.py", "Based on the available memory, ",
            "Based on the available memory, the estimated maximum model length is {estimated_max_len}. "),
        # VllmConfig no longer asserts the aligned block size (vllm/config/vllm.py keeps only the
        # chunked-MM-input assertion of align mode).
        "mamba-align-block-size": None,
        # --kv-cache-dtype lost its argparse choices: CacheConfig's validator refuses an unknown name.
        "invalid-kv-cache-dtype": (
            "vllm/config/cache.py", "Invalid kv_cache_dtype: ",
            "Invalid kv_cache_dtype: {name}. Valid values are: {valid}"),
        # The multi-node assertions became ValueErrors with other words (EngineArgs.create_engine_config).
        "nnodes-data-parallel-backend": (
            "vllm/engine/arg_utils.py", "` requires `--data-parallel-backend mp`; got ",
            "Invalid data-parallel launch options: `--nnodes {nnodes}` requires `--data-parallel-backend mp`; "
            "got `--data-parallel-backend {backend}`. Use the MP backend or set `--nnodes 1`."),
        "nnodes-world-size": (
            "vllm/engine/arg_utils.py", "` must evenly divide the total world size (",
            "Invalid data-parallel launch options: `--nnodes {nnodes}` must evenly divide the total world size "
            "({world_size}). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size`, "
            "`--tensor-parallel-size`, or `--prefill-context-parallel-size`."),
        "nnodes-node-rank": (
            "vllm/engine/arg_utils.py", "Invalid data-parallel launch options: `--node-rank` must be between 0 and ",
            "Invalid data-parallel launch options: `--node-rank` must be between 0 and {max_rank}; got "
            "`--node-rank {node_rank}`. Set it to this node's zero-based index."),
    },
}


def release_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def messages_of(version: str) -> dict[str, tuple[str, ...]]:
    """MESSAGES as `version` has them: the changes of every RELEASE_MESSAGES release up to it."""
    out: dict[str, tuple[str, ...] | None] = dict(MESSAGES)
    for release in sorted(RELEASE_MESSAGES, key=release_key):
        if release_key(release) <= release_key(version):
            out.update(RELEASE_MESSAGES[release])
    return {name: spec for name, spec in out.items() if spec is not None}


# Texts of torch.distributed and NCCL that vLLM passes on: not in vLLM's source, so not checked
# by `quote`. They are those of the torch release vLLM pins (requirements/cuda.txt); the
# generator stops when that pin moves, so that they are read again from the new release.
TORCH_PIN = "torch==2.10.0"
TORCH_MESSAGES = {
    # Client side of the TCPStore rendezvous (init_process_group with tcp://master_addr:master_port):
    # it retries the connection until the timeout, then raises DistNetworkError. The same text
    # is quoted in https://github.com/vllm-project/vllm/issues/19670.
    "torch-connect-timeout": {
        "source": "pytorch/pytorch v2.10.0 torch/csrc/distributed/c10d/socket.cpp SocketConnectOp::throwTimeoutError",
        "exception": "torch.distributed.DistNetworkError",
        "template": "The client socket has timed out after {timeout_ms}ms while trying to connect to "
                    "({host}, {port})."},
    # Server side (rank 0 hosts the store and waits for every rank; elapsed seconds, so timeout + 1).
    "torch-wait-for-workers": {
        "source": "pytorch/pytorch v2.10.0 torch/csrc/distributed/c10d/TCPStore.cpp TCPStore::waitForWorkers",
        "exception": "torch.distributed.DistStoreError",
        "template": "Timed out after {seconds} seconds waiting for clients. {joined}/{world_size} clients joined."},
    # ncclGetErrorString(ncclRemoteError): what vLLM's NCCL_CHECK puts after "NCCL error: ".
    "nccl-remote-error": {
        "source": "NVIDIA/nccl src/init.cc ncclGetErrorString, ncclRemoteError",
        "exception": None,
        "template": "remote process exited or there was a network error"},
}


# The torch pins whose texts TORCH_MESSAGES hold, and what was done to know it. vLLM 0.34.0 pins
# torch 2.14.0, whose texts were not read again: re-read them from pytorch's v2.14.0 tag
# (torch/csrc/distributed/c10d/TCPStore.cpp, socket.cpp) before relying on them for 0.34.0.
TORCH_PINS = {TORCH_PIN: "read from pytorch/pytorch v2.10.0",
              "torch==2.14.0": "not re-read from v2.14.0: the texts of v2.10.0"}


def torch_messages(source: Path) -> dict[str, Any]:
    """TORCH_MESSAGES, after checking that vLLM pins a torch they are known for."""
    pins = re.findall(r"^torch==\S+", (source / "requirements" / "cuda.txt").read_text(), re.M)
    if len(pins) != 1 or pins[0] not in TORCH_PINS:
        raise SystemExit(f"requirements/cuda.txt pins {pins}, TORCH_MESSAGES were read for {list(TORCH_PINS)}: "
                         "read the texts again from the new torch and NCCL releases")
    extra = {} if pins[0] == TORCH_PIN else {"torch_texts": TORCH_PINS[pins[0]]}
    return {"torch_pin": pins[0], **extra, **TORCH_MESSAGES}


# Command lines checked against the real parser; the model is the first word unless a case
# is about its position. Grouped by what they exercise; the tests run every one.
MODEL = "/model"
CASES: list[list[str]] = [
    # accepted: the role's own argument list and common spellings
    [MODEL],
    [MODEL, "--served-model-name", "qwen3.5-35b", "--host", "0.0.0.0", "--port", "8000", "--dtype", "auto",
     "--max-model-len", "16384", "--gpu-memory-utilization", "0.75", "--max-num-seqs", "16",
     "--max-num-batched-tokens", "16384", "--enforce-eager", "--enable-prefix-caching", "--reasoning-parser",
     "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", "--limit-mm-per-prompt",
     '{"image":0,"video":0}'],
    [MODEL, "--max_model_len", "16384"],
    [MODEL, "--max-model-len=16k"],
    [MODEL, "--max-model-len", "16K"],
    [MODEL, "--max-model-len", "1.5k"],
    [MODEL, "--max-model-len", "auto"],
    [MODEL, "--max-model-len", "-1"],
    [MODEL, "--max-model-len", "1t"],
    [MODEL, "--max-model-len", "AUTO"],
    [MODEL, "--max-num-batched-tokens", "8k"],
    [MODEL, "--no-enable-prefix-caching"],
    [MODEL, "--no-enforce-eager"],
    [MODEL, "--enable-chunked-prefill", "--no-async-scheduling"],
    [MODEL, "-cc", '{"mode": 3}'],
    [MODEL, "--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
    [MODEL, "-cc.mode", "3"],
    [MODEL, "-O3"],
    [MODEL, "-O", "2"],
    [MODEL, "-O0"],
    [MODEL, "--optimization-level", "1"],
    [MODEL, "--limit-mm-per-prompt.image", "0"],
    [MODEL, "--limit-mm-per-prompt.image", "0", "--limit-mm-per-prompt.video", "0"],
    [MODEL, "--skip-mm-profiling"],
    [MODEL, "--mamba-cache-mode", "align"],
    [MODEL, "--default-chat-template-kwargs", '{"enable_thinking": false}'],
    [MODEL, "--quantization", "fp8"],
    [MODEL, "--quantization", "mxfp8"],
    [MODEL, "-q", "modelopt_fp4"],
    [MODEL, "--load-format", "instanttensor"],
    [MODEL, "--load-format", "safetensors"],
    [MODEL, "--kv-cache-dtype", "fp8"],
    [MODEL, "--kv-cache-dtype", "fp8_e4m3"],
    [MODEL, "--reasoning-parser", "deepseek_r1"],
    [MODEL, "--reasoning-parser", "qwen3"],
    [MODEL, "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
    [MODEL, "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_xml"],
    [MODEL, "--tool-call-parser", "no_such_parser"],
    [MODEL, "--api-key", "a", "b"],
    [MODEL, "-tp", "1", "-pp", "1"],
    [MODEL, "--trust-remote-code", "--seed", "0"],
    ["--model", MODEL, "--port", "8001"],
    ["--model=" + MODEL],
    [MODEL, "--served-model-name", "a", "b"],
    [MODEL, "--uvicorn-log-level", "debug"],
    [MODEL, "--generation-config", "vllm"],
    [MODEL, "--block-size", "32"],
    [MODEL, "--reasoning-parser", "openai_gptoss"],
    [MODEL, "--reasoning-parser", "nemotron_v3"],
    [MODEL, "--enable-auto-tool-choice", "--tool-call-parser", "glm47"],
    [MODEL, "--enable-auto-tool-choice", "--tool-call-parser", "openai"],
    [MODEL, "-cc.cudagraph_mode", "PIECEWISE"],
    [MODEL, "--limit-mm-per-prompt", '{"image": 0}'],
    [MODEL, "--kv-cache-dtype", "fp8_e5m2", "--block-size", "16"],
    [MODEL, "--max-num-batched-tokens", "2048", "--max-num-seqs", "4"],
    [MODEL, "--load-format", "runai_streamer_sharded"],
    [MODEL, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
    [MODEL, "--chat-template-content-format", "openai"],
    [MODEL, "--enable-log-requests", "--enable-log-outputs"],
    [MODEL, "--gpu-memory-utilization", "1"],
    [MODEL, "--gpu-memory-utilization", "0.01"],
    [MODEL, "--attention-backend", "FLASHINFER"],
    [MODEL, "--attention-backend", "flash_attn"],
    [MODEL, "--attention-backend", "auto"],
    [MODEL, "--attention-backend", "TRITON_ATTN", "-ac", '{"backend": "auto"}'],
    [MODEL, "-ac", '{"backend": "flashinfer"}'],
    [MODEL, "-ac.backend", "FLASH_ATTN"],
    [MODEL, "-cc", '{"mode": "vllm_compile"}'],
    [MODEL, "-cc.mode", "NONE"],
    [MODEL, "-cc", '{"mode": 0}'],
    [MODEL, "-cc", '{"mode": 3.0}'],
    [MODEL, "-cc", '{"mode": true}'],
    [MODEL, "-cc", '{"mode": null}'],
    # refused by argparse (exit 2)
    [MODEL, "--swap-space", "4"],
    [MODEL, "-O", '{"level": 3}'],
    [MODEL, "--max-model-len", "16384.0"],
    [MODEL, "--max-model-len", "1.5K"],
    [MODEL, "--max-model-len", "sixteen"],
    [MODEL, "--gpu-memory-utilisation", "0.7"],
    [MODEL, "--gpu-memory-utilization", "most"],
    [MODEL, "--max-num-seqs", "16.5"],
    [MODEL, "--dtype", "fp7"],
    [MODEL, "--kv-cache-dtype", "int4"],
    [MODEL, "--port", "http"],
    [MODEL, "--limit-mm-per-prompt", "{image:0}"],
    [MODEL, "--disable-log-requests"],
    [MODEL, "--enable-prefix-caching=yes"],
    [MODEL, "--uvicorn-log-level", "loud"],
    [MODEL, "--mamba-cache-mode", "fast"],
    [MODEL, "extra-positional"],
    [MODEL, "--compilation-config", "{mode: 3}"],
    [MODEL, "--compilation-config", '{"no_such_field": 1}'],
    [MODEL, "--max-num-batched-tokens", "2.5K"],
    [MODEL, "--port", "99999999999999999999x"],
    [MODEL, "--chat-template-content-format", "html"],
    [MODEL, "--tensor-parallel-size", "two"],
    [MODEL, "-cc", '{"mode": 4}'],
    [MODEL, "-cc", '{"mode": -1}'],
    [MODEL, "-cc", '{"mode": 3.5}'],
    [MODEL, "-cc", '{"mode": [3]}'],
    [MODEL, "-cc", '{"mode": "3"}'],
    [MODEL, "-cc.mode", "fast"],
    [MODEL, "--compilation-config", '{"mode": "piecewise", "no_such_field": 1}'],
    [MODEL, "-ac", '{"backend": "sdpa"}'],
    [MODEL, "-ac.backend", "flash-attn"],
    # refused before argparse ends (ValueError in FlexibleArgumentParser.parse_args, exit 1)
    ["--served-model-name", "x", MODEL],
    # refused by validate_parsed_serve_args (TypeError, exit 1)
    [MODEL, "--enable-auto-tool-choice"],
    [MODEL, "--enable-log-outputs"],
    # refused at start-up (no argparse choices for these names)
    [MODEL, "--reasoning-parser", "gpt_oss"],
    [MODEL, "--reasoning-parser", "qwen4"],
    [MODEL, "--structured-outputs-config", '{"reasoning_parser": "qwen4"}'],
    [MODEL, "--structured-outputs-config.reasoning_parser", "gpt_oss"],
    [MODEL, "--enable-auto-tool-choice", "--tool-call-parser", "qwen4"],
    [MODEL, "--quantization", "nvfp8"],
    [MODEL, "--load-format", "tensorstore"],
    [MODEL, "--gpu-memory-utilization", "0"],
    [MODEL, "--gpu-memory-utilization", "0.0"],
    [MODEL, "--gpu-memory-utilization", "1.01"],
    [MODEL, "--gpu-memory-utilization", "75"],
    [MODEL, "--attention-backend", "flashattention"],
    [MODEL, "--attention-backend", "FLASH-ATTN"],
    [MODEL, "--attention-backend", "FLASHINFER", "-ac", '{"backend": "TRITON_ATTN"}'],
    [MODEL, "--attention-backend", "sdpa", "--load-format", "tensorstore"],
    [MODEL, "--gpu-memory-utilization", "0", "--attention-backend", "sdpa"],
    # multi-node tensor parallelism with the mp executor (two single-GPU boxes), and what vLLM refuses
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr", "192.168.100.10",
     "--master-port", "29501"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1", "--master-addr", "192.168.100.10",
     "--master-port", "29501", "--headless"],
    [MODEL, "-tp", "2", "-n", "2", "-r", "1", "--master-addr", "192.168.100.10", "--headless"],
    [MODEL, "--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "1", "--headless"],
    [MODEL, "-tp", "2", "--nnodes", "2", "--distributed-executor-backend", "mp"],
    [MODEL, "--tensor-parallel-size", "2"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "3"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "2", "--headless"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1", "--headless", "--api-server-count",
     "1"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--data-parallel-backend", "ray"],
    [MODEL, "--tensor-parallel-size", "2", "--nnodes", "2", "--distributed-executor-backend", "ray"],
    [MODEL, "--nnodes", "two"],
    [MODEL, "--master-port", "29501.5"],
    [MODEL, "--headless=true"],
    # argparse's abbreviations (FlexibleArgumentParser keeps allow_abbrev), and options one
    # release has and the other has not (--linear-backend, --disable-X pairs in 0.34.0)
    [MODEL, "--max-model", "4096"],
    [MODEL, "--max-model=4096"],
    [MODEL, "--max-num", "4"],
    [MODEL, "--enable-prefix", "--max-num-seq", "8"],
    [MODEL, "--moe-backend", "triton"],
    [MODEL, "--moe-backend", "FLASHINFER-CUTLASS"],
    [MODEL, "--moe-backend", "no_such_backend"],
    [MODEL, "--linear-backend", "auto"],
    [MODEL, "--disable-prefix-caching"],
    [MODEL, "--kv-cache-dtype", "nvfp4"],
    [MODEL, "--speculative-config", '{"method": "qwen3_5_mtp", "num_speculative_tokens": 2}'],
]

# GPUs per node for the outcomes: a DGX Spark has one (GB10), and the generator has none.
GPUS_PER_NODE = 1


# --- fetching and importing the release ------------------------------------------------------

def fetch_sdist(version: str, dest: Path) -> Path:
    """The release's source tarball from PyPI's simple API (JSON form), checked by sha256."""
    request = urllib.request.Request(SIMPLE_INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    name = f"vllm-{version}.tar.gz"
    entry = next((f for f in files if f["filename"] == name), None)
    if entry is None:
        raise SystemExit(f"PyPI lists no {name}; is {version} a vLLM release?")
    target = dest / name
    with urllib.request.urlopen(entry["url"], timeout=600) as response:
        target.write_bytes(response.read())
    if hashlib.sha256(target.read_bytes()).hexdigest() != entry["hashes"]["sha256"]:
        raise SystemExit(f"{name}: sha256 differs from PyPI's")
    return target


def unpack(sdist: Path, dest: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    roots = [p for p in dest.iterdir() if (p / "vllm" / "__init__.py").is_file()]
    if len(roots) != 1:
        raise SystemExit(f"{sdist}: no single vllm-X/vllm package inside")
    return roots[0]


class _StubMeta(type):
    """A stub class: any attribute is another stub, it calls, subscripts and subclasses."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub(f"{cls.__name__}.{name}")

    def __getitem__(cls, _item: Any) -> Any:
        return cls

    def __or__(cls, _other: Any) -> Any:
        return cls

    def __ror__(cls, _other: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # Used as a decorator (`@torch.compile`): give the function back.
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return type.__call__(cls)


def stub_attribute(_self: Any, name: str) -> Any:
    return _stub(name)()


def _stub(name: str) -> type:
    def absorb(self: Any, *_args: Any, **_kwargs: Any) -> Any:
        return self

    def any_schema(_cls: Any, _source: Any, _handler: Any) -> Any:
        # pydantic builds schemas for vLLM's config dataclasses: a stub type accepts anything.
        from pydantic_core import core_schema  # noqa: PLC0415 - only present where vLLM is imported
        return core_schema.any_schema()

    namespace = {
        "__module__": "stub", "__getattr__": stub_attribute,
        "__call__": lambda self, *a, **k: a[0] if len(a) == 1 and callable(a[0]) and not k else self,
        "__getitem__": absorb, "__iter__": lambda self: iter(()), "__len__": lambda self: 0,
        "__bool__": lambda self: False, "__radd__": lambda self, other: other, "__add__": absorb,
        "__mul__": absorb, "__rmul__": absorb, "__or__": absorb, "__ror__": absorb,
        "__int__": lambda self: 0, "__index__": lambda self: 0, "__float__": lambda self: 0.0,
        "__enter__": absorb, "__exit__": lambda self, *a: False,
        "__lt__": lambda s, o: False, "__gt__": lambda s, o: False, "__le__": lambda s, o: False,
        "__ge__": lambda s, o: False, "__hash__": object.__hash__, "__eq__": lambda s, o: s is o,
        "__str__": lambda s: name, "__repr__": lambda s: name,
        "__init_subclass__": classmethod(lambda cls, **k: None),
        "__get_pydantic_core_schema__": classmethod(any_schema),
    }
    return _StubMeta(name, (), namespace)


class _StubModule(types.ModuleType):
    __path__: typing.ClassVar[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs the packages in STUBBED_PACKAGES and vLLM's compiled extensions (vllm._C...)."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        top = fullname.split(".", 1)[0]
        if fullname == "vllm.ir" or fullname.startswith("vllm.ir."):
            # vLLM 0.34.0's kernel IR (torch.library ops), which ParallelConfig's checks import
            # through vllm.v1.executor: nothing of it decides how an argument parses.
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if top == "vllm":
            rel = self.source.joinpath(*fullname.split("."))
            if rel.with_suffix(".py").exists() or rel.is_dir():
                return None
        elif top not in STUBBED_PACKAGES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        return _StubModule(spec.name)

    def exec_module(self, module: Any) -> None:
        module.__path__ = []


# The itemsize of torch's dtypes, which vLLM 0.34.0 checks at import against array.array's
# (TORCH_DTYPE_TO_ARRAY_TYPECODE, vllm/utils/torch_utils.py).
TORCH_ITEMSIZES = {"int8": 1, "uint8": 1, "int16": 2, "float16": 2, "bfloat16": 2, "int32": 4, "float32": 4,
                   "int64": 8, "float64": 8}


def torch_dtypes() -> None:
    import torch  # noqa: PLC0415 - the stub, once _StubFinder is in place
    for name, size in TORCH_ITEMSIZES.items():
        dtype = getattr(torch, name)
        dtype.itemsize = size


def import_vllm(source: Path) -> dict[str, Any]:
    sys.path.insert(0, str(source))
    sys.meta_path.insert(0, _StubFinder(source))
    real_version = importlib.metadata.version

    def version(name: str) -> str:
        try:
            return real_version(name)
        except importlib.metadata.PackageNotFoundError:
            return "2.10.0"  # stubbed torch & co.: any recent release number

    importlib.metadata.version = version
    torch_dtypes()
    # vLLM's modules can only be imported once the stubs and the source path are in place.
    from vllm import platforms  # noqa: PLC0415
    # The platform decides some defaults; the image this stand-in replaces runs on CUDA.
    platforms.resolve_current_platform_cls_qualname = lambda: "vllm.platforms.cuda.CudaPlatform"
    from pydantic import TypeAdapter, ValidationError  # noqa: PLC0415 - vLLM's config classes need it
    from vllm.config import AttentionConfig, CacheConfig, CompilationConfig  # noqa: PLC0415
    from vllm.config.compilation import CompilationMode  # noqa: PLC0415
    # vLLM 0.34.0 moved the serve arguments to vllm/entrypoints/common/cli_args.py.
    cli_args = importlib.import_module("vllm.entrypoints.common.cli_args" if (
        source / "vllm/entrypoints/common/cli_args.py").is_file() else "vllm.entrypoints.openai.cli_args")
    make_arg_parser, validate_parsed_serve_args = cli_args.make_arg_parser, cli_args.validate_parsed_serve_args
    from vllm.config import cache, kernel, speculative  # noqa: PLC0415
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS  # noqa: PLC0415
    from vllm.reasoning import ReasoningParserManager  # noqa: PLC0415
    from vllm.tool_parsers import ToolParserManager  # noqa: PLC0415
    from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    from vllm.v1.attention.backends.registry import AttentionBackendEnum  # noqa: PLC0415
    for name, obj in (("make_arg_parser", make_arg_parser), ("validate_parsed_serve_args", validate_parsed_serve_args),
                      ("FlexibleArgumentParser", FlexibleArgumentParser)):
        # _StubFinder stubs a vLLM module the release lacks: a stub here means a moved module.
        if isinstance(obj, _StubMeta) or not callable(obj) or getattr(obj, "__module__", "stub") == "stub":
            raise SystemExit(f"{name} is not in this release where generate.py looks for it: teach import_vllm")
    return {
        "make_arg_parser": make_arg_parser, "validate": validate_parsed_serve_args,
        "parser_cls": FlexibleArgumentParser, "quantization": list(QUANTIZATION_METHODS),
        "tool_call_parsers": ToolParserManager.list_registered(),
        "reasoning_parsers": ReasoningParserManager.list_registered(),
        # The names _AttentionBackendEnumMeta.__getitem__ accepts and lists in its error.
        "attention_backends": list(AttentionBackendEnum.__members__),
        "compilation_modes": {name: int(mode) for name, mode in CompilationMode.__members__.items()},
        # The Literal types of --moe-backend / --linear-backend (vllm/config/kernel.py) and of
        # SpeculativeConfig.method (vllm/config/speculative.py); a release without one has none.
        "moe_backends": literal_values(getattr(kernel, "MoEBackend", None)),
        "linear_backends": literal_values(getattr(kernel, "LinearBackend", None)),
        "speculative_methods": literal_values(speculative.SpeculativeMethod),
        # CacheConfig.cache_dtype's Literal: 0.34.0's --kv-cache-dtype has no argparse choices.
        "kv_cache_dtypes": literal_values(cache.CacheDType),
        "CacheConfig": CacheConfig, "AttentionConfig": AttentionConfig, "CompilationConfig": CompilationConfig,
        "TypeAdapter": TypeAdapter, "ValidationError": ValidationError,
    }


def literal_values(hint: Any) -> list[str]:
    """The strings of a (nested) typing.Literal, in declaration order."""
    if hint is None:
        return []
    out: list[str] = []
    for arg in typing.get_args(hint):
        for value in ([arg] if isinstance(arg, str) else literal_values(arg)):
            if value not in out:
                out.append(value)
    return out


def build_parser(vllm: dict[str, Any]) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`vllm` with its `serve` subcommand, as vllm/entrypoints/cli/main.py and serve.py build them
    (serve.py's module imports the whole server, so its subparser_init is followed here)."""
    top = vllm["parser_cls"](prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve = subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]")
    serve = vllm["make_arg_parser"](serve)
    if "--grpc" not in serve._option_string_actions:
        # 0.19.1's subparser_init adds it; 0.34.0's make_arg_parser has it (common/cli_args.py).
        serve.add_argument("--grpc", action="store_true", default=False)
    return top, serve


# --- the table --------------------------------------------------------------------------------

def type_name(func: Any) -> str | None:
    """A name the stand-in maps to its own converter, from the converter vLLM attaches."""
    if func is None:
        return None
    qual = getattr(func, "__qualname__", type(func).__name__)
    inner = [c.cell_contents for c in (getattr(func, "__closure__", None) or ())]
    if qual.startswith("optional_type."):
        return "optional:" + (type_name(inner[0]) or "str")
    if qual.startswith("parse_type."):
        return "parse:" + (type_name(inner[0]) or "str")
    if qual.endswith("parse_dataclass"):
        cls = func.__defaults__[0]
        return "dataclass:" + cls.__name__
    if qual == "EngineArgs.add_cli_args.<locals>.<lambda>":
        return "lower_underscore"  # `s.lower().replace("-", "_")` (arg_utils.py, --moe-backend)
    names = {"int": "int", "float": "float", "str": "str", "loads": "json", "human_readable_int": "human_int",
             "human_readable_int_or_auto": "human_int_or_auto", "union_dict_and_str": "json_or_str",
             # 0.34.0: `none` (any case) is the unset default (vllm/engine/arg_utils.py).
             "parse_reasoning_parser": "reasoning_parser"}
    if qual not in names:
        raise SystemExit(f"unknown argparse type {qual}: teach the stand-in and this table about it")
    return names[qual]


def jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


def choices_of(action: argparse.Action) -> list[Any] | None:
    if not action.choices:
        return None
    choices = list(action.choices)
    return choices if jsonable(choices) is not None else [str(c) for c in choices]


def action_row(action: argparse.Action) -> dict[str, Any]:
    kinds = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "BooleanOptionalAction": "boolean",
             "_AppendAction": "append", "_HelpAction": "help", "LoRAParserAction": "store",
             "EnableDisableAction": "enable_disable",
             # 0.34.0: a store that warns (--log-config-file, vllm/engine/arg_utils.py).
             "DeprecatedLogConfigFileAction": "store"}
    kind = kinds.get(type(action).__name__)
    if kind is None:
        raise SystemExit(f"unknown argparse action {type(action).__name__} for {action.option_strings}")
    row = {"options": list(action.option_strings), "dest": action.dest, "action": kind, "nargs": action.nargs,
           "type": type_name(action.type), "choices": choices_of(action),
           "default": jsonable(action.default), "metavar": action.metavar}
    if kind == "boolean":
        # BooleanOptionalAction adds the --no-* strings itself; keep the declared ones.
        row["options"] = [o for o in action.option_strings if not o.startswith("--no-")]
    if kind == "enable_disable":
        # vLLM 0.34.0 registers its EnableDisableAction for every BooleanOptionalAction
        # (vllm/utils/argparse_utils.py): --enable-X pairs with --disable-X, and --no-X still works but is
        # hidden (_register_action drops it from option_strings; the parser keeps it registered).
        negative = action.negative_option_strings
        row["options"] = [o for o in action.option_strings if o not in negative]
        row["negative_options"] = sorted(negative)
    return row


def dataclass_fields(serve: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Field names of the config dataclasses a JSON option is validated against."""
    out = {}
    for action in serve._actions:
        func = action.type
        inner = [c.cell_contents for c in (getattr(func, "__closure__", None) or ())]
        func = inner[0] if inner and getattr(func, "__qualname__", "").startswith("optional_type.") else func
        if getattr(func, "__qualname__", "").endswith("parse_dataclass"):
            cls = func.__defaults__[0]
            out[cls.__name__] = sorted(f.name for f in __import__("dataclasses").fields(cls))
    return out


def architectures(source: Path) -> dict[str, Any]:
    """The architectures the release's model registry knows: the keys of every table _VLLM_MODELS merges
    (vllm/model_executor/models/registry.py), read from the source (importing it imports every model)."""
    rel = "vllm/model_executor/models/registry.py"
    tree = ast.parse((source / rel).read_text())
    tables = {n.targets[0].id: n for n in tree.body
              if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Dict)}
    merged = tables.get("_VLLM_MODELS")
    if merged is None:
        raise SystemExit(f"{rel}: _VLLM_MODELS not found")
    names: list[str] = []
    for key, value in zip(merged.value.keys, merged.value.values, strict=True):
        if key is None and isinstance(value, ast.Name):  # **_TEXT_GENERATION_MODELS
            names += [k.value for k in tables[value.id].value.keys if isinstance(k, ast.Constant)]
        elif isinstance(key, ast.Constant):
            names.append(key.value)
    return {"file": rel, "line": merged.lineno, "names": list(dict.fromkeys(names))}


def load_formats(source: Path) -> list[str]:
    """Keys of _LOAD_FORMAT_TO_MODEL_LOADER (the module itself imports the model code)."""
    tree = ast.parse((source / "vllm/model_executor/model_loader/__init__.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_LOAD_FORMAT_TO_MODEL_LOADER":
            return [k.value for k in node.value.keys]
    raise SystemExit("_LOAD_FORMAT_TO_MODEL_LOADER not found")


# --- pydantic's texts for vLLM's constrained config fields, by running the classes ---------------

def field_line(source: Path, rel: str, cls: str, field: str) -> int:
    """The line that declares `cls.field` (its type and constraints)."""
    for node in ast.walk(ast.parse((source / rel).read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", "") == field:
                    return item.lineno
    raise SystemExit(f"{rel}: no field {cls}.{field}")


def one_error(vllm: dict[str, Any], run: Any) -> dict[str, Any]:
    """The single pydantic error `run()` raises."""
    try:
        run()
    except vllm["ValidationError"] as exc:
        errors = exc.errors(include_url=False)
        if len(errors) == 1:
            return errors[0]
        raise SystemExit(f"expected one validation error, got {errors}") from exc
    raise SystemExit("expected a validation error, the value was accepted")


def field_errors(source: Path, vllm: dict[str, Any]) -> dict[str, Any]:
    """What pydantic says when vLLM's config classes refuse a value the stand-in checks itself:
    --gpu-memory-utilization (CacheConfig, built in the API server by create_engine_config) and
    the compilation mode (CompilationConfig, validated by argparse's parse_dataclass)."""
    cache = vllm["CacheConfig"]
    metadata = cache.__pydantic_fields__["gpu_memory_utilization"].metadata
    bounds = {type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in metadata}
    if set(bounds) != {"gt", "le"}:
        raise SystemExit(f"CacheConfig.gpu_memory_utilization: bounds {bounds}; the stand-in knows gt and le")
    utilization = {}
    for probe in (float(bounds["gt"]), float(bounds["le"]) + 0.5):
        error = one_error(vllm, lambda probe=probe: cache(gpu_memory_utilization=probe))
        utilization[error["type"]] = error["msg"]
    compilation = vllm["TypeAdapter"](vllm["CompilationConfig"])
    modes = vllm["compilation_modes"]
    enum = one_error(vllm, lambda: compilation.validate_json(json.dumps({"mode": max(modes.values()) + 1})))
    return {
        "CacheConfig.gpu_memory_utilization": {
            "file": "vllm/config/cache.py", "line": field_line(source, "vllm/config/cache.py", "CacheConfig",
                                                               "gpu_memory_utilization"),
            "bounds": bounds, "messages": utilization},
        "CompilationConfig.mode": {
            "file": "vllm/config/compilation.py",
            "line": field_line(source, "vllm/config/compilation.py", "CompilationConfig", "mode"),
            "messages": {enum["type"]: enum["msg"]}},
        "AttentionConfig.backend": {
            "file": "vllm/config/attention.py",
            "line": field_line(source, "vllm/config/attention.py", "AttentionConfig", "backend"), "messages": {}},
    }


def pydantic_wording(vllm: dict[str, Any]) -> dict[str, str]:
    """The parts of pydantic's messages the stand-in puts around its own: a validator's
    ValueError, an unknown field, a JSON syntax error (whose own wording is serde_json's)."""
    compilation = vllm["TypeAdapter"](vllm["CompilationConfig"])
    value_error = one_error(vllm, lambda: compilation.validate_json('{"mode": "?"}'))
    unknown = one_error(vllm, lambda: compilation.validate_json('{"no_such_field": 1}'))
    bad_json = one_error(vllm, lambda: compilation.validate_json("{"))
    return {
        "value_error_prefix": value_error["msg"].removesuffix(str(value_error["ctx"]["error"])),
        unknown["type"]: unknown["msg"],
        "json_invalid_prefix": bad_json["msg"].removesuffix(str(bad_json["ctx"]["error"])),
    }


# --- messages quoted from the source ------------------------------------------------------------

def literal_shape(node: ast.AST) -> str:
    """The text a message expression makes, with each interpolation as {}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.replace("{", "{{").replace("}", "}}")
    if isinstance(node, ast.JoinedStr):
        return "".join(literal_shape(v) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return literal_shape(node.left) + literal_shape(node.right)
    return "{}"


def raised_by(tree: ast.AST, node: ast.AST) -> str | None:
    """The exception a message is raised with (`raise ValueError(...)`, `assert ..., msg`)."""
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Assert) and stmt.msg is not None and any(n is node for n in ast.walk(stmt.msg)):
            return "AssertionError"
        if isinstance(stmt, ast.Raise) and isinstance(stmt.exc, ast.Call) and isinstance(stmt.exc.func, ast.Name) \
                and any(n is node for n in ast.walk(stmt.exc)):
            return stmt.exc.func.id
    return None


def quote(source: Path, rel: str, anchor: str, template: str, within: str | None = None) -> dict[str, Any]:
    """The message's file and line; `within` names the function when the text occurs twice."""
    text = (source / rel).read_text()
    tree: ast.AST = ast.parse(text)
    if within:
        tree = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == within)
    for node in ast.walk(tree):
        if isinstance(node, (ast.JoinedStr, ast.Constant)) and anchor in literal_shape(node).replace("{{", "{"):
            shape = literal_shape(node)
            if isinstance(node, ast.Constant):
                # A logger's format string: its %s/%d are the interpolated values.
                shape = re.sub(r"%[sd]", "{}", shape)
            wanted = re.sub(r"(?<!\{)\{[a-z_]+\}(?!\})", "{}", template)
            if shape != wanted:
                raise SystemExit(f"{rel}:{node.lineno}: upstream text changed:\n  {shape}\n  {wanted}")
            raises = raised_by(tree, node)
            return {"file": rel, "line": node.lineno, "template": template, **({"raises": raises} if raises else {})}
    # Messages split over several literals (implicit concatenation makes one node).
    raise SystemExit(f"{rel}: no message containing {anchor!r}")


# --- outcomes under the real parser ---------------------------------------------------------------

def startup_error(args: argparse.Namespace, vllm: dict[str, Any], data: dict[str, Any]) -> tuple[str, str] | None:
    """The checks vLLM makes on names that argparse lets through, in vLLM's order, as (stage,
    error): "startup" before the engine process starts (api_server.py validate_api_server_args,
    or for --headless ServeSubcommand.cmd, then EngineArgs.create_engine_config), "engine" in
    the engine process (the loader's load format; the reasoning parser, looked up by
    StructuredOutputManager in vllm/v1/engine/core.py after the KV cache is set up, on the head)."""
    found = headless_error(args, data) if args.headless else api_server_error(args, data)
    if found:
        return "startup", found
    found = engine_config_error(args, vllm, data)
    if found:
        return "startup", found
    msgs = data["messages"]
    if args.load_format not in data["registries"]["load_formats"]:
        return "engine", "ValueError: " + msgs["unknown-load-format"]["template"].format(name=args.load_format)
    reasoning = data["registries"]["reasoning_parsers"]
    if not args.headless and args.reasoning_parser and args.reasoning_parser not in reasoning:
        text = msgs["reasoning-parser-not-found"]["template"].format(name=args.reasoning_parser,
                                                                     registered=", ".join(reasoning))
        return "engine", f"KeyError: {text!r}"
    return None


def api_server_error(args: argparse.Namespace, data: dict[str, Any]) -> str | None:
    """validate_api_server_args (vllm/entrypoints/openai/api_server.py): the parser names."""
    msgs = data["messages"]
    tools = data["registries"]["tool_call_parsers"]
    if args.enable_auto_tool_choice and args.tool_call_parser not in tools:
        text = msgs["unknown-tool-call-parser"]["template"].format(name=args.tool_call_parser,
                                                                   choices=",".join(tools))
        return f"KeyError: {text!r}"
    reasoning = data["registries"]["reasoning_parsers"]
    # validate_api_server_args reads structured_outputs_config.reasoning_parser, which
    # --reasoning-parser reaches only later (EngineArgs.create_engine_config).
    early = args.structured_outputs_config.reasoning_parser
    if early and early not in reasoning:
        text = msgs["unknown-reasoning-parser"]["template"].format(name=early, choices=",".join(reasoning))
        return f"KeyError: {text!r}"
    return None


def headless_error(args: argparse.Namespace, data: dict[str, Any]) -> str | None:
    """--headless: ServeSubcommand.cmd refuses an API server count (vllm/entrypoints/cli/serve.py);
    run_headless then builds the engine's config without the API server's checks."""
    if args.api_server_count is not None and args.api_server_count > 0:
        return "ValueError: " + data["messages"]["headless-api-server-count"]["template"].format(
            count=args.api_server_count)
    return None


def engine_config_error(args: argparse.Namespace, vllm: dict[str, Any], data: dict[str, Any]) -> str | None:
    """EngineArgs.create_engine_config (vllm/engine/arg_utils.py) in its order: ModelConfig's
    quantization check, CacheConfig (run here: pydantic's own texts), then the attention
    backend (AttentionConfig.validate_backend_before, run here)."""
    msgs = data["messages"]
    quants = data["registries"]["quantization"]
    if args.quantization is not None and args.quantization not in quants:
        # Raised in ModelConfig.__post_init__: pydantic reports it as a ValidationError.
        text = msgs["unknown-quantization"]["template"].format(name=args.quantization, choices=quants)
        return PYDANTIC.format(cls="ModelConfig") + "\n  Value error, " + text
    try:
        # cache_dtype: 0.34.0's --kv-cache-dtype has no argparse choices, CacheConfig's Literal refuses.
        vllm["CacheConfig"](gpu_memory_utilization=args.gpu_memory_utilization, cache_dtype=args.kv_cache_dtype)
    except vllm["ValidationError"] as exc:
        return validation_error_text(exc)
    found = parallel_error(args, msgs)
    if found:
        return found
    if args.attention_backend is not None:
        if args.attention_config.backend is not None:
            return "ValueError: " + msgs["attention-backend-twice"]["template"]
        try:
            vllm["AttentionConfig"].validate_backend_before(args.attention_backend)
        except ValueError as exc:
            return f"ValueError: {exc}"
    return None


def parallel_error(args: argparse.Namespace, msgs: dict[str, Any]) -> str | None:
    """The multi-node assertions of create_engine_config (vllm/engine/arg_utils.py), then
    ParallelConfig.__post_init__'s checks (vllm/config/parallel.py) on a CUDA box with
    GPUS_PER_NODE GPUs, in vLLM's order."""
    def raised(name: str, **values: Any) -> str:
        # 0.19.1 asserts, 0.34.0 raises ValueError: the table records which.
        spec = msgs[name]
        values = {"nnodes": args.nnodes, "backend": args.data_parallel_backend, "node_rank": args.node_rank,
                  "max_rank": args.nnodes - 1, **values}
        return f"{spec.get('raises', 'AssertionError')}: " + spec["template"].format(**values)

    def text(name: str, **values: Any) -> str:
        return msgs[name]["template"].format(**values)

    if args.data_parallel_backend != "mp" and args.nnodes != 1:
        return raised("nnodes-data-parallel-backend")
    world_size = args.data_parallel_size * args.pipeline_parallel_size * args.tensor_parallel_size
    if args.nnodes > 1:
        if world_size % args.nnodes:
            return raised("nnodes-world-size", world_size=world_size)
        if not 0 <= args.node_rank < args.nnodes:
            return raised("nnodes-node-rank")
    per_dp = args.pipeline_parallel_size * args.tensor_parallel_size
    if args.distributed_executor_backend is None and per_dp * args.data_parallel_size > 1 and args.nnodes == 1 \
            and per_dp > GPUS_PER_NODE:
        return PYDANTIC.format(cls="ParallelConfig") + "\n  Value error, " + text(
            "world-size-above-gpus", world_size=per_dp, gpu_count=GPUS_PER_NODE)
    if args.nnodes > 1 and args.distributed_executor_backend not in (None, "mp", "uni", "external_launcher"):
        return PYDANTIC.format(cls="ParallelConfig") + "\n  Value error, " + text("nnodes-executor-backend")
    return None


PYDANTIC = "pydantic_core._pydantic_core.ValidationError: 1 validation error for {cls}"
# pydantic's pointer to its docs names the pydantic release of the machine that runs this
# generator, not the image's: left out of the recorded texts (and of the stand-in's).
PYDANTIC_URL_LINE = re.compile(r"^ +For further information visit https://errors\.pydantic\.dev/")


def without_url_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not PYDANTIC_URL_LINE.match(line)]


def validation_error_text(exc: Exception) -> str:
    """A pydantic ValidationError as a traceback's last line shows it (class, then the text)."""
    return "\n".join(without_url_lines(f"{type(exc).__module__}.{type(exc).__name__}: {exc}"))


ERROR_LINE = re.compile(r"^vllm(?: serve)?: error: ")


def normalise(line: str) -> str:
    """Object addresses (`<function loads at 0x7f...>`) differ from run to run."""
    return re.sub(r" at 0x[0-9a-f]+>", " at 0x...>", line)


def argparse_outcome(stderr: str, code: Any) -> dict[str, Any]:
    """The error line, and the lines after it when the message has several (pydantic's)."""
    lines = stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if ERROR_LINE.match(line)), None)
    if first is None:
        return {"stage": "argparse", "exit": code, "error": ""}
    detail = without_url_lines("\n".join(lines[first + 1:]))
    return {"stage": "argparse", "exit": code, "error": normalise(lines[first]),
            **({"detail": "\n".join(detail)} if detail else {})}


def outcome(vllm: dict[str, Any], data: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    top, _serve = build_parser(vllm)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = top.parse_args(["serve", *argv])
    except SystemExit as exc:
        return argparse_outcome(err.getvalue(), exc.code)
    except ValueError as exc:
        return {"stage": "cli", "exit": 1, "error": f"ValueError: {exc}"}
    try:
        vllm["validate"](args)
    except TypeError as exc:
        return {"stage": "validate", "exit": 1, "error": f"TypeError: {exc}"}
    found = startup_error(args, vllm, data)
    if found:
        stage, error = found
        first, _newline, detail = error.partition("\n")
        return {"stage": stage, "exit": 1, "error": first, **({"detail": detail} if detail else {})}
    return {"stage": "accepted", "exit": 0, "error": None}


def generate(source: Path, sdist_sha: str, version: str) -> dict[str, Any]:
    vllm = import_vllm(source)
    _top, serve = build_parser(vllm)
    data: dict[str, Any] = {
        "generated_by": "tests/testbed/vllm-standin/generate.py",
        "vllm_version": version,
        "sdist_sha256": sdist_sha,
        "usage": serve.usage,
        "positionals": [action_row(a) for a in serve._actions if not a.option_strings],
        "options": [action_row(a) for a in serve._actions if a.option_strings and a.dest != "help"],
        "dataclass_fields": dataclass_fields(serve),
        "registries": {
            "tool_call_parsers": vllm["tool_call_parsers"],
            "reasoning_parsers": vllm["reasoning_parsers"],
            "quantization": vllm["quantization"],
            "load_formats": load_formats(source),
            "attention_backends": vllm["attention_backends"],
            "compilation_modes": vllm["compilation_modes"],
            "moe_backends": vllm["moe_backends"],
            "linear_backends": vllm["linear_backends"],
            "speculative_methods": vllm["speculative_methods"],
            "kv_cache_dtypes": vllm["kv_cache_dtypes"],
        },
        "architectures": architectures(source),
        "allow_abbrev": vllm["parser_cls"](prog="vllm").allow_abbrev,
        "messages": {name: quote(source, *spec) for name, spec in messages_of(version).items()},
        "torch_messages": torch_messages(source),
        "field_errors": field_errors(source, vllm),
        "pydantic": pydantic_wording(vllm),
    }
    data["cases"] = [{"argv": argv, **outcome(vllm, data, argv)} for argv in CASES]
    return data


# --- `vllm bench serve`: its options, read from the source -----------------------------------
# Its parser is plain argparse calls with literal arguments (vllm/benchmarks/serve.py
# add_cli_args, vllm/benchmarks/datasets.py add_dataset_parser and the helpers it calls), so
# reading the calls gives the real table; importing the module would pull in the multimodal
# stack. Each option keeps its file:line so the stand-in can cite where a default comes from.
BENCH_ENTRY = (("vllm/benchmarks/serve.py", "add_cli_args"), ("vllm/benchmarks/datasets.py", "add_dataset_parser"))
BENCH_TYPES = {"int": "int", "float": "float", "str": "str", "json.loads": "json"}
BENCH_ACTIONS = {"store_true": "store_true", "_ValidateDatasetArgs": "store"}


class _SourceModule:
    """One module of the release: its functions, module-level and class-level constants."""

    def __init__(self, source: Path, rel: str) -> None:
        self.rel = rel
        self.tree = ast.parse((source / rel).read_text())
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.constants: dict[str, Any] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                self.constants[node.targets[0].id] = node.value
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                self.constants[node.target.id] = node.value
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                        self.constants[f"{node.name}.{item.targets[0].id}"] = item.value


def _bench_value(node: ast.AST | None, mod: _SourceModule, funcs: _SourceModule) -> Any:  # noqa: PLR0911
    """A literal default or choice list; `float("inf")` as "inf"; the keys of a module dict."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in mod.constants:
        return _bench_value(mod.constants[node.id], mod, funcs)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = f"{node.value.id}.{node.attr}"
        if key in mod.constants:
            return _bench_value(mod.constants[key], mod, funcs)
    if isinstance(node, ast.Call) and ast.unparse(node) == "float('inf')":
        return "inf"
    if isinstance(node, ast.Call) and ast.unparse(node) == "list(ASYNC_REQUEST_FUNCS.keys())":
        table = funcs.constants["ASYNC_REQUEST_FUNCS"]
        return [k.value for k in table.keys]
    try:
        value = ast.literal_eval(node)
        json.dumps(value)
    except (ValueError, TypeError):
        return {"expression": ast.unparse(node)}
    return value


def _bench_rows(source: Path, rel: str, func: str, funcs: _SourceModule) -> list[dict[str, Any]]:
    mod = _SourceModule(source, rel)
    rows: list[dict[str, Any]] = []
    for node in ast.walk(mod.functions[func]):
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if name in mod.functions and name.startswith("add_") and name != func:
            rows += _bench_rows(source, rel, name, funcs)
            continue
        if name != "add_argument":
            continue
        kw = {k.arg: k.value for k in node.keywords}
        action = ast.unparse(kw["action"]).strip("'") if "action" in kw else "store"
        type_src = ast.unparse(kw["type"]) if "type" in kw else None
        nargs = _bench_value(kw.get("nargs"), mod, funcs)
        rows.append({
            "options": [a.value for a in node.args],
            "dest": node.args[0].value.lstrip("-").replace("-", "_"),
            "action": BENCH_ACTIONS.get(action, action),
            "nargs": nargs,
            "type": BENCH_TYPES.get(type_src, f"custom:{type_src}") if type_src else None,
            "choices": _bench_value(kw.get("choices"), mod, funcs),
            "default": (False if action == "store_true" and "default" not in kw
                        else _bench_value(kw.get("default"), mod, funcs)),
            "required": _bench_value(kw.get("required"), mod, funcs) or False,
            "file": rel, "line": node.lineno,
        })
    return sorted(rows, key=lambda r: (r["file"], r["line"])) if func in dict(bench_entry(source)).values() else rows


def bench_entry(source: Path) -> tuple[tuple[str, str], ...]:
    """BENCH_ENTRY in this release: vLLM 0.34.0 moved datasets.py into a package
    (vllm/benchmarks/datasets/datasets.py, re-exported by its __init__.py)."""
    return tuple((rel if (source / rel).is_file() else rel.replace("datasets.py", "datasets/datasets.py"), func)
                 for rel, func in BENCH_ENTRY)


def bench_serve_table(source: Path, sdist_sha: str, version: str) -> dict[str, Any]:
    funcs = _SourceModule(source, "vllm/benchmarks/lib/endpoint_request_func.py")
    rows: list[dict[str, Any]] = []
    for rel, func in bench_entry(source):
        rows += _bench_rows(source, rel, func, funcs)
    return {"generated_by": "tests/testbed/vllm-standin/generate.py", "vllm_version": version,
            "sdist_sha256": sdist_sha, "usage": "vllm bench serve [options]", "options": rows}


# --- the collection's copy: every supported release as a module_utils file -----------------------
# plugins/module_utils/vllm_diagnosis.py recognises vLLM's failures by these texts, and
# vllm_serve_check.py checks a `vllm serve` command line against a release's options and names.
# They run on the controller and inside modules (AnsiballZ ships imported module_utils, not data
# files), so the tables are written as a Python module, made from the committed
# releases/<version>/vllm_serve.json of every SUPPORTED release.
RELEASES_MODULE = HERE.parents[2] / "plugins" / "module_utils" / "vllm_releases.py"
MODULE_HEADER = '''# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# GENERATED by tests/testbed/vllm-standin/generate.py from each release's sdist on PyPI: do not edit.
# ruff: noqa: E501 - one table row a line
"""The vLLM releases the collection supports, as their sdists say (vllm-X.tar.gz on PyPI).

RELEASES: version -> {{
  "sdist_sha256": the sdist the tables were made from,
  "allow_abbrev": whether that release's FlexibleArgumentParser (vllm/utils/argparse_utils.py)
      takes a unique prefix of an option (argparse's allow_abbrev),
  "options": every `vllm serve` option string, short and --no-X forms too -> {{"dest", "nargs"
      (0, 1, "?", "+", "*"), "choices" (a list, or None), and "convert" where the value is converted
      first: "lower_underscore" (lower case, "-" -> "_"), "none_is_unset" ("none" unsets it)}}, from the
      release's own parser,
  "registries": names vLLM looks up at start-up (argparse has no choices for most):
      quantization, tool_call_parsers, reasoning_parsers, load_formats, attention_backends,
      moe_backends, linear_backends, speculative_methods, kv_cache_dtypes, compilation_modes,
  "messages": name -> (file in the release's source, line, template): vLLM's message with each
      interpolated value as a {{field}}; generate.py checks its literal parts against the source,
  "field_errors": "Class.field" -> (file, line, {{pydantic error type: message}}), what pydantic
      says when the release's config class refuses the field's value (produced by running it),
}}
"""

from __future__ import annotations

from typing import Any

SUPPORTED = {supported!r}
DEFAULT = {default!r}

'''

# Converters that change a value before argparse compares it with the choices, or unset it.
CONVERTS = {"lower_underscore": "lower_underscore", "reasoning_parser": "none_is_unset"}
# The value types the collection's check converts as vLLM's parser does (vllm/engine/arg_utils.py parse_type,
# optional_type; vllm/utils/argparse_utils.py human_readable_int, human_readable_int_or_auto, 0.34.0).
VALUE_TYPES = {"int", "float", "json", "parse:json", "human_int", "human_int_or_auto"}
NARGS = {"store_true": 0, "boolean": 0, "enable_disable": 0, "store": 1, "append": 1}


def compact_options(table: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every option string (declared, short, and BooleanOptionalAction's --no-X) -> dest, nargs, choices."""
    out: dict[str, dict[str, Any]] = {}
    for row in table["options"]:
        nargs = row["nargs"] if row["nargs"] is not None else NARGS[row["action"]]
        convert = CONVERTS.get(str(row["type"]).removeprefix("optional:"))
        kind = str(row["type"]) if str(row["type"]).removeprefix("optional:") in VALUE_TYPES else None
        for option in row["options"]:
            out[option] = {"dest": row["dest"], "nargs": nargs, "choices": row["choices"],
                           **({"convert": convert} if convert else {}), **({"type": kind} if kind else {})}
            if row["action"] == "boolean" and option.startswith("--"):
                out["--no-" + option[2:]] = {"dest": row["dest"], "nargs": 0, "choices": None}
        for option in row.get("negative_options", ()):
            out[option] = {"dest": row["dest"], "nargs": 0, "choices": None}
    return out


def compact_release(table: dict[str, Any]) -> dict[str, Any]:
    return {
        "sdist_sha256": table["sdist_sha256"],
        "allow_abbrev": table["allow_abbrev"],
        "options": compact_options(table),
        "registries": table["registries"],
        "messages": {name: (m["file"], m["line"], m["template"]) for name, m in table["messages"].items()},
        "field_errors": {key: (f["file"], f["line"], f["messages"]) for key, f in table["field_errors"].items()},
    }


def py(value: Any, indent: str = "") -> str:
    """A Python literal of JSON-like data, one line when it fits in 120 columns, else one item a line."""
    flat = py_flat(value)
    if len(indent) + len(flat) <= 110 or not isinstance(value, (dict, list, tuple)) or not value:
        return flat if not isinstance(value, str) else _literal(value, indent)
    inner = indent + "    "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {py(v, inner)}," for k, v in value.items()]
        return "{\n" + "\n".join(items) + f"\n{indent}}}"
    open_, close = ("[", "]") if isinstance(value, list) else ("(", ")")
    return open_ + "\n" + "\n".join(f"{inner}{py(v, inner)}," for v in value) + f"\n{indent}{close}"


def py_flat(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {py_flat(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(py_flat(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(py_flat(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if value is None or isinstance(value, bool):
        return repr(value)
    return json.dumps(value)


def _literal(text: str, indent: str) -> str:
    """A string literal, split into lines of at most ~100 characters (implicit concatenation)."""
    # DOTALL: a message of several lines keeps its newlines.
    chunks = re.findall(r"(?s).{1,80}(?: |$)|.{1,80}", text) or [""]
    if len(chunks) == 1 or len(indent) + len(json.dumps(text)) <= 110:
        return json.dumps(text)
    return "(\n" + "".join(f"{indent}    {json.dumps(c)}\n" for c in chunks) + f"{indent})"


def releases_module(tables: dict[str, dict[str, Any]]) -> str:
    body = {version: compact_release(table) for version, table in tables.items()}
    return (MODULE_HEADER.format(supported=tuple(tables), default=DEFAULT)
            + f"RELEASES: dict[str, dict[str, Any]] = {py(body)}\n")


def release_dir(version: str) -> Path:
    return RELEASES_DIR / version


def write_or_check(path: Path, data: dict[str, Any] | str, check: bool) -> bool:
    text = data if isinstance(data, str) else json.dumps(data, indent=1, sort_keys=False) + "\n"
    if check:
        same = path.is_file() and path.read_text(encoding="utf-8") == text
        print(f"{path}: {'up to date' if same else 'DIFFERS from the source'}")
        return same
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def committed_tables() -> dict[str, dict[str, Any]]:
    """The committed vllm_serve.json of every SUPPORTED release, in SUPPORTED's order."""
    tables = {}
    for version in SUPPORTED:
        path = release_dir(version) / "vllm_serve.json"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: run generate.py --version {version} first")
        tables[version] = json.loads(path.read_text(encoding="utf-8"))
    return tables


def regenerate(version: str, sdist: Path | None, out_dir: Path, bench_only: bool = False,
               check: bool = False) -> bool:
    """Write (or with check, compare) `version`'s tables in out_dir; True when all are as committed."""
    with tempfile.TemporaryDirectory() as tmp:
        sdist = sdist or fetch_sdist(version, Path(tmp))
        found = re.sub(r"^vllm-|\.tar\.gz$", "", sdist.name)
        if found != version:
            raise SystemExit(f"{sdist} is vLLM {found}, not {version}")
        sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
        source = unpack(sdist, Path(tmp))
        bench = bench_serve_table(source, sha, version)
        data = None if bench_only else generate(source, sha, version)
    ok = write_or_check(out_dir / "vllm_bench_serve.json", bench, check)
    print(f"{out_dir / 'vllm_bench_serve.json'}: {len(bench['options'])} `vllm bench serve` options "
          f"from vLLM {version}")
    if data is not None:
        ok = write_or_check(out_dir / "vllm_serve.json", data, check) and ok
        print(f"{out_dir / 'vllm_serve.json'}: {len(data['options'])} options, {len(data['cases'])} cases "
              f"from vLLM {version}")
    return ok


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    cli.add_argument("--version", default=None,
                     help=f"vLLM release (default: every supported one, {', '.join(SUPPORTED)})")
    cli.add_argument("--sdist", type=Path, help="a downloaded vllm-X.tar.gz instead of fetching it")
    cli.add_argument("--output-dir", type=Path, help="where the tables go (default releases/<version>/)")
    cli.add_argument("--bench-only", action="store_true",
                     help="only the `vllm bench serve` table (read from the source, no imports)")
    cli.add_argument("--module-only", action="store_true",
                     help=f"only {RELEASES_MODULE.name}, from the committed tables")
    cli.add_argument("--check", action="store_true", help="fail if the committed files differ")
    opts = cli.parse_args()
    if opts.sdist and not opts.version:
        opts.version = re.sub(r"^vllm-|\.tar\.gz$", "", opts.sdist.name)
    versions = [opts.version] if opts.version else ([] if opts.module_only else list(SUPPORTED))
    ok = True
    for version in versions:
        ok = regenerate(version, opts.sdist, opts.output_dir or release_dir(version), opts.bench_only,
                        opts.check) and ok
    if not opts.output_dir and not opts.bench_only:
        ok = write_or_check(RELEASES_MODULE, releases_module(committed_tables()), opts.check) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
