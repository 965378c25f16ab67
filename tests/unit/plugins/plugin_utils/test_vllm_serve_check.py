# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""check_serve_argv against each release's own parser: hand-picked lines, and every command line
whose outcome generate.py recorded by running that release's parser (releases/<version>/vllm_serve.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import DEFAULT, RELEASES, SUPPORTED
from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_serve_check
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import (
    check_serve_argv,
    release_from_image,
    release_from_label,
)

OLD, NEW = "0.19.1", "0.34.0"
M = "/model"
STANDIN = Path(__file__).resolve().parents[3] / "testbed" / "vllm-standin" / "releases"


def test_the_supported_releases():
    assert (SUPPORTED, DEFAULT) == ((OLD, NEW), NEW)


@pytest.mark.parametrize("release", SUPPORTED)
def test_the_roles_stable_command_line_passes(release: str):
    argv = [M, "--served-model-name", "qwen3.5-35b", "--host", "0.0.0.0", "--port", "8000", "--dtype", "auto",
            "--max-model-len", "16384", "--gpu-memory-utilization", "0.75", "--max-num-seqs", "16",
            "--max-num-batched-tokens", "16384", "--enforce-eager", "--enable-prefix-caching", "--reasoning-parser",
            "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder", "--limit-mm-per-prompt",
            '{"image":0,"video":0}']
    assert check_serve_argv(release, argv) == []


def test_an_option_of_a_newer_release_names_the_release_and_what_to_do():
    errors = check_serve_argv(OLD, [M, "--linear-backend", "auto"])
    assert errors == [
        "vLLM 0.19.1 has no option --linear-backend (did you mean --moe-backend?) (its `vllm serve` options: "
        "vllm/engine/arg_utils.py); remove it or pin a release that has it"]
    assert check_serve_argv(NEW, [M, "--linear-backend", "auto"]) == []


def test_0_34_pairs_enable_with_disable_and_0_19_does_not():
    assert check_serve_argv(NEW, [M, "--disable-prefix-caching"]) == []
    assert "has no option --disable-prefix-caching" in check_serve_argv(OLD, [M, "--disable-prefix-caching"])[0]
    assert check_serve_argv(OLD, [M, "--no-enable-prefix-caching"]) == []


@pytest.mark.parametrize("release", SUPPORTED)
def test_a_unique_prefix_is_the_option_and_an_ambiguous_one_is_refused(release: str):
    assert check_serve_argv(release, [M, "--max-model", "4096"]) == []
    assert check_serve_argv(release, [M, "--max-model=4096", "--enable-prefix", "--max-num-seq", "8"]) == []
    errors = check_serve_argv(release, [M, "--max-num", "4"])
    assert len(errors) == 1 and f"vLLM {release}: --max-num is ambiguous" in errors[0]
    assert "--max-num-seqs" in errors[0] and "--max-num-batched-tokens" in errors[0]


def test_without_allow_abbrev_a_prefix_is_an_unknown_option(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(vllm_serve_check.RELEASES, "9.9.9", dict(RELEASES[NEW], allow_abbrev=False))
    assert "vLLM 9.9.9 has no option --max-model " in check_serve_argv("9.9.9", [M, "--max-model", "4096"])[0]


@pytest.mark.parametrize(("argv", "expected"), [
    ([M, "--enable-prefix-caching=yes"], "--enable-prefix-caching takes no value"),
    ([M, "--max-model-len"], "--max-model-len needs a value"),
    ([M, "--dtype", "fp7"], "--dtype 'fp7' is not one of its choices"),
    ([M, "--moe-backend", "no_such_backend"], "--moe-backend 'no_such_backend' is not one of its choices"),
    ([M, "extra-positional"], "it would refuse extra-positional"),
    (["--served-model-name", "x", M], "the model must be the first argument"),
    ([M, "--quantization", "nvfp8"], "has no quantization method 'nvfp8'; did you mean"),
    ([M, "-q", "nvfp8"], "has no quantization method 'nvfp8'"),
    ([M, "--enable-auto-tool-choice", "--tool-call-parser", "qwen4"], "has no tool-call parser 'qwen4'"),
    ([M, "--reasoning-parser", "qwen4"], "has no reasoning parser 'qwen4'"),
    ([M, "--structured-outputs-config.reasoning_parser", "gpt_oss"], "has no reasoning parser 'gpt_oss'"),
    ([M, "--structured-outputs-config", '{"reasoning_parser": "qwen4"}'], "has no reasoning parser 'qwen4'"),
    ([M, "--load-format", "tensorstore"], "has no load format 'tensorstore'"),
    ([M, "--attention-backend", "flashattention"], "has no attention backend 'flashattention'"),
    ([M, "-ac.backend", "flash-attn"], "has no attention backend 'flash-attn'"),
    ([M, "-ac", '{"backend": "sdpa"}'], "has no attention backend 'sdpa'"),
    ([M, "-cc", '{"mode": 4}'], "has no compilation mode 4 (the \"mode\" of --compilation-config"),
    ([M, "-cc.mode", "fast"], "has no compilation mode 'fast'"),
    ([M, "-cc", '{"mode": "3"}'], "has no compilation mode '3'"),
    ([M, "--speculative-config", '{"method": "eagle4", "num_speculative_tokens": 2}'],
     "has no speculative method (the \"method\" of --speculative-config) 'eagle4'; did you mean eagle"),
    ([M, "--max-num-seqs", "16.5"], "--max-num-seqs takes an integer, not '16.5'"),
    ([M, "--max-model-len", "1.5K"], "--max-model-len takes an integer (8192, 8k, 8K), -1 or auto, not '1.5K'"),
    ([M, "--gpu-memory-utilization=most"], "--gpu-memory-utilization takes a number, not 'most'"),
    ([M, "--limit-mm-per-prompt", "{image:0}"], "--limit-mm-per-prompt takes JSON, not '{image:0}'"),
])
@pytest.mark.parametrize("release", SUPPORTED)
def test_refused_with_the_release_named(release: str, argv: list[str], expected: str):
    errors = check_serve_argv(release, argv)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"vLLM {release}") and expected in errors[0], errors


