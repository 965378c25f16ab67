# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The slicing of long waits that vllm_health and model_fetch_wait share, on a fake clock."""

from __future__ import annotations

import pytest

from ansible_collections.sparkfleet.serving.plugins.plugin_utils.waiting import (
    MAX_PROGRESS_INTERVAL,
    sliced_wait,
    wait_slices,
)


class FakeClock:
    """A slice takes exactly the seconds it was given, as a module that waited until its end."""

    def __init__(self) -> None:
        self.now = 100.0
        self.asked: list[float] = []

    def __call__(self) -> float:
        return self.now

    def run_slice(self, seconds: float) -> dict:
        self.asked.append(seconds)
        self.now += seconds
        return {"slice": len(self.asked)}


def test_slices_are_cut_to_the_timeout_and_elapsed_counts_from_the_start():
    clock = FakeClock()
    seen = []
    for answer, elapsed in sliced_wait(clock.run_slice, timeout=60, slice_seconds=25, clock=clock):
        seen.append((answer["slice"], elapsed))
        if elapsed >= 60:
            break
    assert clock.asked == [25, 25, 10]
    assert seen == [(1, 25), (2, 50), (3, 60)]


def test_a_caller_that_keeps_going_past_the_timeout_gets_zero_second_slices():
    clock = FakeClock()
    waits = sliced_wait(clock.run_slice, timeout=5, slice_seconds=25, clock=clock)
    assert [next(waits)[1] for _slice in range(3)] == [5, 5, 5]
    assert clock.asked == [5, 0, 0]


def test_wait_slices_reads_the_task_arguments():
    assert wait_slices({"timeout": "90", "progress_interval": 5}, 1800) == (90.0, 5.0)
    assert wait_slices({}, 1800) == (1800.0, 25.0)
    # A person watching must see a line at least every MAX_PROGRESS_INTERVAL seconds.
    assert wait_slices({"progress_interval": 300}, 1800) == (1800.0, MAX_PROGRESS_INTERVAL)


@pytest.mark.parametrize(("args", "message"), [
    ({"timeout": "soon"}, "expected numbers of seconds"),
    ({"progress_interval": 0}, "must be > 0"),
])
def test_wait_slices_refuses_what_is_not_a_duration(args, message):
    with pytest.raises(ValueError, match=message):
        wait_slices(args, 1800)
