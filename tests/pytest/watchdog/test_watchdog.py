"""The memory watchdog against a fake /proc, a fake clock and a fake Docker API."""

from __future__ import annotations

import json
import math

import pytest
from conftest import wd

STOP = "/containers/vllm/stop?t=10"


def stops(h) -> list[str]:
    return [c.path for c in h.docker.actions("stop")]


# ------------------------------------------------------------------ thresholds and phases


def test_steady_threshold_acts_after_n_consecutive_samples(harness):
    h = harness()
    h.started(ago_s=3600)
    h.step(50)
    assert h.dog.watched[0].state == "armed"
    h.step(91)
    h.step(91)
    assert stops(h) == [], "acted before samples_to_act (3) samples"
    h.step(91)
    assert stops(h) == [STOP]
    stop = h.events("stop")[0]
    assert stop["phase"] == "steady"
    assert stop["threshold"] == 90
    assert stop["result"] == "requested"
    assert stop["used_pct"] == pytest.approx(91, abs=0.01)
    assert {"mem_available_kib", "psi_some_avg10", "swap_used_kib", "took_ms"} <= set(stop)


def test_grace_period_allows_the_startup_threshold(harness):
    h = harness()
    h.started(ago_s=10)
    h.run_for(60, used_pct=93)  # over steady (90), under startup (96): weights loading
    assert stops(h) == []
    assert h.events("state")[0]["phase"] == "startup"
    h.step(96.5)
    h.step(96.5)
    h.step(96.5)
    assert stops(h) == [STOP]
    assert h.events("stop")[0]["threshold"] == 96


def test_grace_is_counted_from_started_at_not_from_watchdog_start(harness):
    h = harness()
    h.started(ago_s=295)  # the watchdog starts late: only 5 s of grace are left
    h.run_for(4, used_pct=93)
    assert stops(h) == []
    h.run_for(2, used_pct=93)
    assert stops(h) == [STOP]
    phase = h.events("phase")[0]
    assert (phase["previous"], phase["phase"], phase["threshold"]) == ("startup", "steady", 90)


@pytest.mark.parametrize("offset", [i / 10 for i in range(20)])
def test_the_end_of_the_grace_period_is_logged_whenever_it_falls(harness, offset):
    # The container is inspected every inspect_interval_s (2 s); the grace period ends at any
    # moment between two inspections or on one. Either way the change of phase is logged once.
    h = harness()
    h.started(ago_s=300 - 3 - offset)
    h.run_for(6, used_pct=80)
    phases = [(e["previous"], e["phase"], e["threshold"]) for e in h.events("phase")]
    assert phases == [("startup", "steady", 90)], h.out.getvalue()


def test_a_restart_starts_a_new_grace_period(harness):
    h = harness(cooldown_s=5)
    box = h.started(ago_s=3600)
    h.run_for(3, used_pct=80)
    assert h.dog.threshold(h.dog.watched[0]) == ("steady", 90)
    box.started_at = h.clock.time()  # docker restart vllm
    h.run_for(3, used_pct=80)  # the next inspect sees the new StartedAt
    assert h.events("restarted"), h.out.getvalue()
    h.run_for(30, used_pct=93)
    assert stops(h) == [], "a restarted container got the steady threshold in its grace period"


def test_hard_ceiling_acts_at_once_even_in_grace(harness):
    h = harness()
    h.started(ago_s=1)
    h.step(50)
    h.step(98.5)
    assert stops(h) == [STOP]
    stop = h.events("stop")[0]
    assert (stop["trigger"], stop["threshold"], stop["phase"]) == ("ceiling", 98, "startup")


# ------------------------------------------------------------------ hysteresis and re-check


def test_a_dip_inside_the_hysteresis_band_does_not_reset_the_count(harness):
    h = harness()
    h.started(ago_s=3600)
    for used in (50, 91, 89.5, 91):
        h.step(used)
    assert stops(h) == []
    h.step(91)
    assert stops(h) == [STOP]


def test_a_dip_below_the_band_resets_the_count(harness):
    h = harness()
    h.started(ago_s=3600)
    for used in (50, 91, 91, 88.5, 91, 91, 50, 91, 91, 50):
        h.step(used)
    assert stops(h) == []
    assert len(h.events("over_threshold")) == 3
    assert len(h.events("below_threshold")) == 3


