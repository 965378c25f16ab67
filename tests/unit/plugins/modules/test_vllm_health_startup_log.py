# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module's read of the start-up markers: `docker logs --timestamps` as Docker prints it (stdout and stderr
apart, tqdm's bars as one line of carriage returns), back in the log's order."""

from __future__ import annotations

from unittest import mock

from ansible_collections.sparkfleet.serving.plugins.modules import vllm_health

OUT = "\n".join([
    "2027-01-15T08:00:05.5Z (EngineCore pid=9) INFO 01-15 08:00:05 [core.py:154] Initializing a V1 LLM engine "
    "(v0.34.0) with config: " + "x" * 2000,
    "2027-01-15T08:00:20.000000001Z (EngineCore pid=9) INFO 01-15 08:00:20 [utils.py:1] not a marker",
    "2027-01-15T08:05:06Z (EngineCore pid=9) INFO 01-15 08:05:06 [kernel_warmup.py:477] Running FlashInfer autotune "
    "with 8192 tokens and token buckets [1, 2].",
])
ERR = ("2027-01-15T08:02:00.25Z \rLoading safetensors checkpoint shards:   0% Completed | 0/2"
       "\rLoading safetensors checkpoint shards: 100% Completed | 2/2\r\n"
       "2027-01-15T08:06:00.125Z a line that is no marker, the newest")


def read(rc: int = 0) -> tuple[list[list], str, list]:
    module = mock.Mock()
    module.run_command.return_value = (rc, OUT, ERR)
    entries, since = vllm_health.startup_log(module, "vllm", "2027-01-15T08:00:00Z")
    return entries, since, module.run_command.call_args.args[0]


def test_markers_in_the_logs_order_each_line_short_and_the_newest_time_to_go_on_from():
    entries, since, argv = read()
    assert argv == ["docker", "logs", "--timestamps", "--since=2027-01-15T08:00:00Z", "vllm"]
    assert [at - 1_800_000_000 for at, _line in entries] == [5.5, 120.25, 306.0]
    assert entries[0][1].startswith("(EngineCore pid=9) INFO 01-15 08:00:05 [core.py:154] Initializing a V1 LLM "
                                    "engine (v0.34.0)") and len(entries[0][1]) == 300
    # The bar's last state, not its first.
    assert entries[1][1] == "Loading safetensors checkpoint shards: 100% Completed | 2/2"
    assert since == "2027-01-15T08:06:00.125Z"


def test_a_log_docker_cannot_read_gives_nothing_and_the_same_place():
    entries, since, _argv = read(rc=1)
    assert entries == [] and since == "2027-01-15T08:00:00Z"
