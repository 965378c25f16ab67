# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's recipes: one YAML file per model recipe (roles/vllm/recipes/<name>.yml).

A recipe is data: the model (repository, revision, ModelScope id), the vLLM releases it is known
to work on, the role's settings and extra arguments, its environment, speculative decoding with
its draft model, the layout (boxes, tensor x pipeline parallel), the memory per box size, the
first-start budget and the decode rate its public source measured. `load` reads and checks one;
`for_box` sizes it to a box's memory. Errors say what was found, what was expected and where.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

RECIPE_DIR = Path(__file__).resolve().parents[2] / "roles" / "vllm" / "recipes"
GIB = 1024**3
# The two DGX Spark sizes. MemTotal of a 128 GB Spark reads ~121.7 GiB (the GB10 fixture's
# /proc/meminfo); anything from 96 GiB up is the large box, below it the 64 GB one.
BOX_SIZES = (128, 64)
LARGE_BOX_FROM_BYTES = 96 * GIB
# The path the draft model's directory is mounted at in the container (the weights are at /model).
DRAFT_MODEL_PATH = "/draft"

# The role's settings a recipe may give (vllm_<key>), with the types YAML gives them.
SETTINGS = {
    "served_model_name": str, "dtype": str, "quantization": str, "max_model_len": int,
    "gpu_memory_utilization": float, "max_num_seqs": int, "max_num_batched_tokens": int,
    "kv_cache_dtype": str, "enforce_eager": bool, "enable_prefix_caching": bool, "reasoning_parser": str,
    "tool_call_parser": str, "enable_auto_tool_choice": bool, "text_only": bool, "shm_size": str,
}
# Per box size, the settings a recipe sizes to the box's memory.
BOX_SETTINGS = ("gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens")
TOP_KEYS = {
    "name": str, "description": str, "model": dict, "releases": list, "settings": dict, "extra_args": list,
    "env": dict, "speculative": dict, "layout": dict, "memory": dict, "first_start_s": int,
    "performance": dict, "sources": list,
}
REQUIRED = ("name", "description", "model", "releases", "settings", "layout", "memory", "first_start_s",
            "performance", "sources")
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")

_cache: dict[str, dict[str, Any]] = {}


class RecipeError(ValueError):
    """A recipe that cannot be used, with what is wrong and where."""


def names() -> list[str]:
    """The recipes the collection ships."""
    return sorted(path.stem for path in RECIPE_DIR.glob("*.yml"))


def path_of(name_or_path: str) -> Path:
    """A shipped recipe's name, or the path of the user's own recipe file."""
    text = str(name_or_path or "").strip()
    if not text:
        raise RecipeError(f"vllm_recipe is empty; expected one of {', '.join(names())} or the path of a recipe file")
    if "/" in text or text.endswith((".yml", ".yaml")):
        path = Path(text).expanduser()
        if not path.is_file():
            raise RecipeError(f"vllm_recipe {text}: no such file on the controller; give a shipped recipe's name "
                              f"({', '.join(names())}) or an existing recipe file")
        return path
    path = RECIPE_DIR / f"{text}.yml"
    if not path.is_file():
        raise RecipeError(f"vllm_recipe {text!r} is not a recipe of this collection; known: {', '.join(names())} "
                          "(or give the path of your own recipe file, see roles/vllm/recipes/README.md)")
    return path


def load(name_or_path: str) -> dict[str, Any]:
    """The recipe, checked; read once per controller process."""
    path = path_of(name_or_path)
    key = str(path.resolve())
    if key not in _cache:
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise RecipeError(f"recipe {path}: not valid YAML: {exc}") from exc
        _cache[key] = check(data, str(path))
    return _cache[key]


def _type_errors(data: dict[str, Any], types: dict[str, type], where: str) -> list[str]:
    errors = []
    for key, value in data.items():
        want = types.get(key)
        if want is None:
            errors.append(f"{where}: unknown key {key!r}; expected among {', '.join(sorted(types))}")
        elif value is not None and not _is_a(value, want):
            errors.append(f"{where}.{key}: {type(value).__name__} {value!r}, expected {want.__name__}")
    return errors