def test_recheck_just_before_acting_sees_memory_fall(harness):
    h = harness()
    h.started(ago_s=3600)
    h.step(50)
    h.step(92)
    h.step(92)
    # Memory is freed between the third sample and the re-read made just before acting.
    h.before_reread(lambda: h.proc.set(60))
    h.step()
    assert stops(h) == []
    cleared = h.events("recheck_cleared")
    assert len(cleared) == 1
    assert cleared[0]["used_pct"] == pytest.approx(60, abs=0.01)


def test_meminfo_unreadable_at_the_recheck_stops_nothing_and_the_loop_goes_on(harness):
    h = harness(containers=["vllm", "vllm-big"])
    h.started(ago_s=3600)
    h.started(ago_s=3600, name="vllm-big")
    h.step(50)
    h.step(92)
    h.step(92)
    # meminfo turns unreadable between the third sample and the re-read before acting.
    h.before_reread(lambda: (h.proc.root / "meminfo").write_text("MemTotal: 1 kB\nMemAvailable:\n"))
    assert h.step() == h.config.poll_slow_s
    assert h.docker.actions() == []
    assert h.events("meminfo_error")[0]["error"].startswith("meminfo line 'MemAvailable:'")
    h.run_for(1, used_pct=92)
    assert h.events("meminfo_ok")
    # One of the two, once meminfo reads again (the same start, the same priority: the later in the config).
    assert stops(h) == ["/containers/vllm-big/stop?t=10"], "did not act once meminfo read again"
    assert h.docker.containers["vllm"].running


def test_recheck_sees_a_restart_and_applies_the_grace_threshold(harness):
    # Docker restarted the container just before memory crossed the steady threshold: the inspection sent at the
    # first sample over it says so before the crossing is confirmed, and the grace period's threshold applies.
    h = harness()
    box = h.started(ago_s=3600)
    h.step(50)
    h.docker.hooks["json"] = lambda: setattr(box, "started_at", h.clock.time())
    h.step(93)
    h.step(93)
    h.step(93)
    assert stops(h) == []
    restarted = h.events("restarted")
    assert restarted and restarted[0]["threshold"] == 96, h.out.getvalue()
    h.run_for(5, used_pct=93)
    assert stops(h) == []
    h.run_for(0.2, used_pct=96.5)
    assert stops(h) == [STOP]
    assert h.events("stop")[0]["threshold"] == 96


# ------------------------------------------------------------------ actions


def test_stop_then_kill_when_memory_does_not_recover(harness):
    h = harness(kill_after_s=5, stop_timeout_s=30)
    h.docker.stop_takes = 30  # the container ignores SIGTERM
    h.started(ago_s=3600)
    h.step(50)
    while not stops(h):
        h.step(95)
    assert stops(h) == ["/containers/vllm/stop?t=30"]
    h.run_for(4.9, used_pct=95)
    assert h.docker.actions("kill") == [], "killed before kill_after_s"
    h.run_for(0.2, used_pct=95)
    assert [c.path for c in h.docker.actions("kill")] == ["/containers/vllm/kill"]
    kill = h.events("kill")[0]
    assert kill["reason"] == "memory not recovered after stop"
    assert kill["after_s"] >= 5
    assert not h.docker.containers["vllm"].running
    assert h.dog.watched[0].state == "cooldown"


def test_no_kill_when_memory_recovers_while_stopping(harness):
    h = harness(kill_after_s=2, stop_timeout_s=10)
    h.docker.stop_takes = 0.5  # vLLM shuts down cleanly within half a second
    h.started(ago_s=3600)
    h.step(50)
    h.run_for(0.5, used_pct=95)
    assert len(stops(h)) == 1
    h.run_for(5, used_pct=40)  # memory was freed by the shutdown
    assert h.events("recovered")
    assert h.docker.actions("kill") == []
    assert h.docker.wait_for(lambda: not h.docker.containers["vllm"].running)


def test_cooldown_before_rearming(harness):
    h = harness(cooldown_s=60)
    box = h.started(ago_s=3600)
    h.step(50)
    h.run_for(1, used_pct=95)
    assert len(stops(h)) == 1
    h.run_for(1, used_pct=50)
    assert h.dog.watched[0].state == "cooldown"
    # Someone starts it again at once (steady phase faked) and memory is high again.
    box.running, box.started_at = True, h.clock.time() - 3600
    h.run_for(50, used_pct=95)
    assert len(stops(h)) == 1, "acted again during the cool-down"
    h.run_for(15, used_pct=95)
    assert len(stops(h)) == 2
    assert h.events("cooldown_over")


