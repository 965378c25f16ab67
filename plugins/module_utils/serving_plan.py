# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a vLLM serving plan against the box before anything is installed.

Each rule is one pitfall of serving vLLM on a DGX Spark: it returns errors (vLLM would
refuse to start, crash or freeze the box) and warnings (it works but is risky). The
KV-cache capacity of the shipped Qwen3.5-35B-A3B-FP8 profile comes from measurements on a
128 GB Spark; for other models it is estimated from the model's config.json and labelled
as an estimate.
"""

from __future__ import annotations

import contextlib
import math
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.kv_capacity import (
    capacity,
    utilization_for,
    weights_size,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.model_architecture import (
    GIB,
    KNOWN_MODELS,
    aligned_block_size,
    is_hybrid,
    model_key,
    precision_of,
    text_config,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import nvfp4_crashes_on_gb10
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_forms import flag_name, flag_value, tri_state
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import RELEASES

# The one rule for the weights in unified memory: what must remain after loading them. On a
# 128 GB Spark the BF16 Qwen3.5-35B-A3B (64.69 GiB of weights) left ~56 GiB and ran out of
# memory while profiling; the FP8 checkpoint (34.22 GiB) left ~87 GiB and was stable.
MIN_FREE_AFTER_WEIGHTS_BYTES = 64 * GIB

NVFP4_ISSUE = "https://github.com/vllm-project/vllm/issues/35519"
# vLLM's max_num_batched_tokens when not set, as its own assertion reports it: "In Mamba
# cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)".
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
# max_model_len -1 (or "auto"): vLLM 0.19 derives the length from the model and fits it to the KV cache.
AUTO_MAX_MODEL_LEN = -1
# vLLM's --gpu-memory-utilization when not given (CacheConfig, vllm/config/cache.py).
DEFAULT_UTILIZATION = 0.9
# Choices of --dtype and --kv-cache-dtype in vLLM 0.19.1 (ModelDType in vllm/config/model.py,
# CacheDType in vllm/config/cache.py); vLLM refuses any other value.
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla")

# The flags of vLLM 0.19.1 whose values the rules read (vllm/engine/arg_utils.py, EngineArgs.add_cli_args),
# as extra arguments may give them where the role does not (the role refuses a flag it writes itself twice,
# roles/vllm/tasks/preflight.yml): a setting left unset, with the flag in vllm_extra_args. argparse keeps the
# last value, and the role puts the extra arguments last.
EXTRA_VALUED = {"--kv-cache-dtype": "kv_cache_dtype", "--max-num-batched-tokens": "max_num_batched_tokens",
                "--mamba-cache-mode": "mamba_cache_mode"}
EXTRA_SWITCHES = {"--enable-prefix-caching": ("enable_prefix_caching", True),
                  "--no-enable-prefix-caching": ("enable_prefix_caching", False),
                  "--enforce-eager": ("enforce_eager", True), "--no-enforce-eager": ("enforce_eager", False)}


def with_extra_args(settings: dict, extra_args: list | None) -> dict:
    """settings with what extra_args sets of EXTRA_VALUED and EXTRA_SWITCHES (--flag value, --flag=value;
    vLLM's parser reads underscores as dashes). A value it cannot read is left to vLLM to refuse."""
    result = dict(settings)
    words = list(extra_args or [])
    for index, word in enumerate(words):
        name = flag_name(word)
        if name in EXTRA_SWITCHES:
            key, state = EXTRA_SWITCHES[name]
            result[key] = state
        elif name in EXTRA_VALUED:
            key, value = EXTRA_VALUED[name], flag_value(words, index)
            if key != "max_num_batched_tokens":
                result[key] = value
                continue
            with contextlib.suppress(ValueError):
                result[key] = int(value)
    return result


DEFAULT_THRESHOLDS = {
    # Memory that must be left after the weights on unified memory.
    "min_free_after_weights_bytes": MIN_FREE_AFTER_WEIGHTS_BYTES,
    "warn_utilization": 0.85,
    "max_utilization": 0.95,
    # Docker's default /dev/shm is 64 MB, which breaks vLLM's inter-process queues.
    "min_shm_bytes": 2 * GIB,
    "recommended_shm_bytes": 16 * GIB,
    # Activations, CUDA context and allocator slack kept out of the KV estimate (a recipe gives its own).
    "activation_reserve_bytes": 4 * GIB,
    # The memory watchdog's steady threshold (percent of MemTotal; None: no watchdog to respect) and
    # what the OS, the Docker engine and the box's agents keep besides vLLM's share.
    "watchdog_steady_percent": None,
    "os_reserve_bytes": 6 * GIB,
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str | int | None) -> int | None:
    """Bytes of a Docker size such as "16g", "512m", "64MB" or 67108864; None when empty.

    Raises ValueError naming the text when it is not a size.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, int):
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (expected a number with an optional unit b, k, m, g, e.g. 16g)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def gib(value: float | None) -> str:
    return "unknown" if value is None else f"{value / GIB:.1f} GiB"


def memory_shortfall(mem_total_bytes: int, weights_bytes: int, headroom_bytes: int) -> int:
    """Bytes missing for the weights plus the headroom (KV cache, activations, OS); 0 when they fit."""
    return max(0, weights_bytes + headroom_bytes - mem_total_bytes)


def finding(severity: str, rule: str, message: str) -> dict:
    return {"severity": severity, "rule": rule, "message": message}


def rule_weights_fit(settings: dict, facts: dict, plan: dict) -> list[dict]:
    weights, memory = plan["weights_bytes"], facts.get("mem_total_bytes")
    if weights is None:
        return [
            finding(
                "warning",
                "weights_size_unknown",
                "weights size unknown: memory fit not checked; give weights_bytes or model_path with the "
                "safetensors files",
            )
        ]
    precision, known = plan["precision"], plan["known"] or {}
    better = (
        f" Use the FP8 checkpoint {known['fp8_variant']}."
        if known.get("fp8_variant")
        else " Use an FP8 checkpoint of the model."
    )
    sixteen_bit = precision in {"bf16", "fp16", "fp32"}
    if facts.get("unified_memory") and memory:
        left = memory - weights
        need = plan["thresholds"]["min_free_after_weights_bytes"]
        # Measured with BF16 weights; a quantised checkpoint's activations are smaller, and the box's
        # budget (rule_box_budget) sizes it: gpt-oss-120b's ~61 GiB of MXFP4 serve on a 128 GB Spark.
        if (sixteen_bit or not settings.get("box_size")) and memory_shortfall(memory, weights, need):
            what = f"{precision.upper()} weights" if sixteen_bit else "weights"
            return [
                finding(
                    "error",
                    "weights_leave_too_little_memory",
                    f"{what} of {gib(weights)} leave {gib(left)} of {gib(memory)} unified memory; at least {gib(need)} "
                    "must remain for activations, KV cache and the OS (a BF16 Qwen3.5-35B-A3B on a 128 GB Spark "
                    "had ~56 GiB left and ran out of memory while profiling)."
                    + (better if sixteen_bit else " Use a smaller or more quantised checkpoint."),
                )
            ]
        return []
    gpu_memory = facts.get("gpu_memory_total_bytes")
    if gpu_memory and weights >= plan["utilization"] * gpu_memory:
        return [
            finding(
                "error",
                "weights_exceed_gpu_memory",
                f"weights of {gib(weights)} do not fit in {plan['utilization']:.2f} x {gib(gpu_memory)} of GPU memory."
                + (better if sixteen_bit else ""),
            )
        ]
    return []


def rule_enforce_eager(settings: dict, facts: dict, plan: dict) -> list[dict]:
    if facts.get("unified_memory") and not settings.get("enforce_eager"):
        return [
            finding(
                "warning",
                "enforce_eager_missing",
                "enforce_eager is off on unified memory: torch.compile and CUDA-graph capture add a memory peak "
                "that can freeze the box (unified memory: there is no separate GPU memory to run out first, see "
                "https://github.com/NVIDIA/dgx-spark-playbooks/blob/main/nvidia/vllm/README.md); "
                "set enforce_eager: true",
            )
        ]
    return []


def rule_mamba_align_block_size(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """vLLM 0.19.1's block-size assertion, which only its Mamba "align" cache mode makes.

    A hybrid model's attention block is enlarged until one page holds the recurrent state (2096
    tokens for Qwen3.5 with an fp8 KV cache, 1056 with auto). Only with prefix caching switched on
    does vLLM 0.19.1 put such a model in the experimental "align" mode
    (vllm/model_executor/models/config.py:436-451) and assert block_size <= max_num_batched_tokens
    (vllm/config/vllm.py:1737-1743). Unset, prefix caching is off for hybrid models
    (vllm/config/model.py:1785-1790), and so is the assertion. A release without the assertion's text
    (vLLM 0.34.0: its sdist has no such message, vllm_releases.py) is not held to it; an unknown release is.
    """
    release = RELEASES.get(str(settings.get("release") or ""))
    if release is not None and "mamba-align-block-size" not in release["messages"]:
        return []
    mode = plan["mamba_cache_mode"]
    # The stand-in's reading of the same lines (tests/testbed/vllm-standin/vllm, check_vllm_config): an explicit
    # --mamba-cache-mode align selects the mode too, prefix caching does unless the mode is "all".
    if not plan["hybrid"] or not (mode == "align" or (plan["prefix_caching"] is True and mode != "all")):
        return []
    kv = plan["kv_cache_dtype"]
    block = aligned_block_size(plan["config"], kv)
    given = settings.get("max_num_batched_tokens")
    batched = DEFAULT_MAX_NUM_BATCHED_TOKENS if given is None else given
    shown = f"{DEFAULT_MAX_NUM_BATCHED_TOKENS} (vLLM default)" if given is None else given
    fp8 = kv.startswith("fp8")
    if block is None:
        if not fp8:
            return []
        return [
            finding(
                "warning",
                "mamba_align_unknown_block",
                f"kv_cache_dtype {kv} with prefix caching on a hybrid (attention + state-space) model: vLLM enlarges "
                "the block size to the recurrent state and refuses to start when it exceeds max_num_batched_tokens; "
                "the block size could not be computed from config.json. Prefer kv_cache_dtype auto.",
            )
        ]
    if batched >= block:
        return []
    fixes = [f"Set max_num_batched_tokens >= {block}", "leave enable_prefix_caching unset (null) or false"]
    if fp8:
        fixes = ["Use kv_cache_dtype auto", fixes[0][0].lower() + fixes[0][1:], fixes[1]]
    return [
        finding(
            "error",
            "mamba_align_block_size",
            f"enable_prefix_caching on a hybrid Mamba/linear-attention model puts vLLM in Mamba cache align mode, "
            f"and with kv_cache_dtype {kv} its aligned block size is {block}, above max_num_batched_tokens {shown}: "
            f'vLLM stops with "In Mamba cache align mode, block_size ({block}) must be <= max_num_batched_tokens". '
            f"{'; or '.join(fixes)}.",
        )
    ]


def rule_nvfp4_gb10(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """NVFP4 kernels crash on GB10 in vLLM before 0.28.0 only (vllm_diagnosis.NVFP4_GB10_WORKS_FROM says
    why later releases run them); settings' `release` is the image's vLLM, unknown (None) warns."""
    if plan["precision"] != "nvfp4" or not nvfp4_crashes_on_gb10(settings.get("release")):
        return []
    names = " ".join(facts.get("gpu_names") or []).lower()
    caps = facts.get("compute_caps") or []
    on_gb10 = "gb10" in names or "12.1" in caps or (not names and not caps and facts.get("unified_memory"))
    if not on_gb10:
        return []
    return [
        finding(
            "warning",
            "nvfp4_on_gb10",
            "NVFP4 checkpoint on GB10: the NVFP4 kernels of vLLM before 0.28.0 crash with cudaErrorIllegalInstruction "
            f"on this GPU ({NVFP4_ISSUE}); use the FP8 checkpoint, or an image of vLLM 0.28.0 or newer "
            "(vllm/vllm-openai:v0.34.0)",
        )
    ]


def rule_shm(settings: dict, facts: dict, plan: dict) -> list[dict]:
    try:
        shm = parse_size(settings.get("shm_size"))
    except ValueError as exc:
        return [finding("error", "shm_size_invalid", f"shm_size: {exc}")]
    low, good = plan["thresholds"]["min_shm_bytes"], plan["thresholds"]["recommended_shm_bytes"]
    if shm is None:
        return [
            finding(
                "error",
                "shm_size_missing",
                "shm_size is not set: Docker's default /dev/shm of 64 MB breaks vLLM's inter-process "
                f"communication; set shm_size to 16g (at least {gib(low)})",
            )
        ]
    if shm < low:
        return [
            finding(
                "error",
                "shm_size_too_small",
                f"shm_size {settings['shm_size']} ({gib(shm)}) is below the minimum of {gib(low)}: vLLM's "
                "inter-process communication fails; set shm_size to 16g",
            )
        ]
    if shm < good:
        return [
            finding(
                "warning",
                "shm_size_small",
                f"shm_size {settings['shm_size']} is below the recommended {gib(good)} "
                "(the shipped profile runs with 16g)",
            )
        ]
    return []


def rule_utilization(settings: dict, facts: dict, plan: dict) -> list[dict]:
    util = plan["utilization"]
    warn, stop = plan["thresholds"]["warn_utilization"], plan["thresholds"]["max_utilization"]
    if not 0 < util <= 1:
        return [
            finding("error", "utilization_out_of_range", f"gpu_memory_utilization {util} must be above 0 and at most 1")
        ]
    if not facts.get("unified_memory"):
        return []
    if util > stop:
        return [
            finding(
                "error",
                "utilization_too_high",
                f"gpu_memory_utilization {util} is above {stop} on unified memory: the OS and the Docker engine "
                f"share this memory and the box freezes; use {warn} or less",
            )
        ]
    if util > warn:
        return [
            finding(
                "warning",
                "utilization_high",
                f"gpu_memory_utilization {util} is above {warn} on unified memory: little is left for the OS "
                "(at 0.90 a 128 GB Spark keeps about 12 GiB for everything else); the memory watchdog may stop "
                "the container",
            )
        ]
    return []


def rule_context(settings: dict, facts: dict, plan: dict) -> list[dict]:
    cap = plan["capacity"]
    max_pos = plan["config"].get("max_position_embeddings")
    wanted = settings.get("max_model_len")
    findings = []
    if wanted is not None and wanted < AUTO_MAX_MODEL_LEN:
        return [
            finding(
                "error",
                "max_model_len_invalid",
                f"max_model_len {wanted}: vLLM refuses values below -1 (ModelConfig.max_model_len, ge=-1); give a "
                "number of tokens such as 16384, or -1 / auto to fit the context to the KV cache",
            )
        ]
    if wanted == 0:
        return [
            finding(
                "error",
                "max_model_len_zero",
                "max_model_len 0 leaves no room for a single token: every request would be refused; give a number "
                "of tokens such as 16384, or -1 / auto to fit the context to the KV cache",
            )
        ]
    if wanted == AUTO_MAX_MODEL_LEN:
        return rule_auto_context(cap.get("tokens"), max_pos)
    if wanted is None:
        wanted = max_pos
        if wanted:
            findings.append(
                finding(
                    "warning",
                    "max_model_len_unset",
                    f"max_model_len is not set: vLLM uses the model's maximum ({wanted} tokens)",
                )
            )
    elif max_pos and wanted > max_pos:
        findings.append(
            finding(
                "error",
                "max_model_len_above_model",
                f"max_model_len {wanted} is above the model's max_position_embeddings {max_pos}",
            )
        )
    tokens = cap.get("tokens")
    if tokens is None or not wanted or wanted <= tokens:
        return findings
    fits = 2 ** int(math.log2(tokens)) if tokens >= 1 else 0
    util = utilization_for(wanted, cap, plan)
    util_text = f"raise gpu_memory_utilization to {util}" if util else "no gpu_memory_utilization up to 0.95 holds it"
    if util and util > plan["thresholds"]["warn_utilization"] and facts.get("unified_memory"):
        util_text += " (above the unified-memory comfort limit)"
    message = (
        f"max_model_len {wanted} is above the KV-cache capacity of ~{tokens} tokens at gpu_memory_utilization "
        f"{plan['utilization']} ({cap['source']}); vLLM refuses to start. Set max_model_len <= {tokens} "
        f"(e.g. {fits}) or {util_text}."
    )
    severity = "warning" if cap.get("confidence") == "low" else "error"
    findings.append(finding(severity, "max_model_len_above_kv_capacity", message))
    return findings


def rule_auto_context(tokens: int | None, max_pos: int | None) -> list[dict]:
    """max_model_len -1 / auto: vLLM 0.19 fits the context to the KV cache (vllm/v1/core/kv_cache_utils.py)."""
    if tokens is not None and tokens < 1:
        return [
            finding(
                "error",
                "max_model_len_auto_no_memory",
                "max_model_len auto (-1): the KV cache has room for no token at this gpu_memory_utilization; vLLM "
                'stops with "Cannot auto-fit max_model_len". Raise gpu_memory_utilization or use a smaller checkpoint.',
            )
        ]
    if tokens is not None and max_pos and tokens < max_pos:
        return [
            finding(
                "warning",
                "max_model_len_auto_reduced",
                f"max_model_len auto (-1): vLLM shortens the context from the model's {max_pos} tokens to what the "
                f"KV cache holds (~{tokens} tokens); set max_model_len explicitly to know what clients get",
            )
        ]
    return []


def rule_memory_unknown(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """On unified memory the fit check needs the memory size: say so when it was skipped."""
    if not facts.get("unified_memory") or facts.get("mem_total_bytes") or plan["weights_bytes"] is None:
        return []
    precision = plan["precision"]
    risk = (
        f" {precision.upper()} weights are the case that ran out of memory on a 128 GB Spark."
        if precision in {"bf16", "fp16", "fp32"}
        else ""
    )
    return [
        finding(
            "warning",
            "memory_size_unknown",
            f"unified memory of unknown size: whether {gib(plan['weights_bytes'])} of weights leave enough memory was "
            f"not checked.{risk} Give mem_total_bytes or gpu_facts (or a readable meminfo_path).",
        )
    ]


def rule_vllm_limits(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """Values vLLM 0.19.1 refuses at start-up (pydantic bounds and choices of its config classes)."""
    findings = []
    for key, source in (
        ("max_num_seqs", "SchedulerConfig.max_num_seqs, ge=1"),
        ("max_num_batched_tokens", "SchedulerConfig.max_num_batched_tokens, ge=1"),
    ):
        value = settings.get(key)
        if value is not None and value < 1:
            message = f"{key} {value}: vLLM refuses values below 1 ({source})"
            findings.append(finding("error", f"{key}_invalid", message))
    seqs, batched = settings.get("max_num_seqs"), settings.get("max_num_batched_tokens")
    if seqs and batched and 1 <= batched < seqs:
        findings.append(
            finding(
                "error",
                "max_num_batched_tokens_below_max_num_seqs",
                f"max_num_batched_tokens {batched} is below max_num_seqs {seqs}: vLLM stops with "
                '"max_num_batched_tokens ... must be greater than or equal to max_num_seqs"',
            )
        )
    for key, choices in (("dtype", VLLM_DTYPES), ("kv_cache_dtype", VLLM_KV_CACHE_DTYPES)):
        value = settings.get(key)
        if value not in (None, "") and str(value).lower() not in choices:
            findings.append(
                finding(
                    "error",
                    f"{key}_invalid",
                    f"{key} {value!r} is not one vLLM accepts; choose one of {', '.join(choices)}",
                )
            )
    return findings


def rule_served_model_name(settings: dict, facts: dict, plan: dict) -> list[dict]:
    if settings.get("served_model_name"):
        return []
    return [
        finding(
            "warning",
            "served_model_name_missing",
            f'served_model_name is not set: clients must send "model": "{settings.get("model")}" exactly or the '
            "API answers 404; set a short served_model_name (e.g. qwen3.5-35b) and use it in clients",
        )
    ]


def _budget(settings: dict, facts: dict, plan: dict) -> dict:
    """vLLM's share of the box and what it holds: weights (and the draft's), activations, KV cache."""
    total = facts["mem_total_bytes"]
    share = plan["utilization"] * total
    draft = int(settings.get("draft_weights_bytes") or 0)
    activations = plan["thresholds"]["activation_reserve_bytes"]
    percent = plan["thresholds"].get("watchdog_steady_percent")
    return {
        "total": total, "share": share, "weights": plan["weights_bytes"] or 0, "draft": draft,
        "activations": activations, "kv": share - (plan["weights_bytes"] or 0) - draft - activations,
        "left": total - share, "watchdog": percent * total / 100 if percent else None, "percent": percent,
        "os": plan["thresholds"]["os_reserve_bytes"],
    }


def budget_bytes(settings: dict, facts: dict, plan: dict) -> dict:
    """The budget's figures in whole bytes, or {} where the rule has nothing to size."""
    if not (facts.get("mem_total_bytes") and plan["weights_bytes"]):
        return {}
    budget = _budget(settings, facts, plan)
    return {key: int(budget[key]) for key in ("total", "share", "weights", "draft", "activations", "kv", "os")}


