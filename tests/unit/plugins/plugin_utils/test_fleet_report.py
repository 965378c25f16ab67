# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet's status and benchmark rows, the fleet figures and the table."""

from __future__ import annotations

import json

import pytest

from ansible_collections.sparkfleet.serving.plugins.filter.fleet import FilterModule
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.cluster import cluster_of_host
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.fleet_report import (
    BENCHMARK_COLUMNS,
    STATUS_COLUMNS,
    benchmark_fleet,
    benchmark_row,
    firewall_state,
    flag_image_ids,
    image_name,
    last_watchdog_action,
    parse_metrics,
    percentile,
    render_table,
    status_display,
    status_row,
    status_units,
)

# vLLM 0.19.1's /metrics in the shape prometheus_client writes it (vllm/v1/metrics/loggers.py).
METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3.5-35b"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3.5-35b"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3.5-35b"} 0.125
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3.5-35b"} 4096.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen3.5-35b"} 512.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen3.5-35b"} 4.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen3.5-35b"} 12.0
"""

GPU = {"present": True, "names": ["NVIDIA GB10"], "driver_version": "580.142", "cuda_driver_version": "13.0",
       "memory": {"total_bytes": 128 * 2**30, "used_bytes": 32 * 2**30}}
RECORD = {"format": 1, "container": "vllm", "image": "vllm/vllm-openai:v0.19.1-cu130",
          "image_id": "sha256:" + "a" * 64, "repo_digests": ["vllm/vllm-openai@sha256:" + "b" * 64],
          "served_model_name": "qwen3.5-35b", "deployed_at": "2026-11-30T08:00:00Z",
          "model": {"repo": "Qwen/Qwen3.5-35B-A3B-FP8", "revision": None, "commit": None, "dir": "/srv/models/x"}}
MANIFEST = {"format": 1, "source": "huggingface", "repo": "Qwen/Qwen3.5-35B-A3B-FP8", "revision": "main",
            "commit": "c" * 40}
JOURNAL = "\n".join([
    '2026-11-30T07:59:01+0000 spark-1 python3[88]: {"event":"state","container":"vllm","state":"armed"}',
    '2026-11-30T08:01:02+0000 spark-1 python3[88]: {"event":"stop","used_pct":97.1,"container":"vllm",'
    '"phase":"steady","threshold":90,"trigger":"threshold"}',
    '2026-11-30T08:01:03+0000 spark-1 python3[88]: {"event":"stopped","container":"vllm","action":"stop"}',
    '2026-11-30T08:01:04+0000 spark-1 python3[88]: {"event":"state","container":"vllm","state":"cooldown"}',
])


def raw(**overrides: object) -> dict:
    base = {"host": "spark-1", "reachable": True, "gpu": GPU, "deployment": json.dumps(RECORD),
            "legacy_deployment": "", "manifest": json.dumps(MANIFEST),
            "container": {"State": {"Status": "running"}, "Config": {"Image": RECORD["image"]},
                          "Image": RECORD["image_id"]},
            "container_checked": True, "image": {"Id": RECORD["image_id"], "RepoDigests": RECORD["repo_digests"]},
            "health_status": 200, "metrics": METRICS, "watchdog_state": "active", "watchdog_journal": JOURNAL,
            "ufw_rc": 0, "ufw_stdout": "Status: active\n\nTo Action From\n"}
    base.update(overrides)
    return base


def test_metrics_are_read_by_vllms_names_and_summed_over_label_sets():
    metrics = parse_metrics(METRICS)
    assert metrics["vllm:num_requests_running"] == 3.0
    assert metrics["vllm:request_success_total"] == 16.0
    assert metrics["vllm:kv_cache_usage_perc"] == 0.125


def test_kv_usage_of_several_engines_is_averaged_not_summed():
    text = ('vllm:kv_cache_usage_perc{engine="0"} 0.5\nvllm:kv_cache_usage_perc{engine="1"} 0.25\n'
            'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} 5\n')
    metrics = parse_metrics(text)
    assert metrics["vllm:kv_cache_usage_perc"] == 0.375
    assert metrics["vllm:num_requests_running"] == 7


def test_malformed_metrics_lines_are_skipped():
    assert parse_metrics("garbage\nvllm:x{a=\"1\"} NaN\nvllm:y notanumber\n# vllm:z 3\nvllm:w 2\n") == {"vllm:w": 2.0}
    assert parse_metrics(None) == {}


def test_a_healthy_box():
    row = status_row(raw())
    assert row["reachable"] is True and row["health"] == "ok"
    assert (row["gpu"], row["driver"], row["cuda"]) == ("NVIDIA GB10", "580.142", "13.0")
    assert row["image"] == "vllm/vllm-openai:v0.19.1-cu130" and row["image_digest"] == "sha256:" + "b" * 64
    # The manifest names the weights on disk: it wins over the record.
    assert (row["model"], row["revision"], row["commit"], row["model_source"]) == (
        "Qwen/Qwen3.5-35B-A3B-FP8", "main", "c" * 40, "manifest")
    assert row["served_model_name"] == "qwen3.5-35b"
    assert (row["requests_running"], row["requests_waiting"], row["kv_cache_usage"]) == (3, 2, 12.5)
    assert (row["prompt_tokens_total"], row["generation_tokens_total"]) == (4096, 512)
    assert row["memory_used_pct"] == 25.0
    assert row["watchdog"] == "active"
    assert row["watchdog_last_action"] == "stopped vllm at 2026-11-30T08:01:03+0000"
    assert row["firewall"] == "active"


def test_without_manifest_the_record_names_the_model_and_revision_is_unknown():
    row = status_row(raw(manifest=""))
    assert (row["model"], row["revision"], row["model_source"]) == (
        "Qwen/Qwen3.5-35B-A3B-FP8", "unknown", "deployment record")


def test_nothing_recorded_is_unknown_not_a_guess():
    row = status_row(raw(deployment="", manifest="", legacy_deployment="", metrics="", image={},
                         container={}, container_checked=False, health_status=-1, watchdog_journal=None,
                         ufw_rc=None, gpu={}))
    for key in ("model", "revision", "served_model_name", "image", "image_digest", "requests_running",
                "kv_cache_usage", "watchdog_last_action", "firewall", "gpu", "driver", "memory_used_pct", "health"):
        assert row[key] == "unknown", key


def test_the_older_record_of_the_vllm_role_is_read_when_there_is_no_deployment_record():
    legacy = {"container": "vllm", "image": "sparkfleet-sim/vllm-openai:standin", "served_model_name": "q"}
    row = status_row(raw(deployment="", manifest="", legacy_deployment=json.dumps(legacy), container={}, image={}))
    assert (row["image"], row["served_model_name"]) == ("sparkfleet-sim/vllm-openai:standin", "q")


@pytest.mark.parametrize(("status", "container", "expected"), [
    (200, {"State": {"Status": "running"}}, "ok"),
    (-1, {"State": {"Status": "running"}}, "down"),
    (503, {"State": {"Status": "running"}}, "failing (HTTP 503)"),
    (-1, {"State": {"Status": "exited"}}, "down (exited)"),
])
def test_health(status: int, container: dict, expected: str):
    assert status_row(raw(health_status=status, container=container))["health"] == expected


def test_a_missing_container_is_said_so():
    row = status_row(raw(container={}, container_checked=True, health_status=-1))
    assert row["container"] == "absent" and row["health"] == "down (absent)"


def test_an_unreachable_box_is_a_row():
    row = status_row({"host": "spark-9", "reachable": False, "error": "ssh: connect to host: No route to host"})
    assert row["reachable"] is False and row["error"].startswith("ssh:")
    assert row["model"] == "unknown" and row["host"] == "spark-9"
    assert "spark-9" in render_table([row], STATUS_COLUMNS)


def test_watchdog_without_actions_says_none():
    assert last_watchdog_action(JOURNAL.splitlines()[0]) == "none"
    assert last_watchdog_action("-- No entries --") == "none"
    assert last_watchdog_action('2026-11-30T08:00:00+0000 h p[1]: {"event":"kill","container":"vllm",'
                                '"reason":"not stopped after 5 s"}') == (
        "kill vllm (not stopped after 5 s) at 2026-11-30T08:00:00+0000")


@pytest.mark.parametrize(("rc", "out", "state"), [
    (0, "Status: inactive\n", "inactive"), (0, "Status: active\n", "active"), (127, "", "not installed"),
    (1, "ERROR: You need to be root to run this script", "unknown"), (None, "", "unknown")])
def test_firewall(rc: int | None, out: str, state: str):
    assert firewall_state(rc, out) == state


def test_the_container_label_names_the_model_when_nothing_else_does():
    container = {"State": {"Status": "running"}, "Config": {"Labels": {"org.sparkfleet.vllm.model": "Qwen/Q"}}}
    row = status_row(raw(manifest="", deployment="", container=container))
    assert (row["model"], row["revision"], row["model_source"]) == ("Qwen/Q", "unknown", "container label")


def test_the_printed_table_joins_fields():
    shown = status_display(status_row(raw()))
    assert shown["driver_cuda"] == "580.142/13.0"
    assert shown["model_revision"] == "Qwen/Qwen3.5-35B-A3B-FP8@main (cccccccc)"
    assert (shown["run_wait"], shown["tokens"]) == ("3/2", "4096/512")
    assert shown["watchdog_display"] == "active (stopped vllm at 2026-11-30T08:01:03+0000)"
    gone = status_display(status_row({"host": "spark-2", "reachable": False, "error": "timed out"}))
    assert gone["gpu"] == "timed out" and gone["model_revision"] == ""


def test_table_aligns_columns_and_marks_unreachable():
    rows = [status_display(status_row(raw())), status_display(status_row({"host": "spark-2", "reachable": False}))]
    lines = render_table(rows, STATUS_COLUMNS).splitlines()
    assert lines[0].startswith("host ") and set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].startswith("spark-1 ") and " NO " in lines[3]
    # Every data column starts where its header does.
    header = lines[0]
    assert lines[2].index("yes") == header.index("up")
    # Long digests are shortened to what tells them apart.
    assert "sha256:bbbbbbbbbbbb " in lines[2]


# --- benchmark ---------------------------------------------------------------------------------

def bench_result(ttfts: list[float], itls: list[list[float]], errors: list[str] | None = None, **extra) -> dict:
    errors = errors or [""] * len(ttfts)
    done = sum(1 for e in errors if not e)
    return {"completed": done, "failed": len(errors) - done, "total_output_tokens": 10 * done, "duration": 2.0,
            "output_throughput": 5.0 * done, "p50_ttft_ms": 1.0, "p95_ttft_ms": 2.0, "ttfts": ttfts, "itls": itls,
            "errors": errors, **extra}


def test_numpy_percentile():
    values = [3.0, 1.0, 2.0, 10.0]
    assert percentile(values, 50) == 2.5
    assert percentile(values, 95) == pytest.approx(8.95)
    assert percentile([], 50) is None


def test_benchmark_row_takes_vllms_figures():
    row = benchmark_row("spark-1", json.dumps(bench_result([0.1], [[0.01]])))
    assert (row["host"], row["completed"], row["output_throughput"], row["p95_ttft_ms"]) == ("spark-1", 1, 5.0, 2.0)
    assert row["error"] == ""
    assert "ttfts" not in row


def test_benchmark_row_of_a_box_without_result_or_with_failures():
    assert benchmark_row("spark-2", "", "docker: No such container: vllm") == {
        "host": "spark-2", "error": "docker: No such container: vllm"}
    row = benchmark_row("spark-3", bench_result([0.1, 0.0], [[0.01], []], ["", "Traceback\nOSError: refused\n"]))
    assert row["error"] == "1 failed: OSError: refused"


def test_fleet_adds_throughput_and_takes_percentiles_over_every_request():
    results = {
        "spark-1": json.dumps(bench_result([0.1, 0.2], [[0.01, 0.01], [0.02]])),
        "spark-2": bench_result([0.3, 0.0], [[0.05], []], ["", "failed"]),
    }
    fleet = benchmark_fleet(results)
    assert fleet["boxes"] == 2 and fleet["completed"] == 3 and fleet["failed"] == 1
    assert fleet["output_throughput"] == 15.0
    # TTFTs of the three successful requests: 100, 200, 300 ms; latency = TTFT + gaps.
    assert fleet["p50_ttft_ms"] == pytest.approx(200.0)
    assert fleet["p95_ttft_ms"] == pytest.approx(290.0)
    assert sorted([fleet["p50_e2el_ms"]]) == [pytest.approx(220.0)]
    assert fleet["mean_e2el_ms"] == pytest.approx((120 + 220 + 350) / 3)


def test_fleet_of_no_results_says_so():
    fleet = benchmark_fleet({"spark-1": ""})
    assert fleet["boxes"] == 0 and fleet["p50_ttft_ms"] is None and "1 box(es) without a result" in fleet["error"]
    lines = render_table([benchmark_row("spark-1", "", "no result"), fleet], BENCHMARK_COLUMNS).splitlines()
    assert lines[-1].startswith("fleet ") and " - " in lines[-1]


def test_every_row_has_the_same_keys():
    keys = set(status_row(raw()))
    assert set(status_row({"host": "x", "reachable": False})) == keys
    assert set(status_row({"host": "x", "reachable": True})) == keys


# --- GPU clock caps (the nvidia_runtime role's published nvidia_runtime_gpu_clocks) -----------------

CLOCKS_SET = {"wanted": {"min_mhz": 600, "max_mhz": 1800}, "wanted_text": "600-1800 MHz", "unit": "active",
              "applied": [{"gpu": "0000000F:01:00.0", "min_mhz": 600, "max_mhz": 1800}],
              "applied_text": "600-1800 MHz", "differs": ""}
CLOCKS_LOST = {**CLOCKS_SET, "unit": "not installed", "applied": [], "applied_text": "none",
               "differs": "sparkfleet-gpu-clocks.service is not installed: nothing caps the clocks at boot"}
CLOCKS_NONE = {"wanted": {}, "wanted_text": "leave alone", "unit": "not installed", "applied": [],
               "applied_text": "none", "differs": ""}


def test_a_box_without_caps_keeps_its_row_and_the_table_its_columns():
    before = status_row(raw())
    assert status_row(raw(gpu_clocks=CLOCKS_NONE)) == before
    rows = [status_display(status_row(raw(gpu_clocks=CLOCKS_NONE))),
            status_display(status_row({"host": "spark-2", "reachable": False}))]
    assert "clock caps" not in render_table(rows, STATUS_COLUMNS)


def test_a_box_with_caps_shows_wanted_and_applied():
    row = status_row(raw(gpu_clocks=CLOCKS_SET))
    assert set(row) - set(status_row(raw())) == {"gpu_clocks_wanted", "gpu_clocks_applied", "gpu_clocks_differ"}
    assert (row["gpu_clocks_wanted"], row["gpu_clocks_applied"], row["gpu_clocks_differ"]) == (
        "600-1800 MHz", "600-1800 MHz", "")
    assert status_display(row)["gpu_clocks_display"] == "600-1800 MHz/600-1800 MHz"


def test_caps_lost_at_a_reboot_are_flagged_and_the_other_boxes_show_a_dash():
    rows = [status_display(status_row(raw(gpu_clocks=CLOCKS_LOST))),
            status_display(status_row(raw(host="spark-2"))),
            status_display(status_row({"host": "spark-3", "reachable": False}))]
    assert rows[0]["gpu_clocks_display"] == "600-1800 MHz/none DIFFERS"
    lines = render_table(rows, STATUS_COLUMNS).splitlines()
    column = lines[0].index("clock caps wanted/applied")
    assert lines[2][column:].startswith("600-1800 MHz/none DIFFERS")
    assert lines[3][column:].startswith("- ")


def test_a_clusters_row_merges_its_members_caps():
    rows = [member("head", gpu_clocks=CLOCKS_SET), member("worker", gpu_clocks=CLOCKS_LOST)]
    [unit] = status_units(rows, GROUPS)
    assert unit["gpu_clocks_wanted"] == "600-1800 MHz"
    assert unit["gpu_clocks_applied"] == "head: 600-1800 MHz; worker: none"
    [plain] = status_units([member("head"), member("worker")], GROUPS)
    assert "gpu_clocks_wanted" not in plain


# --- clusters ---------------------------------------------------------------------------------

GROUPS = {"all": ["spark-1", "head", "worker"], "spark": ["spark-1", "head", "worker"],
          "clusters": ["head", "worker"], "pair1": ["head", "worker"]}


def member(name: str, **overrides: object) -> dict:
    # What status.yml gathers: a worker is not asked /health or /metrics (it serves no API); its
    # cluster as the vllm role publishes it (vllm_deployment.cluster, the cluster_of filter's answer).
    worker = {"health_status": -1, "metrics": ""} if name == "worker" else {}
    return status_row(raw(host=name, cluster=cluster_of_host(GROUPS, name), **{**worker, **overrides}))


def test_a_worker_says_it_serves_no_api_and_its_head_is_healthy():
    assert member("worker")["health"] == "no API (worker of pair1, serves through head)"
    assert (member("worker")["cluster"], member("worker")["cluster_role"]) == ("pair1", "worker")
    assert (member("head")["health"], member("head")["cluster_role"]) == ("ok", "head")
    assert (status_row(raw())["cluster"], status_row(raw())["cluster_role"]) == ("", "")


def test_a_cluster_is_one_row_with_its_members_and_its_heads_health():
    rows = [status_row(raw()), member("head"), member("worker")]
    units = status_units(rows, GROUPS)
    assert [u["host"] for u in units] == ["spark-1", "pair1"]
    assert units[0] == rows[0]
    pair = units[1]
    assert pair["members"] == ["head", "worker"] and pair["head"] == "head"
    assert pair["member_containers"] == {"head": "running", "worker": "running"}
    assert pair["health"] == "ok" and pair["requests_running"] == 3 and pair["reachable"] is True
    # The members agree on the image: one value.
    assert pair["image"] == rows[1]["image"]
    shown = status_display(pair)
    assert shown["members_display"] == "head (head) running, worker running"
    table = render_table([status_display(u) for u in units], STATUS_COLUMNS).splitlines()
    assert len(table) == 4 and table[3].startswith("pair1 ") and "head (head) running, worker running" in table[3]


def test_a_cluster_whose_worker_stopped_is_down_whatever_its_head_says():
    rows = [member("head"), member("worker", container={"State": {"Status": "exited"}})]
    assert status_units(rows, GROUPS)[0]["health"] == "down (worker exited)"


def test_a_member_unreachable_or_not_asked_leaves_the_clusters_health_unknown():
    unreachable = status_row({"host": "worker", "reachable": False, "error": "timed out"})
    pair = status_units([member("head"), unreachable], GROUPS)[0]
    assert pair["health"] == "unknown (worker unreachable)" and pair["reachable"] is False
    assert pair["error"] == "worker: timed out"
    assert status_display(pair)["model_revision"] != ""
    alone = status_units([member("head")], GROUPS)[0]
    assert alone["member_containers"] == {"head": "running", "worker": "unreachable"}
    assert "not in this run" in alone["error"]


def test_members_that_disagree_show_each_value():
    rows = [member("head"), member("worker", ufw_rc=127)]
    assert status_units(rows, GROUPS)[0]["firewall"] == "head: active; worker: not installed"


def test_a_benchmark_row_of_a_cluster_lists_its_members():
    row = {**benchmark_row("pair1", {"completed": 4, "failed": 0}), "members": ["head", "worker"]}
    lines = render_table([row], BENCHMARK_COLUMNS).splitlines()
    assert lines[0].split()[:2] == ["host", "members"] and lines[2].startswith("pair1  head, worker ")


STOP = {"container": "vllm", "stopped_at": "2026-12-01T20:31:07.412Z", "used_pct": 99.0, "threshold": 98.0}


def test_a_container_the_watchdog_stopped_says_so_alone_and_in_its_cluster():
    exited = {"State": {"Status": "exited"}}
    alone = status_row(raw(container=exited, watchdog_stop=STOP))
    assert alone["health"] == ("down (stopped by the watchdog at 2026-12-01T20:31:07.412Z, 99.0 % used, "
                               "threshold 98.0 %)")
    # The record of a container that runs again is stale: not shown.
    assert status_row(raw(watchdog_stop=STOP))["watchdog_stop"] == ""
    rows = [member("head", container=exited), member("worker", container=exited, watchdog_stop=STOP)]
    assert status_units(rows, GROUPS)[0]["health"] == (
        "down (head exited, worker stopped by the watchdog at 2026-12-01T20:31:07.412Z, 99.0 % used, "
        "threshold 98.0 %)")


GUARD_STOP = {"container": "vllm", "stopped_at": "2026-12-01T20:32:40.118Z", "head": "192.168.100.10:29501",
              "unreachable_since": "2026-12-01T20:32:08.020Z", "reason": "head unreachable"}


def test_a_worker_its_cluster_guard_stopped_says_why_in_its_row_and_its_clusters():
    exited = {"State": {"Status": "exited"}}
    worker = member("worker", container=exited, cluster_guard_stop=GUARD_STOP)
    why = ("stopped by the cluster guard at 2026-12-01T20:32:40.118Z: head 192.168.100.10:29501 unreachable since "
           "2026-12-01T20:32:08.020Z")
    assert worker["cluster_guard_stop"] == why and worker["watchdog_stop"] == ""
    rows = [member("head", container=exited), worker]
    assert status_units(rows, GROUPS)[0]["health"] == f"down (head exited, worker {why})"
    # Once the container runs again the guard removes its record; one read before that is not shown.
    assert member("worker", cluster_guard_stop=GUARD_STOP)["cluster_guard_stop"] == ""
    assert status_row(raw())["cluster_guard_stop"] == ""


def test_a_box_whose_image_id_differs_from_the_others_on_the_same_reference_is_flagged():
    other = "sha256:" + "c" * 64
    rows = [status_row(raw(host=f"spark-{n}")) for n in (1, 2)]
    rows.append(status_row(raw(host="spark-3", image={"Id": other, "RepoDigests": []},
                               container={"State": {"Status": "running"}, "Config": {"Image": RECORD["image"]},
                                          "Image": other})))
    units = status_units(rows, {})
    assert [unit["image_id"] for unit in units] == [RECORD["image_id"]] * 2 + [other]
    assert [unit["image_differs"] for unit in units] == [
        "", "", f"differs from {RECORD['image_id'][:19]} on spark-1, spark-2"]
    table = render_table([status_display(unit) for unit in units], STATUS_COLUMNS)
    assert table.count("DIFFERS") == 1 and f"{other[:19]} DIFFERS" in table
    # Another image reference is another deployment: not compared.
    rows[2]["image"] = "vllm/vllm-openai:v0.20.0"
    assert [unit["image_differs"] for unit in status_units(rows, {})] == ["", "", ""]
    # The boxes' own rows are not changed in place.
    assert "image_differs" in rows[2] and rows[2]["image_differs"] == ""


def box_on(host: str, image: str, image_id: str, digests: list[str]) -> dict:
    return status_row(raw(host=host, image={"Id": image_id, "RepoDigests": digests},
                          container={"State": {"Status": "running"}, "Config": {"Image": image}, "Image": image_id}))


def test_a_box_on_the_digest_is_compared_with_the_boxes_on_the_tag():
    """vllm_image_digest makes the role run repository@digest: that box runs the tag's image (or not) all the same."""
    pinned = "vllm/vllm-openai@sha256:" + "d" * 64
    other = "sha256:" + "c" * 64
    rows = [status_row(raw(host=f"spark-{n}")) for n in (1, 2)] + [box_on("spark-3", pinned, other, [pinned])]
    flagged = flag_image_ids(rows)
    expected = f"differs from {RECORD['image_id'][:19]} on spark-1, spark-2"
    assert [row["image_differs"] for row in flagged] == ["", "", expected]
    # The digest of the tag's own image: the same image, nothing to flag.
    same = "vllm/vllm-openai@sha256:" + "b" * 64
    rows[2] = box_on("spark-3", same, RECORD["image_id"], [same])
    assert [row["image_differs"] for row in flag_image_ids(rows)] == ["", "", ""]


