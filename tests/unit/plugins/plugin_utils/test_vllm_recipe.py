# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The vllm role's recipes: each shipped one is valid, sized to both DGX Spark sizes as it claims,
refused with the figures where it does not fit, and the default serves exactly what it always did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.model_architecture import GIB
from ansible_collections.sparkfleet.serving.plugins.module_utils.serving_plan import check_plan
from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import DEFAULT, SUPPORTED
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_recipe
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_args import build_serve_args
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import check_serve_argv

# MemTotal of the GB10 fixture (128 GB box) and of a 64 GB box (half of it: no public /proc/meminfo of one).
BIG = 130663677952
SMALL = BIG // 2
WATCHDOG_STEADY_PERCENT = 90.0
NAMES = vllm_recipe.names()
SERVE_KEYS = vllm_recipe.SERVE_KEYS


def plan_on(name: str, mem_total: int) -> dict:
    recipe = vllm_recipe.load(name)
    sized = vllm_recipe.for_box(recipe, mem_total)
    shards = recipe["layout"]["tensor_parallel_size"] * recipe["layout"]["pipeline_parallel_size"]
    settings = {
        "model": recipe["model"]["repo"], **{k: sized[k] for k in SERVE_KEYS if k != "speculative_config"},
        "shm_size": sized["shm_size"], "weights_bytes": int(recipe["model"]["weights_gib"] * GIB),
        "weight_shards": shards, "recipe": name, "box_size": sized["box_size"], "box_sizes": sized["box_sizes"],
        "sized_for_box": sized["sized_for_box"], "draft_weights_bytes": sized["draft_weights_bytes"],
        "activations_bytes": sized["activations_bytes"], "checkpoint_quantization": recipe["model"]["quantization"],
    }
    facts = {"unified_memory": True, "mem_total_bytes": mem_total, "gpu_names": ["NVIDIA GB10"],
             "compute_caps": ["12.1"]}
    return check_plan(settings, facts, {"watchdog_steady_percent": WATCHDOG_STEADY_PERCENT})


def test_the_collection_ships_the_recipes_its_readme_names() -> None:
    readme = (vllm_recipe.RECIPE_DIR / "README.md").read_text(encoding="utf-8")
    assert len(NAMES) >= 7
    for name in NAMES:
        assert f"`{name}`" in readme, f"roles/vllm/recipes/README.md does not list {name}"


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_recipe_is_valid_and_named_after_its_file(name: str) -> None:
    recipe = vllm_recipe.load(name)
    assert recipe["name"] == name
    assert recipe["releases"], f"{name}: no vLLM release it is known to work on"
    assert recipe["performance"]["source"]
    assert recipe["first_start_s"] >= 600


def test_the_default_recipe_serves_exactly_what_the_role_always_served() -> None:
    """The argv of the profile the role shipped before recipes (qwen3.5-35b-a3b-fp8 on a 128 GB box)."""
    recipe = vllm_recipe.load("qwen3.5-35b-a3b-fp8")
    argv = build_serve_args(vllm_recipe.serve_settings(recipe, vllm_recipe.for_box(recipe, BIG)))
    assert argv == [
        "/model", "--served-model-name", "qwen3.5-35b", "--host", "0.0.0.0", "--port", "8000", "--dtype", "auto",
        "--max-model-len", "16384", "--gpu-memory-utilization", "0.75", "--max-num-seqs", "16",
        "--max-num-batched-tokens", "16384", "--enforce-eager", "--enable-prefix-caching", "--reasoning-parser",
        "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", "--limit-mm-per-prompt",
        '{"image":0,"video":0}',
    ]
    assert recipe["env"] == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                             "TORCHINDUCTOR_COMPILE_THREADS": "1"}