def budget_table(budget: dict, settings: dict) -> str:
    """The figures of the box's memory, one line for the error and the report."""
    draft = f" + draft {gib(budget['draft'])}" if budget["draft"] else ""
    watchdog = (f"; the watchdog stops vLLM above {budget['percent']:g} % ({gib(budget['watchdog'])} used)"
                if budget["watchdog"] else "")
    return (f"{settings.get('box_size') or '?'} GB box, MemTotal {gib(budget['total'])}: vLLM's share "
            f"{gib(budget['share'])} = weights {gib(budget['weights'])}{draft} + activations "
            f"{gib(budget['activations'])} + KV cache {gib(budget['kv'])}; left besides vLLM {gib(budget['left'])} "
            f"(the OS and the engine need about {gib(budget['os'])}){watchdog}")


def rule_box_budget(settings: dict, facts: dict, plan: dict) -> list[dict]:
    """A recipe sized to the box: its KV cache is positive, vLLM's share plus the OS stays below the
    watchdog's steady threshold, and the recipe was sized for this box size at all."""
    if not (facts.get("unified_memory") and facts.get("mem_total_bytes") and plan["weights_bytes"]):
        return []
    budget = _budget(settings, facts, plan)
    table = budget_table(budget, settings)
    recipe = settings.get("recipe") or "these settings"
    problems = []
    if settings.get("box_size") and settings.get("sized_for_box") is False:
        sizes = " and ".join(f"{size} GB" for size in settings.get("box_sizes") or [])
        problems.append(f"recipe {recipe} is sized for {sizes} boxes, not this {settings['box_size']} GB one")
    if budget["kv"] <= 0:
        problems.append("nothing is left for the KV cache")
    if budget["watchdog"] and budget["share"] + budget["os"] > budget["watchdog"]:
        problems.append("vLLM's share and the OS pass the watchdog's steady threshold, which would stop it")
    if not problems:
        return [finding("info", "box_budget", table)]
    return [finding("error", "box_budget",
                    f"{'; '.join(problems)}: {table}. Pick a recipe sized for this box (roles/vllm/recipes/), "
                    "a smaller checkpoint, or a lower vllm_gpu_memory_utilization / vllm_max_model_len.")]