def test_a_digest_is_compared_with_the_tag_whose_image_has_it_when_the_repository_has_two_tags():
    new = "sha256:" + "e" * 64
    rows = [status_row(raw(host="spark-1")),
            box_on("spark-2", "vllm/vllm-openai:v0.20.0", new, ["vllm/vllm-openai@sha256:" + "f" * 64]),
            box_on("spark-3", "vllm/vllm-openai@sha256:" + "b" * 64, new, [])]
    assert [row["image_differs"] for row in flag_image_ids(rows)] == [
        "", "", f"differs from {RECORD['image_id'][:19]} on spark-1"]


def test_the_json_rows_carry_the_flag_the_table_shows():
    """playbooks/status.yml writes fleet_image_flags' rows as the JSON's hosts: the flag the table shows is there."""
    other = "sha256:" + "c" * 64
    rows = [status_row(raw(host=f"spark-{n}")) for n in (1, 2)] + [box_on("spark-3", RECORD["image"], other, [])]
    flagged = FilterModule().filters()["fleet_image_flags"](rows)
    assert flagged[2]["image_differs"] == status_units(rows, {})[2]["image_differs"] != ""
    assert rows[2]["image_differs"] == ""


@pytest.mark.parametrize(("reference", "expected"), [
    ("vllm/vllm-openai:v0.19.1", ("vllm/vllm-openai", "v0.19.1", "")),
    ("vllm/vllm-openai", ("vllm/vllm-openai", "latest", "")),
    ("registry:5000/vllm/vllm-openai", ("registry:5000/vllm/vllm-openai", "latest", "")),
    ("registry:5000/vllm/vllm-openai:v1@sha256:ab", ("registry:5000/vllm/vllm-openai", "v1", "sha256:ab")),
    ("vllm/vllm-openai@sha256:ab", ("vllm/vllm-openai", "", "sha256:ab")),
])
def test_image_name(reference: str, expected: tuple[str, str, str]):
    assert image_name(reference) == expected


