# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reads a failed vLLM start-up log and says what went wrong and which variable to change.

vLLM fails minutes into start-up with a stack trace; the line that matters is buried in
hundreds of others. Each known failure is a pattern over the log and an advice naming
the role variable (roles/vllm) that fixes it. The patterns follow the vLLM release's own
messages (`release`, one of vllm_releases.SUPPORTED, default vllm_releases.DEFAULT): some are
written here (the unit tests quote each with its source file and line), the others are made from
vllm_releases.py, which generate.py writes from each release's source (file, line and text of each
message), so that a release that moved or reworded a message is matched in its own words and a
failure whose message a release no longer has is not looked for in its logs.
Pure functions: tests/unit/plugins/module_utils/test_vllm_diagnosis.py.
"""

from __future__ import annotations

import functools
import re
import signal
import string
from dataclasses import dataclass

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import DEFAULT, RELEASES, SUPPORTED

# NVFP4 on GB10 (sm_121): releases before 0.28.0 crash with cudaErrorIllegalInstruction
# (https://github.com/vllm-project/vllm/issues/35519). From 0.28.0 on vLLM selects NVFP4 kernels that
# run there: vLLM 0.34.0's own recipe recipes/models/Qwen/Qwen3.6-35B-A3B.yaml (sdist) gives its
# nvfp4 variant min_vllm_version 0.28.0 and a verified dgx_spark_gb10 override, and
# https://github.com/vllm-project/recipes/pull/632 marks Nemotron-3-Super NVFP4 verified on GB10
# with no backend flag ("vLLM already auto-selects the FlashInfer CUTLASS NVFP4 MoE kernel on SM121").
NVFP4_GB10_WORKS_FROM = "0.28.0"


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release)[:3])


def checked_release(release: str | None) -> str:
    """The release, DEFAULT when None; a clear error for one the collection has no tables for."""
    release = DEFAULT if release is None else str(release)
    if release not in RELEASES:
        raise ValueError(f"vLLM release {release!r} is not supported: the collection has vLLM's texts for "
                         f"{', '.join(SUPPORTED)} only; pass one of them")
    return release


def nvfp4_crashes_on_gb10(release: str | None) -> bool:
    """True when the release's NVFP4 kernels crash on GB10 (before 0.28.0); an unknown release
    (None) is taken to crash, since the warning is the safe side."""
    return release is None or release_key(release) < release_key(NVFP4_GB10_WORKS_FROM)


def vllm_text(name: str, release: str = DEFAULT) -> str:
    """vLLM's message `name` (vllm_releases.py, generated from the release's source) as a pattern:
    its literal words, and for each value it interpolates anything up to the end of the line."""
    parts = []
    for literal, field, _spec, _conversion in string.Formatter().parse(RELEASES[release]["messages"][name][2]):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(r"([^\n]*?)")
    return "".join(parts)


def vllm_first_line(name: str, release: str = DEFAULT) -> str:
    """The first line of a message of several lines: in a log each line has its process's prefix
    (`(APIServer pid=1) `), so only the first is matched."""
    return vllm_text(name, release).split(re.escape("\n"), 1)[0]


def field_error(key: str, release: str = DEFAULT) -> str:
    """pydantic refusing the value of a vLLM config field (field_errors, produced by running the
    class): the class's ValidationError, the field's line, then one of its messages. The group
    `evidence` marks the line that names the value."""
    cls, field = key.split(".")
    messages = "|".join(re.escape(text) for text in RELEASES[release]["field_errors"][key][2].values())
    return (rf"validation errors? for {cls}\b.*?\b{field}[ \t]*\n[^\n]*?"
            rf"(?P<evidence>(?:{messages})\b[^\n]*)")


@dataclass(frozen=True)
class KnownFailure:
    key: str
    title: str
    patterns: tuple[str, ...]
    variables: tuple[str, ...]
    advice: str
    # Container exit codes that are this failure when no log line says more (128 + signal).
    exit_codes: tuple[int, ...] = ()


class _Absent(Exception):
    """A message the release does not have: the failure it marks is not looked for."""


def known_failures(release: str | None = None) -> tuple[KnownFailure, ...]:
    """The failures looked for in a log of `release` (default DEFAULT), in the release's words."""
    return _known_failures(checked_release(release))


