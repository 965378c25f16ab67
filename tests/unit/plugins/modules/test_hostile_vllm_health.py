# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for vllm_health: URLs, names and times are checked before any probe."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.modules import vllm_health
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
)

GENERATED_CASES = 150
GOOD = {"container": "vllm", "served_model_name": "qwen3.5-35b", "url": "http://127.0.0.1:8000"}


def health(**args: object) -> dict:
    # No docker here: a run that passes the option checks stops at the docker lookup, before any wait.
    with mock.patch.object(vllm_health.AnsibleModule, "get_bin_path", return_value=None):
        return call_module(vllm_health, {**GOOD, **args})


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ({"url": "127.0.0.1:8000"}, "url"),
        ({"url": "ftp://host"}, "url"),
        ({"url": "http://exa mple:8000"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "A://["}, "url"),
        ({"url": "http://[::1"}, "url"),
        ({"served_model_name": "  "}, "served_model_name"),
        ({"container": ""}, "container"),
        ({"timeout": 0}, "timeout"),
        ({"poll_interval": -1}, "poll_interval"),
        ({"wait_seconds": float("nan")}, "wait_seconds"),
        ({"log_lines": 0}, "log_lines"),
        ({"baseline_restarts": -1}, "baseline_restarts"),
        # Given to `docker logs --since=`: a timestamp the call before read, never another word.
        ({"log_since": "--follow"}, "log_since"),
        ({"log_since": "10m"}, "log_since"),
    ],
)
def test_options_that_cannot_be_meant_are_refused_naming_them(args, option):
    assert_clear_failure(health(**args), option)


def test_a_missing_docker_is_a_clear_error():
    assert_clear_failure(health(), "docker")


@hostile(GENERATED_CASES)
@given(
    url=st.text(max_size=30) | st.from_regex(r"\A(https?|ftp)?(://)?[a-z0-9. :/@\[\]-]{0,20}\Z"),
    times=st.lists(st.floats() | st.integers(-5, 5), min_size=3, max_size=3),
    lines=st.integers(-3, 100),
)
def test_property_any_url_and_times_give_a_clear_error_before_any_probe(url, times, lines):
    timeout, poll, wait = times
    result = health(url=url, timeout=timeout, poll_interval=poll, wait_seconds=wait, log_lines=lines)
    assert_clear_failure(result, "url", "timeout", "poll_interval", "wait_seconds", "log_lines", "docker")


def test_a_restart_during_the_wait_fails_it_without_a_baseline_from_the_caller():
    """Docker restarts a crashed container (unless-stopped) between two looks: the count at the first look is
    the baseline, so the restart fails the gate at the next look instead of at the next crash."""
    running = {"State": {"Status": "running"}}
    looks = iter([{**running, "RestartCount": 3}, {**running, "RestartCount": 4}])
    with (
        mock.patch.object(vllm_health, "inspect", lambda _module, _name: next(looks)),
        mock.patch.object(vllm_health, "probe", lambda _target, _stage: (False, "connection refused")),
        mock.patch.object(vllm_health, "logs", lambda _module, _name, _lines: ["the last line"]),
        mock.patch.object(vllm_health, "INSPECT_EVERY", 0.0),
        mock.patch.object(vllm_health.AnsibleModule, "get_bin_path", return_value="/usr/bin/docker"),
    ):
        result = call_module(vllm_health, {**GOOD, "timeout": 30, "poll_interval": 0.01, "wait_seconds": 30})
    assert result["state"] == "failed", result
    assert result["reason"] == "container restarted (4 restarts) after exit code None"