RULES = (
    rule_weights_fit,
    rule_box_budget,
    rule_enforce_eager,
    rule_mamba_align_block_size,
    rule_nvfp4_gb10,
    rule_shm,
    rule_utilization,
    rule_context,
    rule_served_model_name,
    rule_memory_unknown,
    rule_vllm_limits,
)


def check_plan(settings: dict, facts: dict, thresholds: dict | None = None) -> dict:
    """Errors and warnings of a vLLM serving plan on a box.

    settings: model, model_path, quantization, dtype, gpu_memory_utilization, max_model_len,
    max_num_seqs, max_num_batched_tokens, kv_cache_dtype, enforce_eager,
    enable_prefix_caching (true, false or None = the model's default), shm_size,
    served_model_name, weights_bytes, weight_shards (the GPUs that share the weights, 1 when
    not given), and from the module: model_config (config.json as a
    dict) and weights_on_disk_bytes.
    facts: unified_memory, mem_total_bytes, and optionally gpu_names, compute_caps,
    gpu_memory_total_bytes.
    """
    known = KNOWN_MODELS.get(model_key(settings.get("model"))) or KNOWN_MODELS.get(
        model_key(settings.get("model_path"))
    )
    on_disk = text_config(settings.get("model_config"))
    builtin = dict((known or {}).get("config") or {})
    # config.json is authoritative where it says something; for a known model the built-in
    # numbers fill what it leaves out (a trimmed config.json must not hide a known pitfall).
    config = {**builtin, **on_disk}
    sources = [name for name, present in (("config.json", on_disk), ("built-in", builtin)) if present]
    weights, weights_source = weights_size(settings, known)
    # A cluster's tensor x pipeline parallel size: each GPU (one per Spark) holds that share of the weights.
    shards = int(settings.get("weight_shards") or 1)
    if weights and shards > 1:
        weights, weights_source = -(-weights // shards), f"{weights_source}, 1/{shards} per GPU"
    utilization = settings.get("gpu_memory_utilization")
    thresholds = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    if settings.get("activations_bytes"):
        thresholds["activation_reserve_bytes"] = int(settings["activations_bytes"])
    plan = {
        "known": known,
        "config": config,
        "config_source": " + ".join(sources) or "none",
        "precision": precision_of(settings, config, known),
        "hybrid": is_hybrid(config),
        "kv_cache_dtype": (settings.get("kv_cache_dtype") or "auto").lower(),
        "prefix_caching": tri_state(settings.get("enable_prefix_caching"), "enable_prefix_caching"),
        "mamba_cache_mode": str(settings.get("mamba_cache_mode") or "none").lower(),
        # `or 0.9` would read an explicit 0 as vLLM's default; only an unset value is the default.
        "utilization": float(DEFAULT_UTILIZATION if utilization is None else utilization),
        "weights_bytes": weights,
        "thresholds": thresholds,
    }
    plan["capacity"] = capacity(settings, facts, plan)
    findings = [item for rule in RULES for item in rule(settings, facts, plan)]
    cap = plan["capacity"]
    return {
        "errors": [f["message"] for f in findings if f["severity"] == "error"],
        "warnings": [f["message"] for f in findings if f["severity"] == "warning"],
        "budget": next((f["message"] for f in findings if f["rule"] == "box_budget"), None),
        "findings": findings,
        "kv_capacity_tokens": cap.get("tokens"),
        "estimate": cap.get("estimate", True),
        "capacity_source": cap.get("source"),
        "capacity_confidence": cap.get("confidence"),
        "weights_bytes": weights,
        "weights_source": weights_source,
        "precision": plan["precision"],
        "hybrid": plan["hybrid"],
        "config_source": plan["config_source"],
        "aligned_block_size": aligned_block_size(config, plan["kv_cache_dtype"]) if plan["hybrid"] else None,
        # The same figures as numbers, for the admission of several deployments on one box (bytes; {} when the
        # box's memory or the weights are unknown).
        "budget_bytes": budget_bytes(settings, facts, plan),
    }