@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+, modules run on 3.8 too
def _known_failures(release: str) -> tuple[KnownFailure, ...]:
    messages = RELEASES[release]["messages"]

    def text(name: str) -> str:
        if name not in messages:
            raise _Absent(name)
        return vllm_text(name, release)

    def first_line(name: str) -> str:
        if name not in messages:
            raise _Absent(name)
        return vllm_first_line(name, release)

    found = []
    for make in _FAILURES:
        try:
            failure = make(text, first_line, release)
        except _Absent:
            continue
        if failure is not None:
            found.append(failure)
    return tuple(found)


def _mamba_block_size(text, _first_line, _release) -> KnownFailure:  # noqa: ANN001 - the builders' own helpers
    return KnownFailure(
        key="mamba-block-size",
        title="Mamba cache block_size larger than max_num_batched_tokens",
        # vLLM 0.19.1 (vllm/config/vllm.py); 0.34.0 no longer asserts it.
        patterns=(text("mamba-align-block-size"),),
        variables=("vllm_kv_cache_dtype", "vllm_max_num_batched_tokens"),
        advice=(
            "Qwen3.5 has hybrid Mamba layers; with an fp8 KV cache the aligned block size exceeds "
            "max_num_batched_tokens. Set vllm_kv_cache_dtype: auto (recommended), or raise "
            "vllm_max_num_batched_tokens to at least the block size shown."
        ),
    )