def test_a_stop_is_recorded_with_why_until_the_container_runs_again(harness, tmp_path):
    state = tmp_path / "state"
    h = harness(state_dir=str(state), cooldown_s=5)
    box = h.started(ago_s=3600)
    h.step(50)
    h.run_for(1, used_pct=95)
    assert len(stops(h)) == 1
    record = json.loads((state / "stopped" / "vllm.json").read_text())
    assert record["container"] == "vllm"
    assert (record["phase"], record["threshold"], record["trigger"]) == ("steady", 90.0, "threshold")
    assert record["used_pct"] == 95.0
    assert record["stopped_at"].endswith("Z") and record["stopped_at_epoch"] <= h.clock.time()
    # Stopped, cool-down over: the record stays while the container does not run.
    h.run_for(10, used_pct=40)
    assert (state / "stopped" / "vllm.json").exists()
    assert h.events("stop_cleared") == []
    # Someone starts it again: the stop is no longer in force.
    box.running, box.started_at = True, h.clock.time()
    h.run_for(3, used_pct=40)
    assert not (state / "stopped" / "vllm.json").exists()
    assert len(h.events("stop_cleared")) == 1


def stop_on_record(harness, state) -> float:
    """A first watchdog stops vllm and records it in state; returns the stop's epoch on record."""
    first = harness(state_dir=str(state))
    first.started(ago_s=3600)
    first.run_for(1, used_pct=95)
    return json.loads((state / "stopped" / "vllm.json").read_text())["stopped_at_epoch"]


def test_a_stop_on_record_survives_a_restart_of_the_watchdog(harness, tmp_path):
    state = tmp_path / "state"
    recorded = stop_on_record(harness, state)
    # A new watchdog (after a reboot) finds the container stopped: the record stays; a container still running
    # from before the stop (started earlier) does not clear it either.
    second = harness(state_dir=str(state))
    assert second.dog.watched[0].stop_recorded_at == recorded
    second.docker.run("vllm", recorded - 10)
    second.run_for(3, used_pct=40)
    assert (state / "stopped" / "vllm.json").exists()


