# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the long waits' action plugins share (vllm_health, model_fetch_wait).

A module cannot print while it runs, so a long wait is cut in slices of at most
progress_interval seconds; the action prints progress between slices. The person watching
must see a line at least every MAX_PROGRESS_INTERVAL seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

MAX_PROGRESS_INTERVAL = 30.0


def wait_slices(args: dict, default_timeout: float) -> tuple[float, float]:
    """(timeout, slice seconds) from a task's arguments; ValueError with the message to fail with."""
    try:
        timeout = float(args.get("timeout", default_timeout))
        slice_seconds = min(float(args.get("progress_interval", 25)), MAX_PROGRESS_INTERVAL)
    except (TypeError, ValueError):
        raise ValueError(
            f"timeout {args.get('timeout')!r} / progress_interval {args.get('progress_interval')!r}: "
            "expected numbers of seconds") from None
    if slice_seconds <= 0:
        raise ValueError(f"progress_interval {slice_seconds} must be > 0 (at most {MAX_PROGRESS_INTERVAL:.0f})")
    return timeout, slice_seconds


def sliced_wait(run_slice: Callable[[float], dict], timeout: float, slice_seconds: float,
                clock: Callable[[], float] = time.monotonic) -> Iterator[tuple[dict, float]]:
    """Runs run_slice(seconds to wait in this slice) until the caller stops iterating.

    Yields each slice's answer with the seconds elapsed since the first slice began. The
    last slice is cut to what remains of the timeout (never below 0), so that the caller,
    which decides what an answer means, can stop on time once elapsed >= timeout.
    """
    begin = clock()
    while True:
        remaining = timeout - (clock() - begin)
        answer = run_slice(max(0.0, min(slice_seconds, remaining)))
        yield answer, clock() - begin