# --- how the deployment started (the health gate's figures in the known-good record) -----------------

STARTUP = {"container_started_at": "2026-11-30T07:35:00.000000Z", "time_to_ready_s": 1446.0, "ttft_s": 0.412,
           "ttft_note": "", "phases_s": {"weights": 45.0, "autotune": 1375.0}, "vllm_version": "0.34.0"}


def test_the_row_shows_time_to_ready_and_the_first_completions_ttft():
    row = status_row(raw(deployment=json.dumps({**RECORD, "startup": STARTUP})))
    assert (row["time_to_ready_s"], row["ttft_s"]) == (1446.0, 0.412)
    assert status_display(row)["start_display"] == "24 min 6 s/0.41 s"
    table = render_table([status_display(row)], STATUS_COLUMNS).splitlines()
    assert table[0].index("ready in/TTFT") == table[2].index("24 min 6 s/0.41 s")


@pytest.mark.parametrize("startup", [None, {}, {"time_to_ready_s": 30.5, "ttft_s": None, "ttft_note": "not streamed"},
                                     {"time_to_ready_s": "soon", "ttft_s": -1}, {"time_to_ready_s": True}, "garbage"])
def test_a_start_the_gate_did_not_watch_or_time_is_unknown_not_a_guess(startup: object):
    record = dict(RECORD) if startup is None else {**RECORD, "startup": startup}
    row = status_row(raw(deployment=json.dumps(record)))
    expected_ready = 30.5 if isinstance(startup, dict) and startup.get("time_to_ready_s") == 30.5 else "unknown"
    assert (row["time_to_ready_s"], row["ttft_s"]) == (expected_ready, "unknown")
    assert status_display(row)["start_display"] == f"{'30 s' if expected_ready == 30.5 else 'unknown'}/unknown"


