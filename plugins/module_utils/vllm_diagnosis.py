# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reads a failed vLLM start-up log and says what went wrong and which variable to change.

vLLM fails minutes into start-up with a stack trace; the line that matters is buried in
hundreds of others. Each known failure is a pattern over the log and an advice naming
the role variable (roles/vllm) that fixes it. Pure functions: unit-tested with real
log excerpts in tests/unit/plugins/module_utils/test_vllm_diagnosis.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownFailure:
    key: str
    title: str
    patterns: tuple[str, ...]
    variables: tuple[str, ...]
    advice: str


# Order matters: the more specific failures first (an NVFP4 crash also says "CUDA error").
KNOWN_FAILURES: tuple[KnownFailure, ...] = (
    KnownFailure(
        key="mamba-block-size",
        title="Mamba cache block_size larger than max_num_batched_tokens",
        patterns=(r"In Mamba cache align mode, block_size \((\d+)\) must be <= max_num_batched_tokens \((\d+)\)",),
        variables=("vllm_kv_cache_dtype", "vllm_max_num_batched_tokens"),
        advice=(
            "Qwen3.5 has hybrid Mamba layers; with an fp8 KV cache the aligned block size exceeds "
            "max_num_batched_tokens. Set vllm_kv_cache_dtype: auto (recommended), or raise "
            "vllm_max_num_batched_tokens to at least the block size shown."
        ),
    ),
    KnownFailure(
        key="unsupported-architecture",
        title="The image's vLLM does not support the model architecture",
        patterns=(
            r"Model architectures \[([^\]]*)\] are not supported",
            r"model type `(\w+)` but Transformers does not recognize this architecture",
        ),
        variables=("vllm_image", "vllm_image_tag"),
        advice=(
            "The vLLM in this image is too old for the model (Qwen3.5, architecture qwen3_5_moe, needs "
            "vLLM >= 0.17, e.g. vllm/vllm-openai:cu130-nightly-aarch64; NGC 26.01 is too old). "
            "Change vllm_image (or pin a newer vllm_image_tag / vllm_image_digest)."
        ),
    ),
    KnownFailure(
        key="nvfp4-illegal-instruction",
        title="NVFP4 kernels crash on GB10 (cudaErrorIllegalInstruction)",
        patterns=(r"cudaErrorIllegalInstruction", r"CUDA error: an illegal instruction was encountered"),
        variables=("vllm_model_dir", "vllm_quantization"),
        advice=(
            "NVFP4 checkpoints crash on GB10 (sm_121) with the current kernels "
            "(https://github.com/vllm-project/vllm/issues/35519). Serve the "
            "FP8 checkpoint instead: point vllm_model_dir at Qwen3.5-35B-A3B-FP8 weights (profile "
            "qwen3.5-35b-a3b-fp8) and leave vllm_quantization empty or set it to fp8."
        ),
    ),
    KnownFailure(
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
    KnownFailure(
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
    KnownFailure(
        key="shm",
        title="Shared memory (/dev/shm) too small",
        patterns=(
            r"Bus error",
            r"/dev/shm is only",
            r"Error while creating shared memory segment",
            r"unable to (?:write to|mmap) .*(?:/dev/shm|shared memory)",
            r"No space left on device.*shm|shm.*No space left on device",
        ),
        variables=("vllm_shm_size",),
        advice=(
            "vLLM's processes talk through shared memory and Docker's default /dev/shm is 64 MB. Set "
            "vllm_shm_size (16g in the stable profile)."
        ),
    ),
    KnownFailure(
        key="port-in-use",
        title="The API port is already in use",
        patterns=(r"\[Errno 98\] Address already in use", r"address already in use"),
        variables=("vllm_port", "vllm_host"),
        advice=(
            "Another process (often an old vLLM started by hand) already listens on the port. Stop it "
            "(`ss -ltnp` shows which) or change vllm_port."
        ),
    ),
    KnownFailure(
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
    KnownFailure(
        key="invalid-arguments",
        title="vLLM refused its command line",
        patterns=(r"vllm serve: error: .*",),
        variables=("vllm_extra_args", "vllm_image"),
        advice=(
            "The vLLM in the image does not know a flag or value it was given (a typo in vllm_extra_args, "
            "or a flag newer than the image). Fix vllm_extra_args or the vllm_* setting named in the error, "
            "or use an image whose vLLM knows the flag (vllm_image / vllm_image_digest)."
        ),
    ),
)

_COMPILED = tuple((failure, tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in failure.patterns))
                  for failure in KNOWN_FAILURES)


def _evidence_line(text: str, start: int) -> str:
    """The whole log line around a match, so the user sees vLLM's own words."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    line = text[line_start:] if line_end < 0 else text[line_start:line_end]
    return line.strip()[:500]


def diagnose(log: str | list[str] | None) -> list[dict[str, object]]:
    """Return every known failure found in the log, most specific first.

    Each item: key, title, variables (role variables to change), advice, evidence (the log
    line that matched) and message (one sentence for a failure message).
    """
    if log is None:
        return []
    text = "\n".join(log) if isinstance(log, list) else str(log)
    found = []
    for failure, patterns in _COMPILED:
        for pattern in patterns:
            match = pattern.search(text)
            if match:
                found.append({
                    "key": failure.key,
                    "title": failure.title,
                    "variables": list(failure.variables),
                    "advice": failure.advice,
                    "evidence": _evidence_line(text, match.start()),
                    "message": f"{failure.title}: {failure.advice} (change: {', '.join(failure.variables)})",
                })
                break
    return found


def summarize(log: str | list[str] | None, tail: list[str] | None = None) -> str:
    """A failure message: the diagnoses (or that none matched) and the log tail."""
    found = diagnose(log)
    if found:
        lines = ["Diagnosis:"]
        for item in found:
            lines.append(f"- {item['title']} (log: {item['evidence']})")
            lines.append(f"  What to do: {item['advice']}")
            lines.append(f"  Variables: {', '.join(item['variables'])}")
    else:
        lines = ["Diagnosis: no known failure matched the log; read the last lines below."]
    if tail:
        lines.append(f"Last {len(tail)} log lines:")
        lines.extend(tail)
    return "\n".join(lines)