def test_speculative_decoding_points_vllm_at_the_mounted_draft_model() -> None:
    sized = vllm_recipe.for_box(vllm_recipe.load("gpt-oss-120b-eagle3"), BIG)
    assert json.loads(sized["speculative_config"]) == {
        "method": "eagle3", "model": vllm_recipe.DRAFT_MODEL_PATH, "num_speculative_tokens": 7,
        "draft_tensor_parallel_size": 1}
    assert sized["draft_model"] == "nvidia/gpt-oss-120b-Eagle3-v3"
    assert sized["draft_weights_bytes"] == 2 * GIB
    # MTP uses the checkpoint's own head: no draft model, no model key.
    mtp = vllm_recipe.for_box(vllm_recipe.load("nemotron-3-super-120b-a12b-nvfp4"), BIG)
    assert json.loads(mtp["speculative_config"]) == {"method": "mtp", "num_speculative_tokens": 3}
    assert mtp["draft_model"] == ""


def test_a_draft_model_takes_its_memory_from_the_kv_cache() -> None:
    with_draft = plan_on("gpt-oss-120b-eagle3", BIG)
    recipe = vllm_recipe.load("gpt-oss-120b")
    without = plan_on("gpt-oss-120b", BIG)
    assert "draft 2.0 GiB" in with_draft["budget"]
    assert "draft" not in without["budget"]
    assert recipe["memory"]["activations_gib"] == 6


@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_fits_a_128_gb_box_with_its_figures(name: str) -> None:
    result = plan_on(name, BIG)
    assert result["errors"] == [], result["errors"]
    assert result["budget"].startswith("128 GB box")
    assert "KV cache" in result["budget"]


@pytest.mark.parametrize("name", NAMES)
def test_a_64_gb_box_runs_only_the_recipes_sized_for_it(name: str) -> None:
    recipe = vllm_recipe.load(name)
    result = plan_on(name, SMALL)
    if "64" in {str(size) for size in recipe["memory"]["boxes"]}:
        assert result["errors"] == [], result["errors"]
        assert result["budget"].startswith("64 GB box")
        return
    errors = [e for e in result["errors"] if "box" in e and "KV cache" in e]
    assert errors, result["errors"]
    # The figures: weights, activations, KV cache, what is left, the watchdog's threshold.
    for figure in ("weights", "activations", "KV cache", "left besides vLLM", "the watchdog stops vLLM above 90 %"):
        assert figure in errors[0]
    assert "not this 64 GB one" in errors[0]


def test_at_least_one_recipe_is_sized_for_a_64_gb_box_and_one_spans_two_boxes() -> None:
    recipes = [vllm_recipe.load(name) for name in NAMES]
    assert any("64" in {str(k) for k in r["memory"]["boxes"]} for r in recipes)
    assert any(r["layout"]["boxes"] == 2 and r["layout"]["tensor_parallel_size"] == 2 for r in recipes)
    assert any((r.get("speculative") or {}).get("draft") for r in recipes)


def test_a_share_past_the_watchdog_threshold_is_refused_with_the_figures() -> None:
    recipe = vllm_recipe.load("qwen3.5-35b-a3b-fp8")
    sized = vllm_recipe.for_box(recipe, BIG)
    settings = {"model": recipe["model"]["repo"], **{k: sized[k] for k in SERVE_KEYS if k != "speculative_config"},
                "gpu_memory_utilization": 0.9, "weights_bytes": int(34.22 * GIB), "recipe": "x", "box_size": 128,
                "box_sizes": [128], "sized_for_box": True, "activations_bytes": 4 * GIB}
    result = check_plan(settings, {"unified_memory": True, "mem_total_bytes": BIG}, {"watchdog_steady_percent": 90})
    refused = [e for e in result["errors"] if "watchdog's steady threshold" in e]
    assert refused and "vLLM's share 109.5 GiB" in refused[0]


def test_memory_not_known_takes_the_largest_sizing_and_leaves_the_decision_to_the_plan() -> None:
    sized = vllm_recipe.for_box(vllm_recipe.load("qwen3.8-27b-nvfp4"), 0)
    assert (sized["box_size"], sized["sized_for_box"], sized["max_model_len"]) == (None, None, 262144)


