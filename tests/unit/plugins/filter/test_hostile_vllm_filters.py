# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for the vllm_serve_args and vllm_diagnose filters.

Invariants: AnsibleFilterError with a message naming the setting, or the right result
(a list of strings for vllm_serve_args; a list of diagnoses for vllm_diagnose); no other
exception.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.filter.vllm import vllm_diagnose, vllm_serve_args
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_args import KNOWN_KEYS
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import hostile, python_scalars, python_values

GENERATED_CASES = 300
BASE = {"model_path": "/model"}


def test_extra_args_given_as_a_string_is_refused_not_split_into_characters():
    with pytest.raises(AnsibleFilterError, match=r"extra_args.*expected a list"):
        vllm_serve_args({**BASE, "extra_args": "--trust-remote-code"})


@pytest.mark.parametrize("item", [None, True, {"a": 1}, ["--x"], float("nan")])
def test_extra_args_items_that_are_not_words_are_refused(item):
    with pytest.raises(AnsibleFilterError, match=r"extra_args\[1\]"):
        vllm_serve_args({**BASE, "extra_args": ["--seed", item]})


def test_numbers_in_extra_args_are_converted_deliberately():
    assert vllm_serve_args({**BASE, "extra_args": ["--seed", 7, "--temperature", 0.5]})[-4:] == [
        "--seed", "7", "--temperature", "0.5",
    ]  # fmt: skip


@pytest.mark.parametrize("off", [False, "false", "False", "no", "off", "0", 0, None])
def test_a_false_switch_emits_no_flag_whatever_its_spelling(off):
    assert "--enforce-eager" not in vllm_serve_args({**BASE, "enforce_eager": off})


@pytest.mark.parametrize("on", [True, "true", "yes", "on", "1", 1])
def test_a_true_switch_emits_its_flag(on):
    assert "--enforce-eager" in vllm_serve_args({**BASE, "enforce_eager": on})


@pytest.mark.parametrize("value", ["maybe", [True], {"on": True}, 2])
def test_a_switch_that_is_not_a_boolean_is_refused(value):
    with pytest.raises(AnsibleFilterError, match=r"enforce_eager.*expected true or false"):
        vllm_serve_args({**BASE, "enforce_eager": value})


@pytest.mark.parametrize(("key", "value"), [("port", True), ("max_model_len", [16384]), ("dtype", {"a": 1}),
                                            ("gpu_memory_utilization", float("nan")), ("model_path", 3)])  # fmt: skip
def test_values_that_are_not_words_are_refused_naming_the_key(key, value):
    with pytest.raises(AnsibleFilterError, match=key):
        vllm_serve_args({**BASE, key: value})


def test_an_unknown_setting_is_refused_naming_it():
    with pytest.raises(AnsibleFilterError, match="enforce-eager"):
        vllm_serve_args({**BASE, "enforce-eager": True})


@pytest.mark.parametrize("log", [[None, 3, b"CUDA out of memory", {"x": 1}], (1.5, True), b"torch.OutOfMemoryError"])
def test_diagnose_takes_lines_of_any_type(log):
    assert isinstance(vllm_diagnose(log), list)


def test_diagnose_refuses_a_registered_result_with_a_hint():
    with pytest.raises(AnsibleFilterError, match="stdout"):
        vllm_diagnose({"stdout": "x", "rc": 1})


settings_strategy = st.dictionaries(
    st.sampled_from(sorted(KNOWN_KEYS)) | st.text(max_size=6), python_values | python_scalars, max_size=6
).map(lambda d: {**BASE, **d})


@hostile(GENERATED_CASES)
@given(settings=settings_strategy)
def test_property_any_settings_give_a_clear_error_or_words(settings):
    try:
        args = vllm_serve_args(settings)
    except AnsibleFilterError as err:
        assert str(err).startswith("vllm_serve_args")
        return
    assert all(isinstance(arg, str) and arg for arg in args)
    assert not any(arg in ("True", "False", "None") for arg in args[1:] if not arg.startswith("-"))
    assert not any(arg.lower() in ("nan", "inf", "-inf") for arg in args)
    extra = settings.get("extra_args")
    assert extra is None or isinstance(extra, (list, tuple))
    for key in ("enforce_eager", "enable_prefix_caching"):
        value = settings.get(key)
        if isinstance(value, str) and value.lower() in ("false", "no", "off", "0", "n", "f"):
            assert f"--{key.replace('_', '-')}" not in args


@hostile(GENERATED_CASES)
@given(log=python_values | st.lists(python_scalars | st.binary(max_size=10), max_size=6))
def test_property_diagnose_any_log_gives_a_list_or_a_clear_error(log):
    try:
        found = vllm_diagnose(log)
    except AnsibleFilterError as err:
        assert "vllm_diagnose" in str(err)
        assert not isinstance(log, (str, list, type(None)))
        return
    assert isinstance(found, list)
    assert all(isinstance(item["message"], str) for item in found)


def test_vllm_diagnose_reads_the_log_in_the_releases_words():
    # vLLM 0.19.1 asserts the node rank (vllm/engine/arg_utils.py); 0.34.0 says it otherwise.
    old = "AssertionError: node_rank=2 must be less than nnodes=2."
    assert [f["key"] for f in vllm_diagnose(old, release="0.19.1")] == ["parallel-layout"]
    assert vllm_diagnose(old, release="0.34.0") == []
    assert vllm_diagnose(old) == []


def test_vllm_diagnose_refuses_a_release_it_has_no_texts_for():
    with pytest.raises(AnsibleFilterError, match=r"vLLM release '0\.20\.0' is not supported.*0\.19\.1, 0\.34\.0"):
        vllm_diagnose("x", release="0.20.0")