def _is_a(value: Any, want: type) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def _model_errors(model: dict[str, Any], where: str) -> list[str]:
    types = {"repo": str, "revision": str, "modelscope": str, "quantization": str, "weights_gib": float,
             "architecture": str}
    errors = _type_errors(model, types, where)
    errors += [f"{where}.{key}: missing" for key in ("repo", "revision", "quantization", "weights_gib")
               if model.get(key) in (None, "")]
    return errors


def _speculative_errors(spec: dict[str, Any], where: str) -> list[str]:
    errors = _type_errors(spec, {"method": str, "num_speculative_tokens": int, "draft": dict, "config": dict},
                          f"{where}.speculative")
    if not spec.get("method"):
        errors.append(f"{where}.speculative.method: missing (e.g. mtp, eagle3, dflash)")
    if isinstance(spec.get("draft"), dict):
        errors += _model_errors({"quantization": "-", **spec["draft"]}, f"{where}.speculative.draft")
    return errors


def _memory_errors(memory: dict[str, Any], where: str) -> list[str]:
    errors = _type_errors(memory, {"activations_gib": float, "boxes": dict}, f"{where}.memory")
    boxes = memory.get("boxes") or {}
    if not boxes:
        errors.append(f"{where}.memory.boxes: missing; expected a sizing for 128 and/or 64 (GB boxes)")
    for size, sizing in boxes.items():
        if int(size) not in BOX_SIZES:
            errors.append(f"{where}.memory.boxes: {size} is not a DGX Spark size; expected {BOX_SIZES}")
            continue
        types = {key: SETTINGS[key] for key in BOX_SETTINGS} | {"kv_gib": float, "source": str}
        errors += _type_errors(sizing or {}, types, f"{where}.memory.boxes.{size}")
        if not (sizing or {}).get("gpu_memory_utilization"):
            errors.append(f"{where}.memory.boxes.{size}.gpu_memory_utilization: missing")
    return errors


def check(data: Any, where: str) -> dict[str, Any]:
    """The recipe as given, or RecipeError listing every mistake."""
    if not isinstance(data, dict):
        raise RecipeError(f"recipe {where}: a mapping expected, found {type(data).__name__}")
    errors = _type_errors(data, TOP_KEYS, where)
    errors += [f"{where}: {key} missing" for key in REQUIRED if key not in data]
    if isinstance(data.get("name"), str) and not NAME.match(data["name"]):
        errors.append(f"{where}.name: {data['name']!r}; expected lower-case letters, digits, '.', '_' and '-'")
    if isinstance(data.get("model"), dict):
        errors += _model_errors(data["model"], f"{where}.model")
    if isinstance(data.get("settings"), dict):
        errors += _type_errors(data["settings"], SETTINGS, f"{where}.settings")
    if isinstance(data.get("speculative"), dict):
        errors += _speculative_errors(data["speculative"], where)
    if isinstance(data.get("memory"), dict):
        errors += _memory_errors(data["memory"], where)
    if isinstance(data.get("layout"), dict):
        errors += _layout_errors(data["layout"], where)
    errors += [f"{where}.extra_args[{i}]: {arg!r}, expected text or a number"
               for i, arg in enumerate(data.get("extra_args") or []) if not isinstance(arg, (str, int, float))]
    if errors:
        raise RecipeError("recipe " + "; ".join(errors))
    return data


def _layout_errors(layout: dict[str, Any], where: str) -> list[str]:
    errors = _type_errors(layout, {"boxes": int, "tensor_parallel_size": int, "pipeline_parallel_size": int},
                          f"{where}.layout")
    boxes = layout.get("boxes", 1)
    product = layout.get("tensor_parallel_size", 1) * layout.get("pipeline_parallel_size", 1)
    if isinstance(boxes, int) and isinstance(product, int) and boxes != product:
        errors.append(f"{where}.layout: {boxes} boxes but tensor x pipeline parallel is {product}; one GB10 per box, "
                      "so they must be equal")
    return errors