# Order matters: the more specific failures first (an NVFP4 crash also says "CUDA error"). Each entry
# makes its failure from the release's texts (`text`, `first_line`: vllm_text of that release; a name
# the release lacks leaves the failure out) or gives None where the failure cannot happen there.
_FAILURES = (
    _mamba_block_size,
    lambda text, first_line, release: KnownFailure(
        key="unsupported-architecture",
        title="The image's vLLM does not support the model architecture",
        patterns=(
            r"Model architectures \[([^\]]*)\] are not supported",
            r"model type `(\w+)` but Transformers does not recognize this architecture",
        ),
        variables=("vllm_image", "vllm_image_digest"),
        advice=(
            "The vLLM in this image is too old for the model (Qwen3.5, architecture qwen3_5_moe, needs "
            "vLLM >= 0.17; the role's default vllm/vllm-openai:v0.19.1-cu130 has it, NGC 26.01 is too old). "
            "Set vllm_image to a newer release tag and clear or update vllm_image_digest."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="nvfp4-illegal-instruction",
        title="NVFP4 kernels crash on GB10 (cudaErrorIllegalInstruction)",
        patterns=(r"cudaErrorIllegalInstruction", r"CUDA error: an illegal instruction was encountered"),
        variables=("vllm_model_dir", "vllm_quantization"),
        advice=(
            "NVFP4 checkpoints crash on GB10 (sm_121) with the kernels of vLLM before 0.28.0 "
            "(https://github.com/vllm-project/vllm/issues/35519). Serve the "
            "FP8 checkpoint instead: point vllm_model_dir at Qwen3.5-35B-A3B-FP8 weights (profile "
            "qwen3.5-35b-a3b-fp8) and leave vllm_quantization empty or set it to fp8; or set vllm_image to "
            "vLLM 0.28.0 or newer (vllm/vllm-openai:v0.34.0), whose NVFP4 kernels run on GB10."
        ),
    ) if nvfp4_crashes_on_gb10(release) else None,
    lambda text, first_line, release: KnownFailure(
        key="free-memory-at-startup",
        title="Less free memory at start-up than gpu_memory_utilization asks for",
        patterns=(
            r"Free memory on device \S+ \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory "
            r"utilization \(([\d.]+), ([\d.]+) GiB\)",
        ),
        variables=("vllm_gpu_memory_utilization", "vllm_flush_page_cache"),
        advice=(
            "vLLM asks for gpu_memory_utilization x total memory at start-up and counts what is not free as taken "
            "by others. On unified memory the page cache (the weights just read from disk) counts as taken: keep "
            "vllm_flush_page_cache: true and run the role as root (it drops the page cache before a (re)start; "
            "by hand: sync; echo 3 > /proc/sys/vm/drop_caches), stop other GPU processes, or lower "
            "vllm_gpu_memory_utilization (0.75 is the stable value)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="memory-profiling",
        title="Free memory grew while vLLM profiled its memory use",
        patterns=(r"Error in memory profiling\. Initial free memory [\d.]+ GiB, current free memory [\d.]+ GiB",),
        variables=("vllm_flush_page_cache", "vllm_gpu_memory_utilization"),
        advice=(
            "Something released memory while vLLM measured it: on unified memory, usually the kernel dropping "
            "page cache, or another GPU process ending. Keep vllm_flush_page_cache: true (the role then drops "
            "the page cache before the start, so it cannot shrink during profiling), start nothing else on the "
            "GPU meanwhile, and retry; lower vllm_gpu_memory_utilization if it recurs."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="no-kv-cache-memory",
        title="Nothing left for the KV cache after the weights and activations",
        patterns=(r"No available memory for the cache blocks",),
        variables=("vllm_gpu_memory_utilization", "vllm_model_dir", "vllm_enforce_eager"),
        advice=(
            "gpu_memory_utilization x total memory is used up by the weights and the profiling peak. Raise "
            "vllm_gpu_memory_utilization (not above 0.85 on unified memory), keep vllm_enforce_eager: true, or "
            "serve a smaller or more quantised checkpoint (vllm_model / vllm_model_dir; FP8 for Qwen3.5-35B-A3B)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="kv-cache-too-small",
        title="max_model_len larger than the KV cache can hold",
        patterns=(
            r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache"
            r" \((\d+)\)",
            r"To serve at least one request with the models?'s max seq len \((\d+)\).*?estimated maximum model "
            r"length is (\d+)",
            r"larger than the available KV cache memory",
        ),
        variables=("vllm_max_model_len", "vllm_gpu_memory_utilization"),
        advice=(
            "Lower vllm_max_model_len to what the KV cache holds (16384 at utilization 0.75, 32768 at 0.80 on "
            "a 128 GB Spark), or raise vllm_gpu_memory_utilization (not above 0.85 on unified memory)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="max-model-len-above-model",
        title="max_model_len above what the model's config.json allows",
        patterns=(r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len",),
        variables=("vllm_max_model_len",),
        advice=(
            "The model was trained for fewer tokens than vllm_max_model_len asks for (the limit is in the "
            "message: max_position_embeddings or model_max_length of its config.json). Lower "
            "vllm_max_model_len to at most that number."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="oom",
        title="CUDA out of memory",
        patterns=(
            r"CUDA out of memory",
            r"torch\.OutOfMemoryError",
            r"cudaErrorMemoryAllocation",
            r"CUBLAS_STATUS_ALLOC_FAILED",
        ),
        variables=("vllm_enforce_eager", "vllm_gpu_memory_utilization", "vllm_max_num_seqs"),
        advice=(
            "Unified memory ran out during load or profiling. Keep vllm_enforce_eager: true (torch.compile "
            "and CUDA graphs need a large extra peak), lower vllm_gpu_memory_utilization (0.75 is the "
            "stable value) or vllm_max_num_seqs, and do not serve BF16 35B weights on a 128 GB Spark."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="shm",
        title="Shared memory (/dev/shm) too small",
        patterns=(
            # vLLM itself never says "Bus error": its engine process dies of SIGBUS (signal 7)
            # and the API server reports the exit code (vllm/v1/engine/utils.py, 0.19.1).
            r"Failed core proc\(s\): \{[^}]*: -7\b[^}]*\}",
            r"Bus error",
            r"/dev/shm is only",
            r"Error while creating shared memory segment",
            r"unable to (?:write to|mmap) .*(?:/dev/shm|shared memory)",
            r"No space left on device.*shm|shm.*No space left on device",
        ),
        variables=("vllm_shm_size",),
        advice=(
            "vLLM's processes talk through shared memory and Docker's default /dev/shm is 64 MB; when it is "
            "full, a process touching it dies of SIGBUS (exit code 135, or -7 for an engine process). Set "
            "vllm_shm_size (16g in the stable profile)."
        ),
        exit_codes=(135,),
    ),
    lambda text, first_line, release: KnownFailure(
        key="port-in-use",
        title="The API port is already in use",
        patterns=(r"\[Errno 98\] Address already in use", r"address already in use"),
        variables=("vllm_port", "vllm_host"),
        advice=(
            "Another process (often an old vLLM started by hand) already listens on the port. Stop it "
            "(`ss -ltnp` shows which) or change vllm_port."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="model-files-missing",
        title="Model files missing",
        patterns=(
            r"Invalid repository ID or local directory specified",
            r"Cannot find any model weights",
            r"Repo id must be in the form",
            r"No such file or directory: '[^']*(?:config\.json|\.safetensors)'",
            r"does not appear to have a file named config\.json",
            r"Can't load the configuration of",
        ),
        variables=("vllm_model_dir",),
        advice=(
            "The directory mounted at /model has no config.json or no weights. Point vllm_model_dir at the "
            "host directory that holds config.json and the *.safetensors shards (download them first)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="invalid-tool-call-parser",
        title="Unknown tool call parser",
        patterns=(
            r"invalid tool call parser: (\S+)",
            r"--enable-auto-tool-choice requires tool_parser:'([^']*)' which has not been registered",
        ),
        variables=("vllm_tool_call_parser",),
        advice=(
            "The vLLM in the image has no tool call parser of that name (the message lists the ones it has). "
            "Set vllm_tool_call_parser to one of them (qwen3_coder for Qwen3.5), or use an image whose vLLM "
            "has the parser (vllm_image)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="invalid-reasoning-parser",
        title="Unknown reasoning parser",
        patterns=(
            r"invalid reasoning parser: (\S+)",
            # --reasoning-parser is looked up only in the engine, after the weights and the KV
            # cache: a KeyError there, and the API server's own lookup's TypeError.
            text("reasoning-parser-not-found"),
            text("reasoning-parser-not-registered"),
        ),
        variables=("vllm_reasoning_parser",),
        advice=(
            "The vLLM in the image has no reasoning parser of that name (the message lists the ones it has). "
            "Set vllm_reasoning_parser to one of them (qwen3 for Qwen3.5), or empty to turn reasoning parsing off."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="auto-tool-choice-without-parser",
        title="Automatic tool choice without a tool call parser",
        patterns=(
            r"--enable-auto-tool-choice requires --tool-call-parser",
            # The API's answer to tool_choice "auto" (a JSON body: the quotes arrive escaped).
            r"tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
        ),
        variables=("vllm_enable_auto_tool_choice", "vllm_tool_call_parser"),
        advice=(
            "Automatic tool choice needs both settings: vllm_enable_auto_tool_choice: true and "
            "vllm_tool_call_parser (qwen3_coder for Qwen3.5); or turn vllm_enable_auto_tool_choice off. A tool "
            "flag in vllm_extra_args bypasses that pairing: use the variables instead."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="unknown-quantization",
        title="Unknown quantization method",
        patterns=(r"Unknown quantization method: (\S+?)\. Must be one of",),
        variables=("vllm_quantization",),
        advice=(
            "The vLLM in the image does not know that quantization method (the message lists the ones it has). "
            "Leave vllm_quantization empty (vLLM reads the method from the checkpoint's config.json) or set one "
            "of the listed names."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="gpu-memory-utilization-out-of-range",
        title="gpu_memory_utilization is not a share of memory above 0 and at most 1",
        patterns=(field_error("CacheConfig.gpu_memory_utilization", release),),
        variables=("vllm_gpu_memory_utilization",),
        advice=(
            "vLLM takes --gpu-memory-utilization as a fraction of the GPU's memory, greater than 0 and at most 1 "
            "(the message shows the value it got). Set vllm_gpu_memory_utilization to a fraction such as 0.75, "
            "not a percentage, and not above 0.85 on unified memory."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="unknown-attention-backend",
        title="Unknown attention backend, or two of them",
        patterns=(text("unknown-attention-backend"), text("attention-backend-twice")),
        variables=("vllm_extra_args", "vllm_image"),
        advice=(
            "--attention-backend (or the backend of --attention-config) in vllm_extra_args names no backend this "
            "vLLM has (the message lists them: upper-case names such as FLASHINFER, FLASH_ATTN, TRITON_ATTN; the "
            "case does not matter, '-' is not '_'), or both flags are given. Fix the name in vllm_extra_args, "
            "give it once, or drop it so that vLLM picks the backend for the GPU; a newer backend needs a newer "
            "vllm_image."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="unknown-load-format",
        title="Unknown load format",
        patterns=(text("unknown-load-format"),),
        variables=("vllm_extra_args", "vllm_image"),
        advice=(
            "--load-format in vllm_extra_args names a weight loader this vLLM does not have (it fails before "
            "reading any weight). Fix or drop it in vllm_extra_args (the default, auto, reads safetensors), or "
            "use an image whose vLLM has that loader (vllm_image)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="model-not-first",
        title="The model is not the first argument of vllm serve",
        patterns=(text("model-not-first"),),
        variables=("vllm_image", "vllm_model_path"),
        advice=(
            "With --served-model-name, vLLM wants the model right after `vllm serve`. The role passes "
            "vllm_model_path first, after the image's entrypoint; an image whose entrypoint adds options of its "
            "own after `vllm serve` puts those first. Use an image whose entrypoint is plain `vllm serve` "
            "(vllm/vllm-openai) in vllm_image, and keep vllm_model_path set."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="log-outputs-without-log-requests",
        title="--enable-log-outputs without --enable-log-requests",
        patterns=(text("log-outputs-without-log-requests"),),
        variables=("vllm_extra_args",),
        advice=(
            "vLLM logs outputs only together with the requests. Add --enable-log-requests to vllm_extra_args next "
            "to --enable-log-outputs, or drop --enable-log-outputs."
        ),
    ),
    # vLLM's multi-node mode (--nnodes): the ranks meet in torch.distributed's TCPStore on the head's
    # --master-port (vllm/distributed/parallel_state.py:1423, init_distributed_environment, 0.19.1); the
    # texts are torch's (pytorch v2.10.0, the pin of vLLM 0.19.1), which vLLM prints under its own
    # "WorkerProc failed to start." (vllm/v1/executor/multiproc_executor.py:857).
    lambda text, first_line, release: KnownFailure(
        key="cluster-member-missing",
        title="A member of the cluster did not join the head's rendezvous",
        # torch/csrc/distributed/c10d/TCPStore.cpp, TCPStore::waitForWorkers.
        patterns=(r"DistStoreError: Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined\.",),
        variables=("vllm_master_port", "vllm_tensor_parallel_size", "vllm_pipeline_parallel_size"),
        advice=(
            "The head waited on its master port (vllm_master_port) for every rank of the cluster and not all "
            "came. Read the diagnosis of the other members' vllm containers: a member whose container is not "
            "running, that cannot reach the head's link address (playbooks/doctor.yml examines the link) or whose "
            "firewall drops vllm_master_port on the link; or parallel sizes that ask for more ranks than the "
            "cluster's members run (vllm_tensor_parallel_size x vllm_pipeline_parallel_size = members x "
            "vllm_gpus_per_node)."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="cluster-head-unreachable",
        title="This member could not reach the head of its cluster",
        # torch/csrc/distributed/c10d/socket.cpp, SocketConnectOp::throwTimeoutError.
        patterns=(r"DistNetworkError: The client socket has timed out after \d+ms while trying to connect to "
                  r"\([^)]*\)\.",),
        variables=("vllm_master_port",),
        advice=(
            "A headless member connects to the head's link address and master port (vllm_master_port) and gave up "
            "after --distributed-timeout-seconds: the head's container was not running or had left the "
            "rendezvous (the role starts every member of a cluster anew together: run it on the whole cluster, "
            "without --limit), the link is down (playbooks/doctor.yml), or a firewall drops the port on the link."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="cluster-member-lost",
        title="A member of the cluster went away while the model was served",
        # NCCL's text for ncclRemoteError (NVIDIA/nccl src/init.cc, ncclGetErrorString) under vLLM's
        # "NCCL error: {error}" (vllm/distributed/device_communicators/pynccl_wrapper.py:373).
        patterns=(re.escape(RELEASES[release]["messages"]["nccl-error"][2].format(
            error="remote process exited or there was a network error")),),
        variables=("vllm_master_port",),
        advice=(
            "vLLM cannot go on without every rank: the engine died at its next collective operation. The role "
            "starts the whole cluster anew on its next run (a member's container not running, or the head's "
            "completion failing); find why the member went away (its container's log, the memory watchdog, "
            "the link: playbooks/doctor.yml)."
        ),
    ),
    # vLLM's parallel layout and multi-node mode refused before anything starts (0.19.1). The role writes these
    # flags itself for a cluster and refuses them in vllm_extra_args (plugins/plugin_utils/vllm_args.py and
    # cluster_plan.py): a log shows them from an image whose entrypoint adds them, or from a run by hand.
    lambda text, first_line, release: KnownFailure(
        key="parallel-layout",
        title="The parallel layout asks for more GPUs than the box has, or does not fit the cluster",
        patterns=(first_line("world-size-above-gpus"), text("nnodes-world-size"),
                  text("nnodes-node-rank")),
        variables=("vllm_tensor_parallel_size", "vllm_pipeline_parallel_size", "vllm_gpus_per_node",
                   "vllm_extra_args"),
        advice=(
            "A Spark has one GPU: tensor or pipeline parallelism above 1 spans several boxes, which vLLM runs with "
            "--nnodes. Put the boxes that serve the model together in a child group of `clusters` and set "
            "vllm_tensor_parallel_size (members x vllm_gpus_per_node) there: the role then gives each member its "
            "--nnodes, --node-rank and --master-addr. Drop -tp, -pp, --nnodes and --node-rank from "
            "vllm_extra_args."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="multi-node-backend",
        title="A multi-node cluster with another executor than vLLM's multiprocessing",
        patterns=(text("nnodes-executor-backend"), text("nnodes-data-parallel-backend")),
        variables=("vllm_extra_args",),
        advice=(
            "vLLM's multi-node mode (--nnodes > 1) runs on its multiprocessing executor: drop "
            "--distributed-executor-backend ray (and --data-parallel-backend ray) from vllm_extra_args; the role "
            "runs clusters without Ray."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="headless-api-server-count",
        title="--api-server-count on a headless member",
        patterns=(text("headless-api-server-count"),),
        variables=("vllm_extra_args",),
        advice=(
            "A cluster's workers run vLLM --headless, with no API server; the head alone serves the API. Drop "
            "--api-server-count (-asc) from the cluster's vllm_extra_args."
        ),
    ),
    lambda text, first_line, release: KnownFailure(
        key="invalid-arguments",
        title="vLLM refused its command line",
        # Unknown flags are reported by the top-level parser ("vllm: error: unrecognized
        # arguments"), bad values of known flags by the subcommand's ("vllm serve: error:").
        patterns=(r"vllm(?: serve)?: error: .*",),
        variables=("vllm_extra_args", "vllm_image"),
        advice=(
            "The vLLM in the image does not know a flag or value it was given (a typo in vllm_extra_args, "
            "or a flag newer than the image). Fix vllm_extra_args or the vllm_* setting named in the error, "
            "or use an image whose vLLM knows the flag (vllm_image / vllm_image_digest)."
        ),
    ),
)


# The default release's failures, for readers that want the list (the README's table is checked
# against the KnownFailure entries above).
KNOWN_FAILURES = known_failures(DEFAULT)


@functools.lru_cache(maxsize=None)  # noqa: UP033 - functools.cache is 3.9+, modules run on 3.8 too
def _compiled(release: str) -> tuple[tuple[KnownFailure, tuple[re.Pattern[str], ...]], ...]:
    return tuple((failure, tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in failure.patterns))
                 for failure in _known_failures(release))


def _evidence_line(text: str, start: int) -> str:
    """The whole log line around a match, so the user sees vLLM's own words."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start:] if line_end < 0 else text[line_start:line_end]
    return line.strip()[:500]


def _last_match(patterns: tuple[re.Pattern[str], ...], text: str) -> re.Match[str] | None:
    """The last match of the first pattern that matches. A message also shows in the traceback's
    source line above it (`raise TypeError("Error: ...")`); the exception's own line comes last."""
    for pattern in patterns:
        match = None
        for match in pattern.finditer(text):  # noqa: B007 - the loop keeps the last one
            pass
        if match:
            return match
    return None


def _exit_code_evidence(exit_code: int) -> str:
    """What an exit code says: 128 + N is death by signal N (135 = SIGBUS)."""
    if exit_code > 128:
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = f"signal {exit_code - 128}"
        return f"container exit code {exit_code} (killed by {name})"
    return f"container exit code {exit_code}"


def _item(failure: KnownFailure, evidence: str) -> dict[str, object]:
    return {
        "key": failure.key,
        "title": failure.title,
        "variables": list(failure.variables),
        "advice": failure.advice,
        "evidence": evidence,
        "message": f"{failure.title}: {failure.advice} (change: {', '.join(failure.variables)})",
    }


def diagnose(log: str | list[str] | None, exit_code: int | None = None,
             release: str | None = None) -> list[dict[str, object]]:
    """Return every known failure found in the log or the container's exit code, most specific first.

    Each item: key, title, variables (role variables to change), advice, evidence (the log
    line that matched, or the exit code) and message (one sentence for a failure message).
    """
    text = "" if log is None else ("\n".join(log) if isinstance(log, list) else str(log))
    found = []
    for failure, patterns in _compiled(checked_release(release)):
        match = _last_match(patterns, text)
        if match:
            start = match.start("evidence") if "evidence" in match.re.groupindex else match.start()
            found.append(_item(failure, _evidence_line(text, start)))
        elif exit_code is not None and exit_code in failure.exit_codes:
            found.append(_item(failure, _exit_code_evidence(exit_code)))
    return found


def summarize(log: str | list[str] | None, tail: list[str] | None = None, exit_code: int | None = None,
              release: str | None = None) -> str:
    """A failure message: the diagnoses (or that none matched) and the log tail."""
    found = diagnose(log, exit_code, release)
    if found:
        lines = ["Diagnosis:"]
        for item in found:
            lines.append(f"- {item['title']} (evidence: {item['evidence']})")
            lines.append(f"  What to do: {item['advice']}")
            lines.append(f"  Variables: {', '.join(item['variables'])}")
    else:
        lines = ["Diagnosis: no known failure matched the log; read the last lines below."]
    if tail:
        lines.append(f"Last {len(tail)} log lines:")
        lines.extend(tail)
    return "\n".join(lines)
