#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: serving_plan
short_description: Check vLLM settings against the box before serving a model
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Checks a vLLM serving plan (model, precision, memory budget, context length, KV cache,
    Docker shared memory, served name) against the box's memory and GPU, and returns
    errors and warnings for every known vLLM-on-DGX-Spark pitfall.
  - "Errors (the plan is refused): weights that leave too little unified memory (BF16
    Qwen3.5-35B on a 128 GB Spark), fp8 KV cache on a hybrid Mamba / linear-attention model
    when max_num_batched_tokens is below vLLM's aligned block size, missing or too small
    shm_size, gpu_memory_utilization above O(max_utilization) on unified memory,
    max_model_len above the KV-cache capacity or the model's maximum."
  - "Warnings: enforce_eager off on unified memory, NVFP4 checkpoints on GB10
    (U(https://github.com/vllm-project/vllm/issues/35519)), gpu_memory_utilization above
    O(warn_utilization) on unified memory, shm_size below the recommended 16g, no
    served_model_name, unknown weights size."
  - The KV-cache capacity of Qwen3.5-35B-A3B-FP8 on a 128 GB Spark comes from measurements
    with vLLM 0.19 on such a box (0.75 -> ~41K tokens, vLLM's own start-up figure; 0.80 -> ~45K,
    0.85 -> ~50K, 0.90 -> ~54K; interpolated between). For other models it is estimated from
    C(config.json) in O(model_path) and labelled as an estimate (RV(estimate), RV(capacity_source)).
options:
  model:
    description:
      - The model id (for example V(Qwen/Qwen3.5-35B-A3B-FP8)) or path vLLM is given.
    type: str
    required: true
  model_path:
    description:
      - Directory of the weights on the box. When it holds C(config.json) the architecture
        numbers come from there, and the C(*.safetensors) sizes give the weights size.
      - A directory that does not exist yet is fine; a file, or a C(config.json) that is not
        a JSON object with numbers where Hugging Face writes numbers, is an error naming the file.
    type: path
  quantization:
    description:
      - vLLM C(--quantization) (for example V(fp8), V(awq), V(modelopt_fp4)). Empty when the
        checkpoint says it.
    type: str
  dtype:
    description:
      - vLLM C(--dtype).
    type: str
    default: auto
  gpu_memory_utilization:
    description:
      - vLLM C(--gpu-memory-utilization).
    type: float
    default: 0.9
  max_model_len:
    description:
      - vLLM C(--max-model-len) in a form vLLM reads - a number of tokens, V(16k) (16000),
        V(16K) (16384) - or V(-1) / V(auto), with which vLLM fits the context to the KV cache.
        Unset means the model's maximum. V(0) and values below V(-1) are errors.
    type: raw
  max_num_seqs:
    description:
      - vLLM C(--max-num-seqs) (reported, not checked).
    type: int
  max_num_batched_tokens:
    description:
      - vLLM C(--max-num-batched-tokens). Unset means vLLM's default (2048, as its Mamba block-size assertion
        reports it).
    type: int
  kv_cache_dtype:
    description:
      - vLLM C(--kv-cache-dtype).
    type: str
    default: auto
  enforce_eager:
    description:
      - Whether vLLM runs with C(--enforce-eager).
    type: bool
    default: false
  enable_prefix_caching:
    description:
      - vLLM C(--enable-prefix-caching) (V(true)), C(--no-enable-prefix-caching) (V(false)) or neither (unset, the
        model's default).
      - On a hybrid model (Qwen3.5) V(true) puts vLLM 0.19.1 in Mamba cache align mode, where the aligned block size
        must not exceed O(max_num_batched_tokens); unset or V(false), vLLM 0.19.1 turns prefix caching off for it.
    type: bool
  shm_size:
    description:
      - Docker C(--shm-size) of the vLLM container, in Docker's form (V(16g), V(512m)).
        Empty means Docker's 64 MB default.
    type: str
  served_model_name:
    description:
      - vLLM C(--served-model-name); clients must send exactly this as C(model).
    type: str
  unified_memory:
    description:
      - Whether the GPU shares system memory (GB10). Taken from O(gpu_facts) when not given.
    type: bool
  mem_total_bytes:
    description:
      - Total memory (MemTotal) in bytes. Taken from O(gpu_facts), else read from O(meminfo_path).
    type: int
  weights_bytes:
    description:
      - Size of the weights in bytes, when known better than from O(model_path) or the built-in figures of a
        known model.
    type: int
  weight_shards:
    description:
      - How many GPUs share the weights (the tensor x pipeline parallel size of a cluster of Sparks, one GPU each).
        Each holds this share of them, which the memory rules count instead of the whole.
    type: int
    default: 1
  gpu_facts:
    description:
      - C(ansible_facts.sparkfleet_gpu) from M(sparkfleet.serving.gpu_facts), for GPU names,
        compute capabilities, unified memory and memory size.
    type: dict
  meminfo_path:
    description:
      - Where MemTotal is read when neither O(mem_total_bytes) nor O(gpu_facts) gives it.
    type: path
    default: /proc/meminfo
  recipe:
    description:
      - The vllm role's recipe sized to this box (C(sparkfleet.serving.vllm_recipe_for_box)), for the box's memory
        budget - C(recipe) (its name), C(box_size) (128 or 64, GB), C(box_sizes) (the sizes it is sized for),
        C(sized_for_box), C(draft_weights_bytes) (a speculative draft model's weights, in the same share as the
        main weights), C(activations_bytes) (its activations and CUDA graphs, kept out of the KV cache) and
        C(checkpoint_quantization) (what the recipe says its checkpoint is, until config.json is on the box).
      - With it, the plan refuses a recipe not sized for this box size, one that leaves nothing for the KV cache,
        and one whose share passes O(watchdog_steady_percent), printing the figures. Quantised weights are then
        sized by this budget rather than O(min_free_after_weights_bytes), which was measured with BF16 weights.
    type: dict
  release:
    description:
      - The vLLM release the image runs (the vllm role's C(vllm_release)), for the rules that differ by release
        (NVFP4 on the GB10 crashed before vLLM 0.28.0). Not given, those rules warn as for an unknown release.
    type: str
  watchdog_steady_percent:
    description:
      - The memory watchdog's steady threshold (percent of MemTotal) - vLLM's share plus what the OS keeps must
        stay below it, or the watchdog would stop the container. Not checked when not given.
    type: float
  min_free_after_weights_bytes:
    description:
      - Unified memory that must remain after the weights are loaded (BF16 or FP16 weights, or any weights
        without O(recipe)).
    type: int
    default: 68719476736
  warn_utilization:
    description:
      - On unified memory, a higher O(gpu_memory_utilization) is a warning.
    type: float
    default: 0.85
  max_utilization:
    description:
      - On unified memory, a higher O(gpu_memory_utilization) is an error.
    type: float
    default: 0.95
  min_shm_size:
    description:
      - Smaller O(shm_size) is an error.
    type: str
    default: 2g
  recommended_shm_size:
    description:
      - Smaller O(shm_size) is a warning.
    type: str
    default: 16g
  settings:
    description:
      - The vLLM settings as one dict, the one the P(sparkfleet.serving.vllm_serve_args#filter) filter builds the
        command line from (the vllm role passes the same dict to both, so that the plan checks what will run).
      - Its keys V(dtype), V(quantization), V(gpu_memory_utilization), V(max_model_len), V(max_num_seqs),
        V(max_num_batched_tokens), V(kv_cache_dtype), V(enforce_eager), V(enable_prefix_caching) (tri-state, as the
        filter reads it) and V(served_model_name) stand for the options of those names, which must not be given
        as well; its other keys are the command line's only (its V(model_path) is the path inside the container,
        not O(model_path)).
      - Its V(extra_args) (the words the command line ends with) are read for the flags the rules check
        (C(--kv-cache-dtype), C(--max-num-batched-tokens), C(--mamba-cache-mode), C(--[no-]enable-prefix-caching),
        C(--[no-]enforce-eager)), since vLLM keeps the last value of a flag and they come last.
    type: dict
seealso:
  - module: sparkfleet.serving.gpu_facts
  - name: NVFP4 on GB10 (vllm-project/vllm#35519)
    description: cudaErrorIllegalInstruction with NVFP4 kernels on GB10.
    link: https://github.com/vllm-project/vllm/issues/35519
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
  - sparkfleet.serving.checks.FAIL_ON_ERROR
  - sparkfleet.serving.checks.REPORT_WARNINGS
"""

EXAMPLES = r"""
- name: Check the known-good DGX Spark plan
  sparkfleet.serving.serving_plan:
    model: Qwen/Qwen3.5-35B-A3B-FP8
    model_path: /srv/models/Qwen3.5-35B-A3B-FP8
    gpu_memory_utilization: 0.75
    max_model_len: 16384
    max_num_seqs: 16
    max_num_batched_tokens: 16384
    enforce_eager: true
    shm_size: 16g
    served_model_name: qwen3.5-35b
    gpu_facts: "{{ ansible_facts['sparkfleet_gpu'] }}"

- name: Only report, do not fail
  sparkfleet.serving.serving_plan:
    model: Qwen/Qwen3.5-35B-A3B-FP8
    gpu_memory_utilization: 0.80
    max_model_len: 65536
    unified_memory: true
    mem_total_bytes: 130663677952
    shm_size: 16g
    fail_on_error: false
  register: plan
"""

RETURN = r"""
errors:
  description: Why the plan would fail on this box; each says what to change.
  returned: always
  type: list
  elements: str
  sample: ["max_model_len 65536 is above the KV-cache capacity of ~45000 tokens at gpu_memory_utilization 0.8 (...)"]
warnings_found:
  description: Risks the plan accepts (also emitted as Ansible warnings).
  returned: always
  type: list
  elements: str
  sample: ["gpu_memory_utilization 0.9 is above 0.85 on unified memory: ..."]
budget:
  description:
    - The box's memory with the figures of the plan - vLLM's share, the weights (and a draft model's), the
      activations, the KV cache, what is left besides vLLM, the watchdog's threshold. Null without weights or memory.
  returned: always
  type: str
  sample: "128 GB box, MemTotal 121.7 GiB: vLLM's share 91.3 GiB = weights 34.2 GiB + activations 4.0 GiB + ..."
budget_bytes:
  description:
    - RV(budget)'s figures in bytes - total (MemTotal), share (vLLM's), weights, draft, activations, kv (the KV
      cache), os (what the OS keeps). Empty without weights or memory. The admission of several deployments on
      one box adds up their shares.
  returned: always
  type: dict
  sample: {total: 130663100416, share: 97997325312, weights: 36743401472, draft: 0, activations: 4294967296,
           kv: 56959956544, os: 6442450944}
findings:
  description: Every error, warning and figure (severity info) with its rule id and severity.
  returned: always
  type: list
  elements: dict
  sample: [{severity: error, rule: shm_size_missing, message: "shm_size is not set: ..."}]
kv_capacity_tokens:
  description: KV-cache capacity in tokens at the given utilisation, or null when it cannot be told.
  returned: always
  type: int
  sample: 41072
estimate:
  description: Whether RV(kv_capacity_tokens) is an estimate rather than a measured figure.
  returned: always
  type: bool
  sample: false
capacity_source:
  description: Where RV(kv_capacity_tokens) comes from.
  returned: always
  type: str
  sample: "DGX Spark measurement (measured): Qwen3.5-35B-A3B-FP8 on a 128 GB DGX Spark, KV dtype auto"
capacity_confidence:
  description: high (measured on a DGX Spark), medium (extrapolated or estimated), low (estimate for a hybrid model),
    none.
  returned: always
  type: str
  sample: high
weights_bytes:
  description: Weights size used for the checks, or null.
  returned: always
  type: int
  sample: 36743401472
weights_source:
  description: Where RV(weights_bytes) comes from.
  returned: always
  type: str
  sample: known model
precision:
  description: Precision of the checkpoint's weights (fp8, nvfp4, int4, int8, bf16, fp16, fp32).
  returned: always
  type: str
  sample: fp8
hybrid:
  description: Whether the model mixes attention with state-space / linear-attention layers.
  returned: always
  type: bool
  sample: true
aligned_block_size:
  description: vLLM's block size for a hybrid model with this KV cache dtype, or null.
  returned: always
  type: int
  sample: 1056
box:
  description: >-
    The box facts the plan was checked against (unified_memory, mem_total_bytes, gpu_names,
    compute_caps, gpu_memory_total_bytes).
  returned: always
  type: dict
  sample: {unified_memory: true, mem_total_bytes: 130663677952, gpu_names: [NVIDIA GB10], compute_caps: ['12.1'],
           gpu_memory_total_bytes: null}
config_source:
  description: Where the architecture numbers come from (config.json, built-in, config.json + built-in, none).
  returned: always
  type: str
  sample: built-in
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.validation import check_type_bool, check_type_float, check_type_int, check_type_str

from ansible_collections.sparkfleet.serving.plugins.module_utils.inputs import (
    InputError,
    check_gpu_facts,
    check_range,
    load_config_json,
    meminfo_total,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.serving_plan import (
    check_plan,
    parse_size,
    with_extra_args,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_forms import vllm_length

SETTINGS = (
    "model",
    "model_path",
    "quantization",
    "dtype",
    "gpu_memory_utilization",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "enforce_eager",
    "enable_prefix_caching",
    "shm_size",
    "served_model_name",
    "weights_bytes",
    "weight_shards",
)


def read_model_dir(path: str | None) -> tuple[dict | None, int | None]:
    """config.json as a dict and the bytes of the safetensors files, when they are there.

    A model_path that does not exist yet is fine (the weights may come later); one that is
    a file, or a config.json that is not a model configuration, is an InputError.
    """
    if not path or not os.path.lexists(path):
        return None, None
    if not os.path.isdir(path):
        raise InputError(f"model_path {path} is not a directory; expected the directory of the weights (config.json)")
    config = load_config_json(os.path.join(path, "config.json"))
    total = 0
    try:
        for entry in os.scandir(path):
            if entry.name.endswith(".safetensors") and entry.is_file():
                total += entry.stat().st_size
    except OSError as err:
        raise InputError(f"model_path {path} cannot be listed ({err.strerror})") from None
    return config, total or None


def box_facts(module: AnsibleModule) -> dict:
    params = module.params
    gpu = params["gpu_facts"] or {}
    check_gpu_facts(gpu, "gpu_facts")
    memory = gpu.get("memory") or {}
    mem_total = params["mem_total_bytes"] or memory.get("total_bytes")
    if not mem_total:
        mem_total = meminfo_total(params["meminfo_path"])
    unified = params["unified_memory"] if params["unified_memory"] is not None else gpu.get("unified_memory")
    gpu_mib = [g.get("memory_total_mib") for g in gpu.get("gpus") or [] if g.get("memory_total_mib")]
    return {
        "unified_memory": unified,
        "mem_total_bytes": mem_total,
        "gpu_names": gpu.get("names") or [],
        "compute_caps": gpu.get("compute_caps") or [],
        "gpu_memory_total_bytes": min(gpu_mib) * 1024 * 1024 if gpu_mib else None,
    }


def check_options(params: dict) -> dict:
    """Options AnsibleModule cannot range-check; returns the thresholds for check_plan."""
    for option in ("mem_total_bytes", "weights_bytes", "weight_shards"):
        check_range(params[option], option, low=1)
    check_range(params["min_free_after_weights_bytes"], "min_free_after_weights_bytes", low=0)
    check_range(params["gpu_memory_utilization"], "gpu_memory_utilization")
    for option in ("warn_utilization", "max_utilization"):
        check_range(params[option], option, low=0, high=1)
    if params["warn_utilization"] > params["max_utilization"]:
        raise InputError(
            f"warn_utilization {params['warn_utilization']} is above max_utilization {params['max_utilization']}; "
            "expected the warning threshold at or below the error threshold"
        )
    thresholds = {
        "min_free_after_weights_bytes": params["min_free_after_weights_bytes"],
        "warn_utilization": params["warn_utilization"],
        "max_utilization": params["max_utilization"],
    }
    for option, key in (("min_shm_size", "min_shm_bytes"), ("recommended_shm_size", "recommended_shm_bytes")):
        try:
            thresholds[key] = parse_size(params[option])
        except ValueError as exc:
            raise InputError(f"{option}: {exc}") from None
    return thresholds


# The options a settings dict (the vllm_serve_args filter's input) stands for, and their types
# (converted as AnsibleModule converts the options).
CONVERT = {"str": check_type_str, "int": check_type_int, "float": check_type_float, "bool": check_type_bool}
FROM_SETTINGS = {
    "dtype": "str",
    "quantization": "str",
    "gpu_memory_utilization": "float",
    "max_model_len": "raw",
    "max_num_seqs": "int",
    "max_num_batched_tokens": "int",
    "kv_cache_dtype": "str",
    "enforce_eager": "bool",
    "enable_prefix_caching": "bool",
    "served_model_name": "str",
}


def with_settings(params: dict, spec: dict) -> dict:
    """The options, those of FROM_SETTINGS taken from the settings dict when there is one
    (a key it lacks, or leaves empty, has the option's default, as an option not given has)."""
    settings = params.get("settings")
    if settings is None:
        return params
    merged = dict(params)
    for name, kind in FROM_SETTINGS.items():
        value = settings.get(name)
        if value is None or value == "":
            merged[name] = spec[name].get("default")
            continue
        try:
            merged[name] = value if kind == "raw" else CONVERT[kind](value)
        except (TypeError, ValueError) as exc:
            raise InputError(f"settings.{name}: {exc}") from None
    return merged


# The keys of the recipe option (the vllm role's recipe sized to the box, sparkfleet.serving.vllm_recipe_for_box).
RECIPE_KEYS = ("recipe", "box_size", "box_sizes", "sized_for_box", "draft_weights_bytes", "activations_bytes",
               "checkpoint_quantization")


def recipe_budget(recipe: dict | None) -> dict:
    """The recipe's figures the box budget reads; an unknown key is a mistake, not ignored."""
    if not recipe:
        return {}
    unknown = sorted(set(recipe) - set(RECIPE_KEYS))
    if unknown:
        raise InputError(f"recipe: unknown key(s) {', '.join(unknown)}; expected among {', '.join(RECIPE_KEYS)}")
    for key in ("draft_weights_bytes", "activations_bytes", "box_size"):
        check_range(recipe.get(key), f"recipe.{key}", low=0)
    return {key: recipe.get(key) for key in RECIPE_KEYS}


def plan(module: AnsibleModule) -> tuple[dict, dict]:
    params = with_settings(module.params, module.argument_spec)
    thresholds = check_options(params)
    settings = {name: params[name] for name in SETTINGS}
    # What vllm_extra_args sets of the flags the rules read (a flag the settings leave unset).
    settings = with_extra_args(settings, (params.get("settings") or {}).get("extra_args"))
    settings["max_model_len"] = vllm_length(params["max_model_len"], "max_model_len")
    settings["model_config"], settings["weights_on_disk_bytes"] = read_model_dir(params["model_path"])
    settings.update(recipe_budget(params.get("recipe")))
    settings["release"] = params["release"]
    if params["watchdog_steady_percent"] is not None:
        thresholds["watchdog_steady_percent"] = params["watchdog_steady_percent"]
    facts = box_facts(module)
    return check_plan(settings, facts, thresholds), facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "model": {"type": "str", "required": True},
            "model_path": {"type": "path"},
            "quantization": {"type": "str"},
            "dtype": {"type": "str", "default": "auto"},
            "gpu_memory_utilization": {"type": "float", "default": 0.9},
            "max_model_len": {"type": "raw"},
            "max_num_seqs": {"type": "int"},
            # a count of tokens, not a secret
            "max_num_batched_tokens": {"type": "int", "no_log": False},
            "kv_cache_dtype": {"type": "str", "default": "auto"},
            "enforce_eager": {"type": "bool", "default": False},
            "enable_prefix_caching": {"type": "bool"},
            "shm_size": {"type": "str"},
            "served_model_name": {"type": "str"},
            "unified_memory": {"type": "bool"},
            "mem_total_bytes": {"type": "int"},
            "weights_bytes": {"type": "int"},
            "weight_shards": {"type": "int", "default": 1},
            "gpu_facts": {"type": "dict"},
            "meminfo_path": {"type": "path", "default": "/proc/meminfo"},
            "min_free_after_weights_bytes": {"type": "int", "default": 64 * 1024**3},
            "warn_utilization": {"type": "float", "default": 0.85},
            "max_utilization": {"type": "float", "default": 0.95},
            "min_shm_size": {"type": "str", "default": "2g"},
            "recommended_shm_size": {"type": "str", "default": "16g"},
            "report_warnings": {"type": "bool", "default": True},
            "fail_on_error": {"type": "bool", "default": True},
            "settings": {"type": "dict"},
            "recipe": {"type": "dict"},
            "release": {"type": "str"},
            "watchdog_steady_percent": {"type": "float"},
        },
        mutually_exclusive=[["settings", name] for name in FROM_SETTINGS],
        supports_check_mode=True,
    )
    params = module.params
    try:
        result, facts = plan(module)
    except InputError as exc:
        module.fail_json(msg=str(exc), changed=False)
    if facts["unified_memory"] is None:
        result["warnings"].append(
            "unified memory unknown (give unified_memory or gpu_facts): memory checks assume a discrete GPU"
        )
    for warning in result["warnings"] if module.params["report_warnings"] else []:
        module.warn(warning)
    output = {key: value for key, value in result.items() if key != "warnings"}
    output["warnings_found"] = result["warnings"]
    output["box"] = facts
    if result["errors"] and params["fail_on_error"]:
        lines = [f"serving plan for {params['model']} has {len(result['errors'])} error(s):"]
        lines += [f"  - {error}" for error in result["errors"]]
        module.fail_json(msg="\n".join(lines), changed=False, **output)
    module.exit_json(changed=False, **output)


if __name__ == "__main__":
    main()