def box_size(mem_total_bytes: int | float | str | None) -> int | None:
    """128 or 64: the DGX Spark size whose memory this is; None when the memory is not known."""
    try:
        total = int(float(mem_total_bytes or 0))
    except (TypeError, ValueError):
        raise RecipeError(f"the box's memory {mem_total_bytes!r} is not a number of bytes") from None
    if total <= 0:
        return None
    return 128 if total >= LARGE_BOX_FROM_BYTES else 64


def speculative_config(recipe: dict[str, Any]) -> dict[str, Any] | None:
    """vLLM's --speculative-config for the recipe, the draft model at its path in the container."""
    spec = recipe.get("speculative")
    if not spec:
        return None
    config: dict[str, Any] = {"method": spec["method"]}
    if spec.get("draft"):
        config["model"] = DRAFT_MODEL_PATH
    if spec.get("num_speculative_tokens") is not None:
        config["num_speculative_tokens"] = spec["num_speculative_tokens"]
    config.update(spec.get("config") or {})
    return config


def for_box(recipe: dict[str, Any], mem_total_bytes: int | float | str | None) -> dict[str, Any]:
    """The recipe's settings sized to the box: every role setting (vLLM's default where it says nothing),
    the box size, whether the recipe is sized for it, the speculative config and the draft model.

    A box size the recipe has no sizing for gets the largest sizing it has, marked
    sized_for_box false: the serving plan then refuses it with the figures of that sizing. Memory
    not known: the largest sizing, box_size and sized_for_box None.
    """
    size = box_size(mem_total_bytes)
    boxes = {int(key): value for key, value in recipe["memory"]["boxes"].items()}
    # Memory not known (no facts): the largest sizing, and the serving plan, which reads the box, decides.
    sized = None if size is None else size in boxes
    sizing = boxes[size] if sized else boxes[max(boxes)]
    # What the recipe leaves out is vLLM's default: empty text, off, and prefix caching left to vLLM (None).
    settings: dict[str, Any] = {key: "" if kind is str else False if kind is bool else None
                                for key, kind in SETTINGS.items()}
    settings["enable_prefix_caching"] = None
    settings.update(recipe["settings"])
    settings.update({key: sizing[key] for key in BOX_SETTINGS if sizing.get(key) is not None})
    draft = (recipe.get("speculative") or {}).get("draft") or {}
    spec = speculative_config(recipe)
    return {
        **settings,
        "box_size": size,
        "box_sizes": sorted(boxes, reverse=True),
        "sized_for_box": sized,
        "speculative_config": json.dumps(spec, separators=(",", ":")) if spec else "",
        "draft_model": draft.get("repo", ""),
        "draft_revision": draft.get("revision", ""),
        "draft_weights_bytes": int(float(draft.get("weights_gib", 0)) * GIB),
        "activations_bytes": int(float(recipe["memory"].get("activations_gib") or 0) * GIB),
    }


# The settings of `vllm serve`'s command line (plugins/plugin_utils/vllm_args.py), as the role's __vllm_settings
# (roles/vllm/vars/main.yml) makes them from a recipe's defaults when no variable overrides one.
SERVE_KEYS = ("served_model_name", "dtype", "quantization", "max_model_len", "gpu_memory_utilization", "max_num_seqs",
              "max_num_batched_tokens", "kv_cache_dtype", "enforce_eager", "enable_prefix_caching", "reasoning_parser",
              "tool_call_parser", "enable_auto_tool_choice", "text_only", "speculative_config")


def serve_settings(recipe: dict[str, Any], sized: dict[str, Any], port: int = 8000) -> dict[str, Any]:
    """The vllm_serve_args settings the role runs for a recipe sized to a box, with the role's own defaults."""
    settings = {key: sized[key] for key in SERVE_KEYS}
    settings["dtype"] = settings["dtype"] or "auto"
    settings["kv_cache_dtype"] = settings["kv_cache_dtype"] or "auto"
    return {"model_path": "/model", "host": "0.0.0.0", "port": port, **settings,
            "extra_args": list(recipe.get("extra_args") or [])}