def test_a_clusters_start_is_its_heads():
    head = member("head", deployment=json.dumps({**RECORD, "startup": STARTUP}))
    units = status_units([head, member("worker")], GROUPS)
    assert (units[0]["time_to_ready_s"], units[0]["ttft_s"]) == (1446.0, 0.412)
    assert status_row({"host": "x", "reachable": False})["time_to_ready_s"] == "unknown"


# --- several deployments on a box (the vllm role's vllm_deployed) -------------------------------

def deployed(host: str, name: str, port: int, **overrides: object) -> dict:
    """What status.yml gathers for one deployment of a box: its name and port beside the box's answers."""
    cluster = cluster_of_host(GROUPS, host) if host in ("head", "worker") else {}
    worker = {"health_status": -1, "metrics": ""} if host == "worker" else {}
    return status_row(raw(host=host, deployment_name=name, port=port, cluster=cluster, **{**worker, **overrides}))


def test_a_row_per_deployment_named_with_its_port():
    rows = [deployed("spark-1", "chat", 8000), deployed("spark-1", "code", 8001, health_status=503)]
    assert [(r["host"], r["deployment"], r["port"], r["health"]) for r in rows] == [
        ("spark-1", "chat", 8000, "ok"), ("spark-1", "code", 8001, "failing (HTTP 503)")]
    units = status_units(rows, GROUPS)
    assert [(u["host"], u["deployment"]) for u in units] == [("spark-1", "chat"), ("spark-1", "code")]
    table = render_table([status_display(u) for u in units], STATUS_COLUMNS).splitlines()
    assert table[0].split()[:2] == ["host", "deployment"]
    assert table[2].split()[:2] == ["spark-1", "chat:8000"] and table[3].split()[:2] == ["spark-1", "code:8001"]