def test_a_stop_that_cannot_be_recorded_is_still_made_and_logged(harness, tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the directory should be")
    h = harness(state_dir=str(blocker))
    h.started(ago_s=3600)
    h.run_for(1, used_pct=95)
    assert len(stops(h)) == 1
    assert h.events("record_error")[0]["container"] == "vllm"


def test_no_stop_record_without_a_state_dir_or_in_a_dry_run(harness, tmp_path):
    h = harness(dry_run=True, state_dir=str(tmp_path / "dry"))
    h.started(ago_s=3600)
    h.run_for(1, used_pct=95)
    assert not (tmp_path / "dry").exists()
    h = harness()
    h.started(ago_s=3600)
    h.run_for(1, used_pct=95)
    assert len(stops(h)) == 1 and h.events("stop_recorded") == []


def test_dry_run_logs_and_stops_nothing(harness):
    h = harness(dry_run=True)
    h.started(ago_s=3600)
    h.run_for(2, used_pct=95)
    assert h.docker.actions() == []
    stop = h.events("stop")[0]
    assert stop["dry_run"] is True
    assert stop["result"].startswith("dry-run")
    assert h.docker.containers["vllm"].running


def test_acts_only_on_configured_containers(harness):
    h = harness(containers=["vllm"])
    h.started(ago_s=3600, name="vllm-sidecar")
    h.started(ago_s=3600, name="grafana")
    h.run_for(3, used_pct=99)
    assert h.docker.actions() == []
    assert all(c.path.startswith("/containers/vllm/") for c in h.docker.calls)


@pytest.mark.parametrize("present", [False, True])
def test_absent_or_stopped_container_is_idle_not_an_error(harness, present):
    h = harness()
    if present:
        h.docker.run("vllm", h.clock.time() - 3600, running=False)
    h.run_for(5, used_pct=99)
    assert h.docker.actions() == []
    assert h.dog.watched[0].state == "idle"
    assert h.events("docker_unavailable") == []
    assert h.step(99) == h.config.poll_slow_s  # nothing to protect: slow polling


def test_docker_socket_unavailable_keeps_running_logs_once_and_retries(harness):
    h = harness(docker_up=False)
    h.run_for(10, used_pct=50)
    assert len(h.events("docker_unavailable")) == 1
    assert h.dog.docker_errors >= 4  # retried every inspect_interval_s (2 s)
    h.docker.start()
    h.started(ago_s=3600)
    h.run_for(3, used_pct=50)
    assert len(h.events("docker_available")) == 1
    assert h.dog.watched[0].state == "armed"


def test_failed_stop_escalates_to_kill_not_to_more_stops(harness):
    h = harness(retry_s=1, kill_after_s=3)
    h.started(ago_s=3600)
    h.step(50)
    h.docker.status["stop"] = 500
    h.run_for(0.5, used_pct=95)
    assert len(stops(h)) == 1
    failed = h.events("action_failed")[0]
    assert (failed["action"], failed["http_status"]) == ("stop", 500)
    assert failed["next"].startswith("kill in ")
    h.run_for(2.3, used_pct=95)
    assert len(stops(h)) == 1, "sent stop again instead of escalating"
    assert h.docker.actions("kill") == [], "killed before kill_after_s"
    h.run_for(0.5, used_pct=95)
    assert [c.path for c in h.docker.actions("kill")] == ["/containers/vllm/kill"]
    kill = h.events("kill")[0]
    assert kill["reason"] == "memory not recovered after stop (the stop failed)"
    assert kill["after_s"] >= 3
    assert not h.docker.containers["vllm"].running
    assert h.dog.watched[0].state == "cooldown"
    assert len(stops(h)) == 1


def test_failed_stop_then_recovery_kills_nothing(harness):
    h = harness(kill_after_s=3)
    h.started(ago_s=3600)
    h.step(50)
    h.docker.status["stop"] = 500
    h.run_for(0.5, used_pct=95)
    assert h.events("action_failed")
    h.run_for(5, used_pct=60)  # memory came back by itself
    assert h.docker.actions("kill") == []
    assert len(stops(h)) == 1
    assert h.events("recovered")
    assert h.dog.watched[0].state == "cooldown"


def test_docker_down_at_the_moment_of_acting_is_retried(harness):
    h = harness(retry_s=1, kill_after_s=3)
    h.started(ago_s=3600)
    h.step(50)
    h.docker.close()
    h.run_for(0.3, used_pct=95)
    failed = h.events("action_failed")
    assert failed and failed[0]["action"] == "stop" and failed[0]["retry_in_s"] == 1, failed
    h.docker.start()
    h.run_for(1.5, used_pct=95)
    assert len(stops(h)) == 1


# ------------------------------------------------------------------ polling and output


def test_polling_is_fast_near_the_threshold_and_slow_far_from_it(harness):
    # Flat memory (the first sample: no rate measured yet): the headroom divided by the
    # fastest plausible fill rate (16 %/s), clamped to [poll_fast_s, poll_slow_s].
    expected = {50: 1.0, 80: 10 / 16, 85: 5 / 16, 89.5: 0.05, 91: 0.05}
    for used, interval in expected.items():
        h = harness(samples_to_act=1)  # 91 is acted on at once (then polled fast while stopping)
        h.started(ago_s=3600)
        assert h.step(used) == pytest.approx(interval), f"at {used}%"
    assert h.config.poll_fast_s <= 0.1


def test_polling_follows_the_measured_rise(harness):
    # 50% -> 85% in one poll: 35 points per second, faster than the assumed 16. The next
    # poll comes after half the time memory would need at that rate to reach 90%.
    h = harness()
    h.started(ago_s=3600)
    assert h.step(50) == 1.0
    interval = h.step(85)
    rate = h.dog.rate_pct_s
    assert rate == pytest.approx(35 * (1 - math.exp(-1 / wd.RATE_TAU_S)))
    assert interval == pytest.approx(wd.RATE_LEAD * 5 / rate)
    assert interval < 5 / 16
    # Memory stops rising: the measured rate fades, the interval grows back to the
    # headroom / fill rate bound.
    for _sample in range(20):
        interval = h.step(85)
    assert interval == pytest.approx(5 / 16, rel=0.01)
    # Falling memory never lengthens the interval beyond that bound.
    assert h.step(70) == pytest.approx(1.0)


def test_confirmation_rereads_without_waiting_a_poll_period(harness):
    h = harness()
    h.started(ago_s=3600)
    h.step(50)
    assert h.step(91) == h.config.confirm_interval_s == 0.02
    assert h.step(91) == 0.02
    assert stops(h) == []
    h.step(91)
    assert stops(h) == [STOP]
    over = h.events("over_threshold")[0]
    stop = h.events("stop")[0]
    assert over["rate_pct_per_s"] > 0
    assert "rate_pct_per_s" in stop


def test_a_single_spurious_sample_stops_nothing(harness):
    h = harness()
    h.started(ago_s=3600)
    h.run_for(3, used_pct=80)
    assert h.step(93) == 0.02  # one sample over the threshold: re-read soon...
    h.run_for(3, used_pct=80)  # ...and it was alone
    assert stops(h) == []
    assert [e["event"] for e in h.events()][-2:] == ["over_threshold", "below_threshold"]


# 5, 10 and 20 GB/s of a Spark's 128 GB, as percentage points of MemTotal per second
# (the stricter reading: MemTotal, 121.7 GiB, is 130.7 GB, which would make them slower).
RAMPS_GB_PER_S = [5, 10, 20]
# Moments the ramp starts at, spread over a whole poll period at 80% (the slowest today:
# 1 s), so that every position of the ramp against the poll loop is tried.
PHASES_S = [i / 20 for i in range(20)]


def ramp_latency(h, rate_pct_s: float, phase_s: float, start: float = 80.0, top: float = 95.0) -> float:
    """Memory flat at `start`, then rising at rate_pct_s from `phase_s` after a settled poll
    loop (3 s) up to `top`; returns the simulated seconds from the crossing of the steady
    threshold (90%) to the stop request."""
    h.started(ago_s=3600)
    t0 = h.clock.monotonic() + 3.0 + phase_s
    crossed = t0 + (90.0 - start) / rate_pct_s
    while not stops(h):
        now = h.clock.monotonic()
        assert now < crossed + 10, "no stop 10 s after the crossing"
        h.step(min(top, start + rate_pct_s * max(0.0, now - t0)))
    sent = next(at for method, path, at in h.sent_at if path == STOP)
    assert sent >= crossed, "stopped before memory crossed the threshold"
    return sent - crossed


@pytest.mark.parametrize("gb_per_s", RAMPS_GB_PER_S)
def test_a_ramp_from_80_to_95_percent_is_stopped_within_250_ms_of_the_crossing(harness, gb_per_s):
    rate = 100 * gb_per_s / 128
    latencies = [ramp_latency(harness(), rate, phase) for phase in PHASES_S]
    worst = max(latencies)
    assert worst <= 0.25, f"{gb_per_s} GB/s: stop {worst * 1000:.0f} ms after the crossing (all: {latencies})"


@pytest.mark.parametrize("latency_s", [0.1, 0.3])
def test_a_slow_docker_engine_does_not_delay_the_stop(harness, latency_s):
    # Every Docker answer takes 100 or 300 ms (a busy box): the periodic inspections and the one sent at the
    # crossing are answered while the loop goes on sampling; a 20 GB/s ramp is still stopped within 250 ms of the
    # crossing, on what Docker said last.
    rate = 100 * 20 / 128
    latencies = [ramp_latency(harness(docker_latency_s=latency_s), rate, phase) for phase in PHASES_S]
    worst = max(latencies)
    assert worst <= 0.25, f"Docker {latency_s}s: stop {worst * 1000:.0f} ms after the crossing (all: {latencies})"


@pytest.mark.parametrize("gb_per_s", [30, 40])
def test_a_ramp_faster_than_the_assumed_fill_rate_is_followed_once_seen(harness, gb_per_s):
    # 23-31 %/s, above fill_rate_pct_per_s (16): from 50% the ramp is seen by a poll before
    # it reaches 90%, and the measured rate shortens the polls from there.
    rate = 100 * gb_per_s / 128
    latencies = [ramp_latency(harness(), rate, phase, start=50.0) for phase in PHASES_S]
    worst = max(latencies)
    assert worst <= 0.25, f"{gb_per_s} GB/s: stop {worst * 1000:.0f} ms after the crossing (all: {latencies})"


def test_prometheus_textfile(harness, tmp_path):
    path = tmp_path / "wd.prom"
    h = harness(textfile=str(path))
    h.started(ago_s=3600)
    h.run_for(2, used_pct=95)
    text = path.read_text()
    assert "sparkfleet_watchdog_up 1" in text
    assert 'sparkfleet_watchdog_actions_total{container="vllm",action="stop"} 1' in text
    assert 'sparkfleet_watchdog_state{container="vllm",state="cooldown"} 1' in text
    assert 'sparkfleet_watchdog_threshold_percent{container="vllm"} 90' in text
    assert "sparkfleet_watchdog_memory_used_percent 95.000" in text


def parse_textfile(path) -> dict[str, float]:
    """The samples of a Prometheus text file, by name and labels; every family declared once, before its samples."""
    samples: dict[str, float] = {}
    declared: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in declared, f"{name} declared twice"
            declared.append(name)
        elif not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            assert key.split("{")[0] == declared[-1], f"{key} outside its family"
            samples[key] = float(value)
    return samples


def test_textfile_shows_thresholds_and_the_stop_in_force_until_the_container_runs_again(harness, tmp_path):
    path = tmp_path / "wd.prom"
    h = harness(textfile=str(path), cooldown_s=5, containers=[{"name": "vllm", "startup_threshold": 95}])
    box = h.started(ago_s=10)
    h.run_for(2, used_pct=60)
    m = parse_textfile(path)
    v = '{container="vllm"}'
    assert (m[f"sparkfleet_watchdog_threshold_percent{v}"], m[f"sparkfleet_watchdog_phase_startup{v}"]) == (95, 1)
    assert m[f"sparkfleet_watchdog_steady_threshold_percent{v}"] == 90
    assert m[f"sparkfleet_watchdog_startup_threshold_percent{v}"] == 95
    assert m[f"sparkfleet_watchdog_ceiling_percent{v}"] == 98
    assert m[f"sparkfleet_watchdog_grace_seconds{v}"] == 300
    assert m[f"sparkfleet_watchdog_stop_in_force{v}"] == 0
    assert f"sparkfleet_watchdog_last_stop_timestamp_seconds{v}" not in m, "a stop that never happened"
    h.run_for(1, used_pct=99)  # the hard ceiling, in the grace period
    stopped_at = h.clock.time()
    h.run_for(10, used_pct=40)
    m = parse_textfile(path)
    assert m[f"sparkfleet_watchdog_stop_in_force{v}"] == 1
    assert m['sparkfleet_watchdog_actions_total{container="vllm",action="stop"}'] == 1
    assert stopped_at - 2 <= m[f"sparkfleet_watchdog_last_stop_timestamp_seconds{v}"] <= stopped_at
    box.running, box.started_at = True, h.clock.time()  # started again
    h.run_for(3, used_pct=40)
    m = parse_textfile(path)
    assert m[f"sparkfleet_watchdog_stop_in_force{v}"] == 0
    assert m[f"sparkfleet_watchdog_last_stop_timestamp_seconds{v}"] <= stopped_at
    assert list(tmp_path.glob("*.tmp")) == [], "a temporary file was left beside the textfile"


def test_textfile_stop_in_force_comes_from_the_record_after_a_restart_of_the_watchdog(harness, tmp_path):
    state = tmp_path / "state"
    recorded = stop_on_record(harness, state)
    second = harness(state_dir=str(state), textfile=str(tmp_path / "wd.prom"))
    second.docker.run("vllm", recorded - 10, running=False)
    second.run_for(3, used_pct=40)
    m = parse_textfile(tmp_path / "wd.prom")
    assert m['sparkfleet_watchdog_stop_in_force{container="vllm"}'] == 1
    assert m['sparkfleet_watchdog_last_stop_timestamp_seconds{container="vllm"}'] == pytest.approx(recorded, abs=0.001)
    assert m['sparkfleet_watchdog_actions_total{container="vllm",action="stop"}'] == 0


def test_textfile_directory_missing_is_said_once_and_written_once_it_exists(harness, tmp_path):
    folder = tmp_path / "node-exporter"
    h = harness(textfile=str(folder / "wd.prom"), textfile_interval_s=15)
    h.started(ago_s=3600)
    h.run_for(40, used_pct=60)
    assert len(h.events("textfile_error")) == 1
    assert "retrying every 15 s" in h.events("textfile_error")[0]["action"]
    folder.mkdir()  # node_exporter installed later
    h.run_for(16, used_pct=60)
    assert parse_textfile(folder / "wd.prom")["sparkfleet_watchdog_up"] == 1
    assert len(h.events("textfile_ok")) == 1
    assert len(h.events("textfile_error")) == 1


def test_one_log_line_per_state_change_not_per_sample(harness):
    h = harness()
    h.started(ago_s=3600)
    h.run_for(120, used_pct=60)
    assert [e["event"] for e in h.events()] == ["state"]


def test_meminfo_errors_are_logged_and_survived(harness):
    h = harness()
    h.started(ago_s=3600)
    h.step(50)
    (h.proc.root / "meminfo").unlink()
    assert h.step() == h.config.poll_slow_s
    h.step()
    assert len(h.events("meminfo_error")) == 1
    h.step(50)
    assert h.events("meminfo_ok")


MALFORMED_MEMINFO = [
    "MemTotal:       127605464 kB\nMemFree:        1000 kB\nMemAvailable:\n",
    "MemTotal:       127605464 kB\nMemAvailable:   kB\n",
    "MemTotal:       lots kB\nMemAvailable:   1000 kB\n",
    "MemTotal:       127605464 kB\nMemAvailable:   -5 kB\n",
    "MemTotal:       1000 kB\nMemAvailable:   2000 kB\n",
    "",
]


@pytest.mark.parametrize("text", MALFORMED_MEMINFO)
def test_malformed_meminfo_is_refused_with_a_clear_error(tmp_path, text):
    (tmp_path / "meminfo").write_text(text)
    with pytest.raises(ValueError, match="meminfo"):
        wd.read_meminfo(str(tmp_path))


@pytest.mark.parametrize("text", MALFORMED_MEMINFO[:2])
def test_malformed_meminfo_stops_nothing_says_so_loudly_and_keeps_watching(harness, tmp_path, text):
    path = tmp_path / "wd.prom"
    h = harness(textfile=str(path))
    h.started(ago_s=3600)
    h.step(95)
    (h.proc.root / "meminfo").write_text(text)
    h.run_for(130)
    assert h.docker.actions() == [], "acted on a meminfo it could not read"
    errors = h.events("meminfo_error")
    assert [e["blind_s"] for e in errors] == [0, 60, 120]
    assert "MemAvailable" in errors[0]["error"]
    assert errors[0]["action"].startswith("nothing is stopped")
    assert "used_pct" not in errors[1], "a blind watchdog logged stale memory figures"
    assert "sparkfleet_watchdog_meminfo_readable 0" in path.read_text()
    h.run_for(1, used_pct=50)
    assert h.events("meminfo_ok")[0]["blind_s"] >= 130
    assert "sparkfleet_watchdog_meminfo_readable 1" in path.read_text()
    h.run_for(2, used_pct=95)
    assert stops(h) == [STOP], "did not act once meminfo read again"


# ------------------------------------------------------------------ parsing


def test_read_meminfo_and_psi(tmp_path):
    (tmp_path / "pressure").mkdir()
    (tmp_path / "meminfo").write_text(
        "MemTotal:       127605464 kB\nMemFree:         1000000 kB\nMemAvailable:   12760546 kB\n"
        "SwapTotal:       1000 kB\nSwapFree:          400 kB\n"
    )
    (tmp_path / "pressure" / "memory").write_text(
        "some avg10=1.50 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=1\n"
    )
    sample = wd.read_meminfo(str(tmp_path))
    assert sample.used_pct == pytest.approx(90.0, abs=0.001)
    assert sample.swap_total_kib - sample.swap_free_kib == 600
    assert wd.read_psi(str(tmp_path)) == {"psi_some_avg10": 1.5, "psi_full_avg10": 0.25}
    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 10 kB\n")
    with pytest.raises(ValueError, match="MemAvailable"):
        wd.read_meminfo(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-29T23:45:48.123456789Z", 1795995948.123456789),
        ("2026-11-29T23:45:48Z", 1795995948.0),
        ("2026-11-30T01:45:48.5+02:00", 1795995948.5),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        ("yesterday", None),
    ],
)
def test_parse_docker_time(text, epoch):
    got = wd.parse_docker_time(text)
    assert got == (pytest.approx(epoch, abs=1e-6) if epoch is not None else None)