@pytest.mark.parametrize(("change", "message"), [
    ({"colour": "red"}, "unknown key 'colour'"),
    ({"layout": {"boxes": 2, "tensor_parallel_size": 1}}, "2 boxes but tensor x pipeline parallel is 1"),
    ({"memory": {"boxes": {"96": {"gpu_memory_utilization": 0.5}}}}, "96 is not a DGX Spark size"),
    ({"settings": {"max_model_len": "long"}}, "settings.max_model_len: str 'long', expected int"),
    ({"speculative": {"num_speculative_tokens": 3}}, "speculative.method: missing"),
    ({"name": "Has Spaces"}, "expected lower-case letters"),
])
def test_a_broken_recipe_is_refused_saying_what_and_where(change: dict, message: str) -> None:
    recipe = {**vllm_recipe.load("qwen3.5-35b-a3b-fp8"), **change}
    with pytest.raises(vllm_recipe.RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        vllm_recipe.check(recipe, "my.yml")


def test_a_recipe_of_ones_own_is_read_from_its_path(tmp_path: Path) -> None:
    source = (vllm_recipe.RECIPE_DIR / "qwen3.8-27b-nvfp4.yml").read_text(encoding="utf-8")
    mine = tmp_path / "mine.yml"
    mine.write_text(source.replace("name: qwen3.8-27b-nvfp4", "name: mine"), encoding="utf-8")
    assert vllm_recipe.load(str(mine))["name"] == "mine"
    with pytest.raises(vllm_recipe.RecipeError, match="not a recipe of this collection; known: "):
        vllm_recipe.load("no-such-recipe")
    with pytest.raises(vllm_recipe.RecipeError, match="no such file on the controller"):
        vllm_recipe.load(str(tmp_path / "absent.yml"))


def recipe_argv(name: str, mem_total: int = BIG) -> list[str]:
    recipe = vllm_recipe.load(name)
    return build_serve_args(vllm_recipe.serve_settings(recipe, vllm_recipe.for_box(recipe, mem_total)))


@pytest.mark.parametrize("name", NAMES)
def test_every_recipe_is_accepted_by_the_parser_of_each_release_it_names(name: str) -> None:
    """The command line each recipe makes, through the option table and registries generated from the release's
    sdist (vllm_releases.py): the release's own argparse rules and the names it looks up at start-up."""
    recipe = vllm_recipe.load(name)
    for release in recipe["releases"]:
        assert release in SUPPORTED, f"{name}: release {release} has no tables (supported: {SUPPORTED})"
        assert check_serve_argv(release, recipe_argv(name)) == [], release


def test_the_default_recipe_keeps_its_command_line_on_the_newest_release() -> None:
    """No flag of the default recipe was renamed or dropped between 0.19.1 and the default release."""
    argv = recipe_argv("qwen3.5-35b-a3b-fp8")
    assert check_serve_argv("0.19.1", argv) == []
    assert check_serve_argv(DEFAULT, argv) == []


def test_a_recipe_flag_the_release_lacks_is_refused_naming_the_release() -> None:
    argv = [*recipe_argv("qwen3.8-27b-nvfp4"), "--speculative-config", '{"method": "dspark", "model": "/draft"}']
    errors = check_serve_argv("0.19.1", argv)
    assert errors and "vLLM 0.19.1" in errors[0] and "dspark" in errors[0]


@pytest.mark.parametrize(("release", "refused"), [("0.19.1", True), ("0.34.0", False), (None, True)])
def test_the_mamba_align_block_size_is_held_only_to_the_releases_that_assert_it(
        release: str | None, refused: bool) -> None:
    """Qwen3.5 with prefix caching and an fp8 KV cache: block 2096 above 2048 batched tokens. vLLM 0.19.1 asserts
    it at start-up; 0.34.0's sdist has no such assertion; an unknown release is held to the stricter rule."""
    settings = {"model": "Qwen/Qwen3.5-35B-A3B-FP8", "kv_cache_dtype": "fp8", "enable_prefix_caching": True,
                "max_num_batched_tokens": 2048, "gpu_memory_utilization": 0.75, "max_model_len": 16384,
                "enforce_eager": True, "served_model_name": "q", "shm_size": "16g", "release": release}
    result = check_plan(settings, {"unified_memory": True, "mem_total_bytes": BIG})
    assert any("Mamba cache align mode" in e for e in result["errors"]) is refused