@pytest.mark.parametrize("release", SUPPORTED)
@pytest.mark.parametrize("argv", [
    [M, "--max_model_len", "16384"],
    ["--model", M, "--port", "8001"],
    ["--model=" + M],
    [M, "-O3"], [M, "-O", "2"], [M, "-cc.mode", "3"], [M, "--limit-mm-per-prompt.image", "0"],
    [M, "--max-model-len", "-1"], [M, "--max-model-len", "auto"], [M, "--max-model-len", "25.6k"],
    [M, "--max-model-len", "32K"], [M, "--max-num-seqs", " 16 "], [M, "--gpu-memory-utilization", "7.5e-1"],
    [M, "--api-key", "a", "--served-model-name", "a", "b"],
    [M, "--attention-backend", "flash_attn"], [M, "--attention-backend", "auto"], [M, "-ac.backend", "FLASH_ATTN"],
    [M, "--moe-backend", "FLASHINFER-CUTLASS"], [M, "-q", "fp8"], [M, "--load-format", "safetensors"],
    [M, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
    [M, "--reasoning-parser", ""],
])
def test_what_the_parser_rewrites_or_takes_passes(release: str, argv: list[str]):
    assert check_serve_argv(release, argv) == []


def test_none_unsets_the_reasoning_parser_from_0_34_only():
    assert check_serve_argv(NEW, [M, "--reasoning-parser", "None"]) == []
    assert "has no reasoning parser 'None'" in check_serve_argv(OLD, [M, "--reasoning-parser", "None"])[0]


def test_kv_cache_dtype_is_a_choice_in_0_19_and_a_config_name_in_0_34():
    assert "is not one of its choices" in check_serve_argv(OLD, [M, "--kv-cache-dtype", "nvfp4"])[0]
    assert check_serve_argv(NEW, [M, "--kv-cache-dtype", "nvfp4"]) == []
    assert "has no KV-cache dtype 'int4'" in check_serve_argv(NEW, [M, "--kv-cache-dtype", "int4"])[0]


def test_an_unknown_release_lists_the_supported_ones():
    assert check_serve_argv("0.20.0", [M]) == [
        "vLLM release '0.20.0' is not supported here: the collection has the `vllm serve` options of 0.19.1, "
        "0.34.0; pin one of them (vllm_releases.SUPPORTED)"]


@pytest.mark.parametrize(("ref", "release"), [
    ("vllm/vllm-openai:v0.34.0", "0.34.0"),
    ("vllm/vllm-openai:v0.19.1-cu130", "0.19.1"),
    ("vllm/vllm-openai:v0.34.0-aarch64", "0.34.0"),
    ("docker.io/vllm/vllm-openai:v0.34.0-cu130-aarch64", "0.34.0"),
    ("registry.example:5000/vllm/vllm-openai:v0.34.0@sha256:" + "a" * 64, "0.34.0"),
    ("sparkfleet-sim/vllm-openai:v0.19.1-cu130", "0.19.1"),
    ("vllm/vllm-openai@sha256:" + "a" * 64, None),
    ("vllm/vllm-openai", None),
    ("vllm/vllm-openai:latest", None),
    ("vllm/vllm-openai:nightly-aarch64", None),
    ("vllm/vllm-openai:cu130-nightly-aarch64", None),
    ("vllm/vllm-openai:v0.34.0rc1", None),
    ("nvcr.io/nvidia/vllm:26.01-py3", None),
    ("registry.example:5000/vllm-openai", None),
])
def test_release_from_image(ref: str, release: str | None):
    assert release_from_image(ref) == release


def test_release_from_label():
    # vLLM 0.34.0's docker/Dockerfile: LABEL ai.vllm.image.tag="${VLLM_IMAGE_TAG}", the public tag
    # (.buildkite/scripts/docker-build-metadata-args.sh: ${image_name}:v${release_version}${variant_suffix}).
    assert release_from_label("vllm/vllm-openai:v0.34.0") == "0.34.0"
    assert release_from_label("vllm/vllm-openai:v0.34.0-aarch64") == "0.34.0"
    assert release_from_label("local/vllm-openai:dev") is None
    assert release_from_label("vllm/vllm-openai:nightly-0123456789abcdef") is None
    assert release_from_label("") is None


# --- the same command lines, refused by both: the release's own parser (generate.py) and the check ----
# What argparse refuses by option name, count, choice or value type (16384.0 for an int), and what start-up
# refuses by a registry name, the check refuses too; what the release takes, the check takes. Start-up checks
# of other kinds (memory, parallel layout) are not the check's.
NAME_REFUSALS = ("unrecognized arguments", "ambiguous option", "invalid choice", "expected one argument",
                 "ignored explicit argument", "invalid tool call parser", "invalid reasoning parser",
                 "Reasoning parser '", "Unknown quantization method", "Load format `", "Unknown attention backend",
                 "Invalid kv_cache_dtype", "should be provided as the first positional argument",
                 "Invalid compilation mode", "[type=enum, ", "invalid int value", "invalid float value",
                 "cannot be converted to", "Decimals are not allowed", "invalid human_readable_int")
# Names vLLM takes while it does not use them: --tool-call-parser without --enable-auto-tool-choice is
# never looked up; the check still refuses a name the release does not have.
STRICTER = {(M, "--tool-call-parser", "no_such_parser")}


def cases(release: str) -> list[dict]:
    return json.loads((STANDIN / release / "vllm_serve.json").read_text(encoding="utf-8"))["cases"]


@pytest.mark.parametrize("release", SUPPORTED)
def test_every_recorded_case_fares_in_the_check_as_under_the_releases_parser(release: str):
    for case in cases(release):
        errors = check_serve_argv(release, case["argv"])
        text = f"{case.get('error') or ''}\n{case.get('detail') or ''}"
        if case["stage"] == "accepted":
            if tuple(case["argv"]) in STRICTER:
                assert errors and "has no tool-call parser" in errors[0], case
            else:
                assert errors == [], (case, errors)
        elif any(words in text for words in NAME_REFUSALS):
            assert errors, case
            assert all(error.startswith(f"vLLM {release}") for error in errors), errors


@pytest.mark.parametrize("release", SUPPORTED)
def test_the_cross_check_has_cases_of_each_kind(release: str):
    """The comparison above would pass vacuously without refused and accepted cases of each kind."""
    recorded = cases(release)
    refused = [c for c in recorded if any(w in f"{c['error']}\n{c.get('detail', '')}" for w in NAME_REFUSALS)]
    assert len(refused) >= 20 and len([c for c in recorded if c["stage"] == "accepted"]) >= 40
    kinds = {w for c in refused for w in NAME_REFUSALS if w in f"{c['error']}\n{c.get('detail', '')}"}
    assert {"unrecognized arguments", "ambiguous option", "invalid choice", "Unknown quantization method",
            "Load format `", "Unknown attention backend", "Invalid compilation mode", "[type=enum, "} <= kinds


@pytest.mark.parametrize("release", SUPPORTED)
@pytest.mark.parametrize(("words", "dests"), [
    (["--max_model", "4096"], ["max_model_len"]),
    (["--quantization=fp8", "-q", "fp8"], ["quantization", "quantization"]),
    (["--no-enable-prefix-caching", "--enable-prefix-caching"], ["enable_prefix_caching", "enable_prefix_caching"]),
    (["--max", "4096", "--no-such-flag"], []),
    (["--seed", "-1"], ["seed"]),
])
def test_options_given_resolve_each_spelling_to_the_setting_it_sets(release: str, words: list, dests: list) -> None:
    assert [found["dest"] for found in vllm_serve_check.options_given(release, words)] == dests


def test_options_given_of_an_unknown_release_are_none() -> None:
    assert vllm_serve_check.options_given("0.20.0", ["--max-model-len", "1"]) == []