def test_a_single_deployment_row_gains_only_its_name_and_port():
    before = status_row(raw())
    after = status_row(raw(deployment_name="vllm", port="8000"))
    assert {k: v for k, v in after.items() if before[k] != v} == {"deployment": "vllm", "port": 8000}
    assert status_display(after)["deployment_display"] == "vllm:8000"
    assert (before["deployment"], status_display(before)["deployment_display"]) == ("unknown", "unknown")


def test_a_cluster_is_a_row_per_deployment_and_an_unreachable_member_is_in_each():
    rows = [deployed("head", "big", 8000), deployed("head", "small", 8001),
            deployed("worker", "big", 8000), deployed("worker", "small", 8001)]
    units = status_units(rows, GROUPS)
    assert [(u["host"], u["deployment"], u["port"], u["health"]) for u in units] == [
        ("pair1", "big", 8000, "ok"), ("pair1", "small", 8001, "ok")]
    gone = status_row({"host": "worker", "reachable": False, "error": "timed out"})
    units = status_units([rows[0], rows[1], gone], GROUPS)
    assert [(u["deployment"], u["member_containers"]["worker"]) for u in units] == [
        ("big", "unreachable"), ("small", "unreachable")]
    assert all(u["health"] == "unknown (worker unreachable)" for u in units)


def test_the_benchmark_is_a_row_per_deployment_and_the_fleet_adds_them_up():
    """playbooks/benchmark.yml: a row per deployment of a box (the row and its `deployment`), results keyed by
    box/deployment where a box serves several."""
    results = {"spark-1/chat": bench_result([0.1], [[0.01]]), "spark-1/code": bench_result([0.2], [[0.01]])}
    rows = [{**benchmark_row("spark-1", json.dumps(results[key])), "deployment": key.split("/")[1]}
            for key in results]
    table = render_table([*rows, benchmark_fleet(results)], BENCHMARK_COLUMNS).splitlines()
    assert table[0].split()[:2] == ["host", "deployment"]
    assert [line.split()[:2] for line in table[2:]] == [["spark-1", "chat"], ["spark-1", "code"], ["fleet", "-"]]
    assert benchmark_fleet(results)["output_throughput"] == 2 * rows[0]["output_throughput"]
