# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Log excerpts are quoted as vLLM writes them; long lines are split into adjacent literals.
"""The matcher against log excerpts in the shape real vLLM writes them (from vLLM's own
issue tracker and DGX Spark deployments), one per known failure, plus healthy logs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils import vllm_diagnosis
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import known_failures
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import DEFAULT, RELEASES, SUPPORTED

# The excerpts below are vLLM 0.19.1's (the release deployed on DGX Sparks when they were taken); the
# tests of 0.34.0's own words are further down.
OLD = "0.19.1"
NEW = "0.34.0"
KNOWN_FAILURES = known_failures(OLD)
MESSAGES = RELEASES[OLD]["messages"]


def diagnose(log: object, exit_code: int | None = None, release: str = OLD) -> list[dict[str, object]]:
    return vllm_diagnosis.diagnose(log, exit_code, release)


def summarize(log: object, tail: list[str] | None = None, exit_code: int | None = None, release: str = OLD) -> str:
    return vllm_diagnosis.summarize(log, tail, exit_code, release)


OOM = "\n".join([
    '(EngineCore_DP0 pid=312) INFO 11-29 10:02:11 [gpu_model_runner.py:2653] Model loading took 34.86 GiB'
    ' and 181.3 seconds',
    '(EngineCore_DP0 pid=312) ERROR 11-29 10:03:40 [core.py:708] EngineCore failed to start.',
    '(EngineCore_DP0 pid=312) ERROR 11-29 10:03:40 [core.py:708]   File "/usr/local/lib/python3.12/dist-p'
    'ackages/vllm/v1/worker/gpu_worker.py", line 302, in determine_available_memory',
    '(EngineCore_DP0 pid=312) ERROR 11-29 10:03:40 [core.py:708] torch.OutOfMemoryError: CUDA out of memo'
    'ry. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 119.70 GiB of which 1.12 GiB is free. '
    'Including non-PyTorch memory, this process has 112.40 GiB memory in use.',
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core'
    ' proc(s): {}',
]) + "\n"

MAMBA = "\n".join([
    "(APIServer pid=1) INFO 03-11 08:14:02 [utils.py:253] non-default args: {'model_tag': '/model', 'kv_c"
    "ache_dtype': 'fp8', 'enable_prefix_caching': True}",
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig',
    '(APIServer pid=1)   Assertion failed, In Mamba cache align mode, block_size (2096) must be <= max_nu'
    "m_batched_tokens (2048). [type=assertion_error, input_value=ArgsKwargs((), {'model_co...transfer_con"
    "fig': None}), input_type=ArgsKwargs]",
]) + "\n"

ARCH = "\n".join([
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig',
    "(APIServer pid=1)   Value error, Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not "
    "supported for now. Supported architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM']) [type=val"
    'ue_error]',
]) + "\n"

ARCH_TRANSFORMERS = "\n".join([
    'ValueError: The checkpoint you are trying to load has model type `qwen3_5_moe` but Transformers does'
    ' not recognize this architecture. This could be because of an issue with the checkpoint, or because '
    'your version of Transformers is out of date.',
]) + "\n"

NVFP4 = "\n".join([
    '(EngineCore_DP0 pid=268) ERROR 04-14 19:01:18 [core.py:708]   File "/usr/local/lib/python3.12/dist-p'
    'ackages/vllm/v1/worker/gpu_model_runner.py", line 2411, in get_output',
    '(EngineCore_DP0 pid=268) ERROR 04-14 19:01:18 [core.py:708] torch.AcceleratorError: CUDA error: an i'
    'llegal instruction was encountered',
    "(EngineCore_DP0 pid=268) ERROR 04-14 19:01:18 [core.py:708] Search for `cudaErrorIllegalInstruction'"
    ' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.',
    '(EngineCore_DP0 pid=268) ERROR 04-14 19:01:18 [core.py:708] CUDA kernel errors might be asynchronous'
    'ly reported at some other API call, so the stacktrace below might be incorrect.',
]) + "\n"

KV_CLASSIC = "\n".join([
    'INFO 03-13 10:21:44 model_runner.py:160] Loading model weights took 14.9888 GB',
    "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can be "
    'stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` wh'
    'en initializing the engine.',
]) + "\n"

KV_V1 = "\n".join([
    '(EngineCore_DP0 pid=201) ERROR 11-29 10:05:02 [core.py:708] ValueError: To serve at least one reques'
    "t with the models's max seq len (262144), (48.00 GiB KV cache is needed, which is larger than the av"
    'ailable KV cache memory (7.51 GiB). Based on the available memory, the estimated maximum model lengt'
    'h is 41000. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing '
    'the engine.',
]) + "\n"

SHM = "\n".join([
    '(EngineCore_DP0 pid=88) INFO 11-29 09:58:13 [default_loader.py:267] Loading weights took 60.12 secon'
    'ds',
    'Bus error (core dumped)',
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core'
    " proc(s): {'EngineCore_DP0': -7}",
]) + "\n"

SHM_NCCL = "\n".join([
    'misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-8MkYy2 to 9637892 bytes',
    'proxy.cc:1330 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-8MkYy2 (size 963788'
    '8)',
]) + "\n"

PORT = "\n".join([
    '(APIServer pid=1) INFO 11-29 10:00:01 [api_server.py:1951] vLLM API server version 0.19.1',
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server'
    '.py", line 1960, in create_server_socket',
    '(APIServer pid=1)     sock.bind(addr)',
    '(APIServer pid=1) OSError: [Errno 98] Address already in use',
]) + "\n"

MISSING = "\n".join([
    "ValueError: Invalid repository ID or local directory specified: '/model'.",
    'Please verify the following requirements:',
    '1. Provide a valid Hugging Face repository ID.',
    '2. Specify a local directory that contains a recognized configuration file.',
]) + "\n"

MISSING_WEIGHTS = "\n".join([
    '(EngineCore_DP0 pid=90) ERROR 11-29 10:00:40 [core.py:708] RuntimeError: Cannot find any model weigh'
    'ts with `/model`',
]) + "\n"

ARGS = "\n".join([
    "usage: vllm serve [model_tag] [options]",
    "vllm serve: error: unrecognized arguments: --max-num-sequences 16",
]) + "\n"

# --- vLLM 0.19.1's own messages, formatted as its f-strings print them --------------------------
# Each constant names the source (vllm-0.19.1 sdist from PyPI, path:line of the message).

# vllm/v1/worker/utils.py:413-421 (request_memory): page cache counts as used on unified memory.
FREE_MEMORY = "\n".join([
    '(EngineCore pid=212) ERROR 11-30 05:12:03 [core.py:1092] ValueError: Free memory on device cuda:0 (8'
    '3.06/121.69 GiB) on startup is less than desired GPU memory utilization (0.75, 91.27 GiB). Decrease '
    'GPU memory utilization or reduce GPU memory used by other processes.',
]) + "\n"

# vllm/v1/worker/gpu_worker.py:408-416 (determine_available_memory).
PROFILING = "\n".join([
    '(EngineCore pid=212) ERROR 11-30 05:14:40 [core.py:1092] AssertionError: Error in memory profiling. '
    'Initial free memory 84.1 GiB, current free memory 86.72 GiB. This happens when other processes shari'
    'ng the same container release GPU memory while vLLM is profiling during initialization. To fix this,'
    ' ensure consistent GPU memory allocation or isolate vLLM in its own container.',
]) + "\n"

# vllm/v1/core/kv_cache_utils.py:626-631 (_check_enough_kv_cache_memory).
NO_KV_MEMORY = "\n".join([
    '(EngineCore pid=212) ERROR 11-30 05:15:10 [core.py:1092] ValueError: No available memory for the cac'
    'he blocks. Try increasing `gpu_memory_utilization` when initializing the engine. See https://docs.vl'
    'lm.ai/en/latest/configuration/conserving_memory/ for more details.',
]) + "\n"

# vllm/config/model.py:2161-2180 (_get_and_verify_max_len), raised inside pydantic.
MODEL_LEN = "\n".join([
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig',
    "(APIServer pid=1)   Value error, User-specified max_model_len (300000) is greater than the derived ma"
    "x_model_len (max_position_embeddings=262144 or model_max_length=None in model's config.json). To all"
    "ow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MOD"
    "EL_LEN must be used with extreme caution. [type=value_error]",
]) + "\n"

# vllm/v1/engine/utils.py:1057-1061; the process name is "EngineCore" on one GPU and
# "EngineCore_DP<n>" with data parallelism (vllm/v1/engine/utils.py:129). -7 is SIGBUS.
SIGBUS = "\n".join([
    '(EngineCore pid=212) INFO 11-30 05:12:40 [default_loader.py:291] Loading weights took 61.02 seconds',
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core'
    " proc(s): {'EngineCore': -7}",
]) + "\n"
SIGBUS_DP = "\n".join([
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core'
    " proc(s): {'EngineCore_DP0': -7}",
]) + "\n"

# Python's argparse under vLLM's top-level parser, prog "vllm" (vllm/entrypoints/cli/main.py:53).
UNKNOWN_FLAG = "\n".join([
    "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...",
    "vllm: error: unrecognized arguments: --max-num-sequences 16",
]) + "\n"

# vllm/entrypoints/openai/api_server.py:512-515 and 521-524 (validate_api_server_args).
TOOL_PARSER = "\n".join([
    "(APIServer pid=1) KeyError: 'invalid tool call parser: qwen3_codr (chose from { deepseek_v3,hermes,"
    "qwen3_coder,qwen3_xml })'",
]) + "\n"
REASONING_PARSER = "\n".join([
    "(APIServer pid=1) KeyError: 'invalid reasoning parser: qwen3.5 (chose from { deepseek_r1,gpt_oss,qwe"
    "n3 })'",
]) + "\n"

# vllm/parser/parser_manager.py:215-219 (get_tool_parser).
TOOL_PARSER_UNREGISTERED = "\n".join([
    "(APIServer pid=1) TypeError: Error: --enable-auto-tool-choice requires tool_parser:'qwen3_codr' which"
    " has not been registered",
]) + "\n"

# vllm/entrypoints/openai/cli_args.py:363-364 (validate_parsed_serve_args).
AUTO_TOOL = "\n".join([
    "TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser",
]) + "\n"
# vllm/entrypoints/serve/render/serving.py:219-222: the API's answer to tool_choice "auto".
AUTO_TOOL_REQUEST = (
    '{"error":{"message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to'
    ' be set","type":"BadRequestError","code":400}}'
)

# vllm/config/model.py:997-1001 (_verify_quantization), raised inside pydantic.
QUANTIZATION = "\n".join([
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig',
    "(APIServer pid=1)   Value error, Unknown quantization method: mxfp9. Must be one of ['awq', 'fp8', 'f"
    "bgemm_fp8', 'modelopt', 'modelopt_fp4', 'gguf', 'gptq_marlin', 'awq_marlin', 'gptq', 'compressed-ten"
    "sors', 'bitsandbytes', 'mxfp4', 'mxfp8']. [type=value_error]",
]) + "\n"

# --- vLLM 0.19.1's texts for the failures below, each checked against the release's source by
# tests/testbed/vllm-standin/generate.py (quoted in plugins/module_utils/vllm_messages.py).

# vllm/reasoning/abs_reasoning_parsers.py:204 (ReasoningParserManager.get_reasoning_parser), in the
# engine after the KV cache is set up (vllm/v1/structured_output/__init__.py:88). The traceback
# shows the raising line before the exception's own.
REASONING_NOT_FOUND = "\n".join([
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:15:40 [core.py:1092] EngineCore failed to start.',
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:15:40 [core.py:1092]   File "/usr/local/lib/python3.12/dist-p'
    'ackages/vllm/reasoning/abs_reasoning_parsers.py", line 203, in get_reasoning_parser',
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:15:40 [core.py:1092]     raise KeyError(',
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:15:40 [core.py:1092] KeyError: "Reasoning parser \'qwen3.5\' not'
    ' found. Available parsers: deepseek_r1, deepseek_v3, ernie45, gemma4, glm45, granite, holo2, hunyuan_'
    'a13b, kimi_k2, minimax_m2, minimax_m2_append_think, mistral, nemotron_v3, olmo3, openai_gptoss, qwen3'
    ', seed_oss, step3, step3p5"',
    '(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core'
    ' proc(s): {}',
]) + "\n"

# vllm/parser/parser_manager.py:237 (ParserManager.get_reasoning_parser, the API server's lookup),
# raised from the KeyError above.
REASONING_NOT_REGISTERED = "\n".join([
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/parser/parser_manager.py", l'
    'ine 237, in get_reasoning_parser',
    '(APIServer pid=1)     raise TypeError(f"{reasoning_parser_name=} has not been registered") from e',
    "(APIServer pid=1) TypeError: reasoning_parser_name='qwen3.5' has not been registered",
]) + "\n"

# pydantic's texts for CacheConfig.gpu_memory_utilization, Field(gt=0, le=1) at vllm/config/cache.py:41,
# produced by running CacheConfig from the sdist; each line prefixed as the API server prints it.
UTILIZATION_ZERO = "\n".join([
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig',
    '(APIServer pid=1) gpu_memory_utilization',
    '(APIServer pid=1)   Input should be greater than 0 [type=greater_than, input_value=0.0, input_type=f'
    'loat]',
    '(APIServer pid=1)     For further information visit https://errors.pydantic.dev/2.12/v/greater_than',
]) + "\n"
UTILIZATION_PERCENT = "\n".join([
    '(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig',
    '(APIServer pid=1) gpu_memory_utilization',
    '(APIServer pid=1)   Input should be less than or equal to 1 [type=less_than_equal, input_value=75.0,'
    ' input_type=float]',
    '(APIServer pid=1)     For further information visit https://errors.pydantic.dev/2.12/v/less_than_equ'
    'al',
]) + "\n"

# vllm/model_executor/model_loader/__init__.py:124 (get_model_loader), in the engine before any weight.
LOAD_FORMAT = "\n".join([
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:12:03 [core.py:1092]     raise ValueError(f"Load format `{lo'
    'ad_format}` is not supported")',
    '(EngineCore_DP0 pid=212) ERROR 12-01 10:12:03 [core.py:1092] ValueError: Load format `tensorstore` is'
    ' not supported',
]) + "\n"

# vllm/v1/attention/backends/registry.py:29 (_AttentionBackendEnumMeta.__getitem__), from
# EngineArgs.create_engine_config in the API server; the name is upper-cased first.
ATTENTION_BACKEND = "\n".join([
    "(APIServer pid=1) ValueError: Unknown attention backend: 'FLASHATTENTION'. Valid options are: FLASH_A"
    "TTN, FLASH_ATTN_DIFFKV, TRITON_ATTN, ROCM_ATTN, ROCM_AITER_MLA, ROCM_AITER_TRITON_MLA, ROCM_AITER_FA, "
    "ROCM_AITER_MLA_SPARSE, XPU_MLA_SPARSE, TORCH_SDPA, FLASHINFER, FLASHINFER_MLA, FLASHINFER_MLA_SPARSE, "
    "TRITON_MLA, CUTLASS_MLA, FLASHMLA, FLASHMLA_SPARSE, FLASH_ATTN_MLA, NO_ATTENTION, FLEX_ATTENTION, TREE"
    "_ATTN, ROCM_AITER_UNIFIED_ATTN, CPU_ATTN, CUSTOM",
]) + "\n"
# vllm/engine/arg_utils.py:1886: --attention-backend and --attention-config's backend together.
ATTENTION_BACKEND_TWICE = "\n".join([
    "(APIServer pid=1) ValueError: attention_backend and attention_config.backend are mutually exclusive",
]) + "\n"

# vllm/utils/argparse_utils.py:228 (FlexibleArgumentParser.parse_args), before logging starts.
MODEL_NOT_FIRST = "\n".join([
    'Traceback (most recent call last):',
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/utils/argparse_utils.py", line 227, in parse_args',
    "ValueError: `model` should be provided as the first positional argument when using `vllm serve`. i.e."
    " `vllm serve <model> --<arg> <value>`.",
]) + "\n"

# vllm/entrypoints/openai/cli_args.py:366 (validate_parsed_serve_args).
LOG_OUTPUTS = "\n".join([
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/cli_args.py", line 366, in val'
    'idate_parsed_serve_args',
    '    raise TypeError("Error: --enable-log-outputs requires --enable-log-requests")',
    "TypeError: Error: --enable-log-outputs requires --enable-log-requests",
]) + "\n"

HEALTHY = "\n".join([
    '(APIServer pid=1) INFO 11-29 10:06:40 [api_server.py:1826] Starting vLLM API server 0 on http://0.0.'
    '0.0:8000',
    '(APIServer pid=1) INFO:     Started server process [1]',
    '(APIServer pid=1) INFO:     Application startup complete.',
    '(APIServer pid=1) INFO:     127.0.0.1:40312 - "GET /health HTTP/1.1" 200 OK',
    '(APIServer pid=1) WARNING 11-29 10:06:40 [config.py:1420] Default sampling parameters have been over'
    "ridden by the model's Hugging Face generation config recommended from the model creator.",
]) + "\n"


# vLLM 0.19.1's multi-node mode: the head's worker waiting in torch's TCPStore for a rank that never came
# (pytorch v2.10.0 TCPStore::waitForWorkers), a headless member that could not reach the head (socket.cpp
# SocketConnectOp::throwTimeoutError), and the head's engine after a member went away (NCCL's
# ncclRemoteError text under vLLM's NCCL_CHECK).
CLUSTER_MISSING = "\n".join([
    '(Worker pid=42) ERROR 12-01 17:40:02 [multiproc_executor.py:857] WorkerProc failed to start.',
    '(Worker pid=42)   File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/parallel_state.py", line 1423,'
    ' in init_distributed_environment',
    '(Worker pid=42) torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients '
    'joined.',
]) + "\n"

CLUSTER_HEAD_UNREACHABLE = "\n".join([
    '(APIServer pid=1) INFO 12-01 17:30:01 [serve.py:194] Launching vLLM (v0.19.1) headless multiproc executor, '
    'with head node address 192.168.100.10:29501 for torch.distributed process group.',
    '(Worker pid=3) ERROR 12-01 17:40:01 [multiproc_executor.py:857] WorkerProc failed to start.',
    '(Worker pid=3) torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying'
    ' to connect to (192.168.100.10, 29501).',
]) + "\n"

CLUSTER_MEMBER_LOST = "\n".join([
    '(Worker_TP0 pid=3) ERROR 12-01 17:45:10 [multiproc_executor.py:949] WorkerProc hit an exception.',
    '(Worker_TP0 pid=3) RuntimeError: NCCL error: remote process exited or there was a network error',
    '(EngineCore_DP0 pid=2) ERROR 12-01 17:45:10 [core.py:1110] EngineCore encountered a fatal error.',
    '(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace '
    '(above) for the root cause.',
]) + "\n"

# vLLM 0.19.1 refusing a parallel layout before anything starts: -tp 2 on one GPU without --nnodes (a
# ValidationError of ParallelConfig, each line of the message under the process's prefix), --nnodes 2 with
# Ray (the same class), and --api-server-count on a headless member (serve.py's ValueError).
WORLD_SIZE = "\n".join([
    "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
    "(APIServer pid=1)   Value error, World size (2) is larger than the number of available GPUs (1) in this node. "
    "If this is intentional and you are using:",
    "(APIServer pid=1) - ray, set '--distributed-executor-backend ray'.",
    "(APIServer pid=1) - multiprocessing, set '--nnodes' appropriately. [type=value_error, "
    "input_value=ArgsKwargs((), {'model_co...transfer_config': None}), input_type=ArgsKwargs]",
]) + "\n"

NNODES_RAY = "\n".join([
    "(APIServer pid=1) pydantic_core._pydantic_core.ValidationError: 1 validation error for ParallelConfig",
    "(APIServer pid=1)   Value error, nnodes > 1 can only be set when distributed executor backend is mp, uni or "
    "external_launcher. [type=value_error, input_value=ArgsKwargs((), {'model_co...transfer_config': None}), "
    "input_type=ArgsKwargs]",
]) + "\n"

HEADLESS_API_SERVERS = "\n".join([
    '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", line 57, in '
    "cmd",
    "(APIServer pid=1) ValueError: --api-server-count=2 cannot be used with --headless (no API servers are started "
    "in headless mode).",
]) + "\n"


@pytest.mark.parametrize(("log", "key", "variable"), [
    (OOM, "oom", "vllm_enforce_eager"),
    (MAMBA, "mamba-block-size", "vllm_kv_cache_dtype"),
    (ARCH, "unsupported-architecture", "vllm_image"),
    (ARCH_TRANSFORMERS, "unsupported-architecture", "vllm_image"),
    (NVFP4, "nvfp4-illegal-instruction", "vllm_model_dir"),
    (KV_CLASSIC, "kv-cache-too-small", "vllm_max_model_len"),
    (KV_V1, "kv-cache-too-small", "vllm_max_model_len"),
    (SHM, "shm", "vllm_shm_size"),
    (SHM_NCCL, "shm", "vllm_shm_size"),
    (PORT, "port-in-use", "vllm_port"),
    (MISSING, "model-files-missing", "vllm_model_dir"),
    (MISSING_WEIGHTS, "model-files-missing", "vllm_model_dir"),
    (ARGS, "invalid-arguments", "vllm_extra_args"),
    (FREE_MEMORY, "free-memory-at-startup", "vllm_flush_page_cache"),
    (FREE_MEMORY, "free-memory-at-startup", "vllm_gpu_memory_utilization"),
    (PROFILING, "memory-profiling", "vllm_flush_page_cache"),
    (NO_KV_MEMORY, "no-kv-cache-memory", "vllm_gpu_memory_utilization"),
    (MODEL_LEN, "max-model-len-above-model", "vllm_max_model_len"),
    (SIGBUS, "shm", "vllm_shm_size"),
    (SIGBUS_DP, "shm", "vllm_shm_size"),
    (UNKNOWN_FLAG, "invalid-arguments", "vllm_extra_args"),
    (TOOL_PARSER, "invalid-tool-call-parser", "vllm_tool_call_parser"),
    (TOOL_PARSER_UNREGISTERED, "invalid-tool-call-parser", "vllm_tool_call_parser"),
    (REASONING_PARSER, "invalid-reasoning-parser", "vllm_reasoning_parser"),
    (AUTO_TOOL, "auto-tool-choice-without-parser", "vllm_tool_call_parser"),
    (AUTO_TOOL_REQUEST, "auto-tool-choice-without-parser", "vllm_enable_auto_tool_choice"),
    (QUANTIZATION, "unknown-quantization", "vllm_quantization"),
    (REASONING_NOT_FOUND, "invalid-reasoning-parser", "vllm_reasoning_parser"),
    (REASONING_NOT_REGISTERED, "invalid-reasoning-parser", "vllm_reasoning_parser"),
    (UTILIZATION_ZERO, "gpu-memory-utilization-out-of-range", "vllm_gpu_memory_utilization"),
    (UTILIZATION_PERCENT, "gpu-memory-utilization-out-of-range", "vllm_gpu_memory_utilization"),
    (LOAD_FORMAT, "unknown-load-format", "vllm_extra_args"),
    (ATTENTION_BACKEND, "unknown-attention-backend", "vllm_extra_args"),
    (ATTENTION_BACKEND_TWICE, "unknown-attention-backend", "vllm_extra_args"),
    (MODEL_NOT_FIRST, "model-not-first", "vllm_model_path"),
    (LOG_OUTPUTS, "log-outputs-without-log-requests", "vllm_extra_args"),
    (CLUSTER_MISSING, "cluster-member-missing", "vllm_master_port"),
    (CLUSTER_HEAD_UNREACHABLE, "cluster-head-unreachable", "vllm_master_port"),
    (CLUSTER_MEMBER_LOST, "cluster-member-lost", "vllm_master_port"),
    (WORLD_SIZE, "parallel-layout", "vllm_tensor_parallel_size"),
    (NNODES_RAY, "multi-node-backend", "vllm_extra_args"),
    (HEADLESS_API_SERVERS, "headless-api-server-count", "vllm_extra_args"),
])
def test_each_known_failure_is_diagnosed_first_and_names_its_variable(log: str, key: str, variable: str):
    found = diagnose(log)
    assert found, "nothing matched"
    assert found[0]["key"] == key
    assert variable in found[0]["variables"]
    assert variable in found[0]["message"]
    # The evidence is vLLM's own line, not the pattern.
    assert found[0]["evidence"] in log


def test_every_known_failure_has_a_test_excerpt():
    tested = {"oom", "mamba-block-size", "unsupported-architecture", "nvfp4-illegal-instruction",
              "kv-cache-too-small", "shm", "port-in-use", "model-files-missing", "invalid-arguments",
              "free-memory-at-startup", "memory-profiling", "no-kv-cache-memory", "max-model-len-above-model",
              "invalid-tool-call-parser", "invalid-reasoning-parser", "auto-tool-choice-without-parser",
              "unknown-quantization", "gpu-memory-utilization-out-of-range", "unknown-load-format",
              "unknown-attention-backend", "model-not-first", "log-outputs-without-log-requests",
              "cluster-member-missing", "cluster-head-unreachable", "cluster-member-lost", "parallel-layout",
              "multi-node-backend", "headless-api-server-count"}
    assert {f.key for f in KNOWN_FAILURES} == tested


def test_healthy_log_has_no_diagnosis():
    assert diagnose(HEALTHY) == []
    assert diagnose("") == []
    assert diagnose(None) == []


def test_list_of_lines_is_accepted():
    assert diagnose(PORT.splitlines())[0]["key"] == "port-in-use"


def test_nvfp4_is_not_mistaken_for_oom_and_kv_not_for_oom():
    assert [f["key"] for f in diagnose(NVFP4)] == ["nvfp4-illegal-instruction"]
    assert [f["key"] for f in diagnose(KV_V1)] == ["kv-cache-too-small"]


def test_evidence_is_one_line():
    evidence = diagnose(MAMBA)[0]["evidence"]
    assert "\n" not in evidence
    assert "block_size (2096)" in evidence


def test_summary_has_diagnosis_and_tail():
    tail = OOM.splitlines()[-3:]
    text = summarize(OOM, tail)
    assert text.startswith("Diagnosis:\n- CUDA out of memory")
    assert "Variables: vllm_enforce_eager" in text
    assert text.endswith(tail[-1])


def test_summary_without_match_says_so():
    assert "no known failure matched" in summarize(HEALTHY, ["x"])


@pytest.mark.parametrize("log", [FREE_MEMORY, PROFILING, NO_KV_MEMORY, MODEL_LEN, SIGBUS, UNKNOWN_FLAG, TOOL_PARSER,
                                 REASONING_PARSER, AUTO_TOOL, QUANTIZATION, REASONING_NOT_FOUND,
                                 REASONING_NOT_REGISTERED, UTILIZATION_ZERO, UTILIZATION_PERCENT, LOAD_FORMAT,
                                 ATTENTION_BACKEND, ATTENTION_BACKEND_TWICE, MODEL_NOT_FIRST, LOG_OUTPUTS,
                                 CLUSTER_MISSING, CLUSTER_HEAD_UNREACHABLE, CLUSTER_MEMBER_LOST, WORLD_SIZE, NNODES_RAY,
                                 HEADLESS_API_SERVERS])
def test_each_real_message_gets_exactly_one_diagnosis(log: str):
    # One cause, one advice: a real message must not also trip a neighbouring pattern.
    assert len(diagnose(log)) == 1, [f["key"] for f in diagnose(log)]


def test_sigbus_exit_code_alone_is_diagnosed_as_shm():
    # vLLM never prints "Bus error": when the log shows nothing, exit code 135 (128 + SIGBUS) is the evidence.
    found = diagnose(["(APIServer pid=1) INFO 11-30 05:12:01 [api_server.py:1951] vLLM API server version 0.19.1"],
                     exit_code=135)
    assert [f["key"] for f in found] == ["shm"]
    assert found[0]["evidence"] == "container exit code 135 (killed by SIGBUS)"
    assert "vllm_shm_size" in found[0]["message"]


def test_other_exit_codes_are_not_shm():
    assert diagnose("", exit_code=1) == []
    assert diagnose("", exit_code=137) == []


def test_a_log_match_is_preferred_over_the_exit_code_as_evidence():
    found = diagnose(SIGBUS, exit_code=135)
    assert [f["key"] for f in found] == ["shm"]
    assert "Failed core proc(s)" in found[0]["evidence"]


def test_summary_carries_the_exit_code_evidence():
    text = summarize([], ["last line"], exit_code=135)
    assert "Shared memory (/dev/shm) too small (evidence: container exit code 135 (killed by SIGBUS))" in text


def test_unknown_value_of_a_known_flag_is_an_argument_error_too():
    # Values are checked by the `serve` subparser, so its prog is "vllm serve".
    log = "vllm serve: error: argument --max-model-len: invalid human_readable_int_or_auto value: '1.5K'"
    assert diagnose(log)[0]["key"] == "invalid-arguments"


@pytest.mark.parametrize("release", SUPPORTED)
def test_no_advice_names_a_variable_the_role_does_not_have(release: str):
    # The role's variables are the keys of its argument spec (roles/vllm/meta/argument_specs.yml).
    spec = Path(__file__).resolve().parents[4] / "roles" / "vllm" / "meta" / "argument_specs.yml"
    options = set(re.findall(r"^      (vllm_\w+):", spec.read_text(encoding="utf-8"), re.MULTILINE))
    assert options, "no vllm_* option found in the argument spec"
    for failure in known_failures(release):
        named = set(failure.variables) | set(re.findall(r"\bvllm_[a-z_]+", failure.advice))
        assert named <= options, (failure.key, named - options)


@pytest.mark.parametrize(("log", "evidence"), [
    (REASONING_NOT_FOUND, "KeyError: \"Reasoning parser 'qwen3.5' not found."),
    (REASONING_NOT_REGISTERED, "TypeError: reasoning_parser_name='qwen3.5' has not been registered"),
    (UTILIZATION_ZERO, "Input should be greater than 0 [type=greater_than, input_value=0.0"),
    (UTILIZATION_PERCENT, "Input should be less than or equal to 1 [type=less_than_equal, input_value=75.0"),
    (LOAD_FORMAT, "ValueError: Load format `tensorstore` is not supported"),
    (LOG_OUTPUTS, "TypeError: Error: --enable-log-outputs requires --enable-log-requests"),
])
def test_evidence_is_the_exception_line_not_the_source_line_above_it(log: str, evidence: str):
    # A traceback prints the raising source line (often with the message's words) before the
    # exception; the line that shows the value is the one to show.
    assert evidence in diagnose(log)[0]["evidence"]


def test_another_cache_config_field_is_not_the_utilization_diagnosis():
    # The field's name line must come before the message: a refused block_size is something else.
    other = UTILIZATION_ZERO.replace("gpu_memory_utilization", "block_size")
    assert [f["key"] for f in diagnose(other)] == []


@pytest.mark.parametrize("release", SUPPORTED)
def test_patterns_made_from_vllms_texts_match_their_templates(release: str):
    """Each message the diagnosis builds from vllm_releases.py, formatted with sample values, is found
    in a log of its own release."""
    samples = {
        "reasoning-parser-not-found": "invalid-reasoning-parser",
        "reasoning-parser-not-registered": "invalid-reasoning-parser",
        "unknown-attention-backend": "unknown-attention-backend",
        "attention-backend-twice": "unknown-attention-backend",
        "unknown-load-format": "unknown-load-format",
        "model-not-first": "model-not-first",
        "log-outputs-without-log-requests": "log-outputs-without-log-requests",
        "world-size-above-gpus": "parallel-layout",
        "nnodes-world-size": "parallel-layout",
        "nnodes-node-rank": "parallel-layout",
        "nnodes-executor-backend": "multi-node-backend",
        "nnodes-data-parallel-backend": "multi-node-backend",
        "headless-api-server-count": "headless-api-server-count",
    }
    for name, key in samples.items():
        file, line, template = RELEASES[release]["messages"][name]
        assert file.startswith("vllm/") and line > 0, name
        fields = {f: "x_1" for f in re.findall(r"(?<!\{)\{(\w+)\}(?!\})", template)}
        assert diagnose(f"ValueError: {template.format(**fields)}", release=release)[0]["key"] == key, name


# --- vLLM 0.34.0's own words (vllm-0.34.0 sdist, path:line in vllm_releases.py) -------------------
# vllm/engine/arg_utils.py: the multi-node checks became ValueErrors with new words.
NNODES_WORLD_SIZE_034 = (
    "(APIServer pid=1) ValueError: Invalid data-parallel launch options: `--nnodes 3` must evenly divide the "
    "total world size (2). Adjust `--nnodes`, `--data-parallel-size`, `--pipeline-parallel-size`, "
    "`--tensor-parallel-size`, or `--prefill-context-parallel-size`.")
NNODES_BACKEND_034 = (
    "(APIServer pid=1) ValueError: Invalid data-parallel launch options: `--nnodes 2` requires "
    "`--data-parallel-backend mp`; got `--data-parallel-backend ray`. Use the MP backend or set `--nnodes 1`.")
# vllm/v1/core/kv_cache_planning.py: the KV cache checks moved there, the advice became a hint
# (_more_kv_cache_memory_hint, its text without the extensible KV cache).
NO_KV_MEMORY_034 = (
    "(EngineCore pid=312) ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on "
    "the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
    "more details.")


def test_the_default_release_is_the_newest_supported():
    assert DEFAULT == NEW and SUPPORTED == (OLD, NEW)
    assert vllm_diagnosis.diagnose(NNODES_WORLD_SIZE_034)[0]["key"] == "parallel-layout"


@pytest.mark.parametrize(("log", "key"), [
    (NNODES_WORLD_SIZE_034, "parallel-layout"),
    (NNODES_BACKEND_034, "multi-node-backend"),
    (NO_KV_MEMORY_034, "no-kv-cache-memory"),
])
def test_a_release_is_diagnosed_in_its_own_words(log: str, key: str):
    assert [f["key"] for f in vllm_diagnosis.diagnose(log, release=NEW)] == [key]


def test_a_text_the_release_changed_is_not_read_in_the_other_releases_words():
    # 0.19.1's assertion, "world_size=2 must be divisible by nnodes=3.", is not 0.34.0's text.
    old = "(APIServer pid=1) AssertionError: world_size=2 must be divisible by nnodes=3."
    assert [f["key"] for f in vllm_diagnosis.diagnose(old, release=OLD)] == ["parallel-layout"]
    assert vllm_diagnosis.diagnose(old, release=NEW) == []
    assert vllm_diagnosis.diagnose(NNODES_WORLD_SIZE_034, release=OLD) == []


def test_a_failure_whose_message_the_release_lacks_is_not_looked_for():
    # 0.34.0's VllmConfig no longer asserts the Mamba align-mode block size (vllm/config/vllm.py).
    assert "mamba-align-block-size" not in RELEASES[NEW]["messages"]
    assert "mamba-block-size" not in {f.key for f in known_failures(NEW)}
    assert vllm_diagnosis.diagnose(MAMBA, release=NEW) == []


def test_nvfp4_on_gb10_is_a_failure_of_releases_before_0_28_only():
    assert "nvfp4-illegal-instruction" in {f.key for f in known_failures(OLD)}
    assert "nvfp4-illegal-instruction" not in {f.key for f in known_failures(NEW)}
    assert vllm_diagnosis.nvfp4_crashes_on_gb10("0.27.9") and not vllm_diagnosis.nvfp4_crashes_on_gb10("0.28.0")
    assert vllm_diagnosis.nvfp4_crashes_on_gb10(None)


def test_an_unknown_release_is_refused_with_the_supported_ones():
    with pytest.raises(ValueError, match=r"0\.20\.0.*0\.19\.1, 0\.34\.0"):
        vllm_diagnosis.diagnose("x", release="0.20.0")
    with pytest.raises(ValueError, match=r"0\.19\.1, 0\.34\.0"):
        vllm_diagnosis.summarize("x", release="latest")
