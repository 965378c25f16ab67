"""Several watched containers on one box: one is stopped per action, chosen by the documented rule (one loading,
else the lowest priority, else the last started), and the others keep serving."""

from __future__ import annotations

import json

import pytest
from conftest import wd
from test_watchdog import parse_textfile, stops

STEADY = 3600  # started an hour ago: past the 300 s grace period


def two(harness, *items, **settings):
    """A harness watching the given container items (names or mappings)."""
    return harness(containers=list(items), **settings)


def stop_line(h, index: int = 0) -> dict:
    return h.events("stop")[index]


def test_two_over_the_threshold_only_the_lowest_priority_is_stopped(harness, tmp_path):
    state = tmp_path / "state"
    h = two(harness, {"name": "chat", "priority": 500}, {"name": "batch", "priority": 10}, state_dir=str(state))
    h.started(ago_s=STEADY, name="chat")
    h.started(ago_s=STEADY + 100, name="batch")  # started first: priority decides, not the start
    h.step(50)
    h.run_for(3, used_pct=95)
    assert stops(h) == ["/containers/batch/stop?t=10"]
    assert h.docker.containers["chat"].running, "the other deployment was stopped too"
    assert h.dog.watched[0].state == "armed"
    line = stop_line(h)
    assert (line["container"], line["chosen_by"], line["priority"]) == ("batch", "priority", 10)
    assert line["others_running"] == ["chat"]
    record = json.loads((state / "stopped" / "batch.json").read_text())
    assert (record["container"], record["chosen_by"], record["priority"]) == ("batch", "priority", 10)
    assert record["others_running"] == ["chat"]
    assert not (state / "stopped" / "chat.json").exists()


def test_loading_beats_priority(harness):
    h = two(harness, {"name": "steady-low", "priority": 0}, {"name": "loading-high", "priority": 1000})
    h.started(ago_s=STEADY, name="steady-low")
    h.started(ago_s=20, name="loading-high")
    h.step(50)
    h.run_for(2, used_pct=97)  # over the loading one's startup threshold (96)
    assert stops(h) == ["/containers/loading-high/stop?t=10"]
    assert stop_line(h)["chosen_by"] == "loading"
    assert stop_line(h)["phase"] == "startup"
    assert h.docker.containers["steady-low"].running


def test_of_several_loading_the_most_recently_started_goes_first(harness):
    h = two(harness, {"name": "young", "priority": 0}, {"name": "younger", "priority": 1000}, "steady")
    h.started(ago_s=60, name="young")
    h.started(ago_s=30, name="younger")
    h.started(ago_s=STEADY, name="steady")
    h.step(50)
    h.run_for(2, used_pct=97)
    assert stops(h) == ["/containers/younger/stop?t=10"]
    assert stop_line(h)["chosen_by"] == "loading"
    assert h.docker.containers["young"].running and h.docker.containers["steady"].running


def test_priority_beats_last_started(harness):
    h = two(harness, {"name": "old-low", "priority": 50}, {"name": "new-default"})
    h.started(ago_s=STEADY * 5, name="old-low")
    h.started(ago_s=STEADY, name="new-default")
    h.step(50)
    h.run_for(2, used_pct=95)
    assert stops(h) == ["/containers/old-low/stop?t=10"]
    assert (stop_line(h)["chosen_by"], stop_line(h)["priority"]) == ("priority", 50)
    assert h.docker.containers["new-default"].running


@pytest.mark.parametrize("order", [("first", "second"), ("second", "first")])
def test_a_priority_tie_goes_to_the_last_started_whatever_the_config_order(harness, order):
    h = two(harness, {"name": order[0], "priority": 7}, {"name": order[1], "priority": 7}, {"name": "kept"})
    h.started(ago_s=STEADY * 2, name="first")
    h.started(ago_s=STEADY, name="second")
    h.started(ago_s=60 * STEADY, name="kept")  # oldest, but a higher priority (100)
    h.step(50)
    h.run_for(2, used_pct=95)
    assert stops(h) == ["/containers/second/stop?t=10"]
    assert stop_line(h)["chosen_by"] == "last_started"
    assert sorted(stop_line(h)["others_running"]) == ["first", "kept"]
    assert h.docker.containers["first"].running and h.docker.containers["kept"].running


def test_a_single_running_container_is_chosen_as_the_only_one(harness):
    h = two(harness, "vllm", "absent")
    h.started(ago_s=STEADY)
    h.step(50)
    h.run_for(1, used_pct=95)
    assert stops(h) == ["/containers/vllm/stop?t=10"]
    assert (stop_line(h)["chosen_by"], stop_line(h)["others_running"]) == ("only_running", [])


def test_the_hard_ceiling_stops_one_too(harness):
    h = two(harness, {"name": "a", "priority": 1}, {"name": "b", "priority": 2})
    h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.step(50)
    h.step(99)
    h.run_for(0.5, used_pct=99)
    assert stops(h) == ["/containers/a/stop?t=10"]
    assert (stop_line(h)["trigger"], stop_line(h)["chosen_by"]) == ("ceiling", "priority")
    assert h.docker.containers["b"].running


def test_the_next_is_stopped_only_after_the_cooldown_if_memory_is_still_high(harness, tmp_path):
    state = tmp_path / "state"
    h = two(harness, {"name": "a", "priority": 1}, {"name": "b", "priority": 2}, cooldown_s=20,
            state_dir=str(state))
    h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.step(50)
    h.run_for(1, used_pct=95)
    assert stops(h) == ["/containers/a/stop?t=10"]
    # Memory stays high (what holds it is elsewhere): the stop was answered, so no kill, and nothing else is
    # stopped during the cool-down.
    h.run_for(19, used_pct=95)
    assert stops(h) == ["/containers/a/stop?t=10"], "the next was stopped before the cool-down was over"
    assert h.docker.actions("kill") == []
    assert h.docker.containers["b"].running
    h.run_for(2, used_pct=95)
    assert stops(h) == ["/containers/a/stop?t=10", "/containers/b/stop?t=10"]
    assert h.events("cooldown_over")[0]["container"] == "a"
    assert (stop_line(h, 1)["container"], stop_line(h, 1)["chosen_by"]) == ("b", "only_running")
    # The first stays stopped: the watchdog never starts a container, and its stop stays on record.
    assert not h.docker.containers["a"].running
    assert h.dog.watched[0].state == "idle"
    assert {p.name for p in (state / "stopped").iterdir()} == {"a.json", "b.json"}
    assert all(c.path.split("?")[0].rsplit("/", 1)[1] in ("json", "stop") for c in h.docker.calls)


def test_memory_that_recovers_after_one_stop_stops_no_other(harness):
    h = two(harness, {"name": "a", "priority": 1}, {"name": "b", "priority": 2}, cooldown_s=5)
    h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.step(50)
    h.run_for(1, used_pct=95)
    h.run_for(30, used_pct=70)  # the stop freed the memory
    assert stops(h) == ["/containers/a/stop?t=10"]
    assert h.docker.containers["b"].running
    assert h.dog.watched[1].state == "armed"


def test_the_chosen_containers_threshold_decides(harness):
    # "loading" goes first and is allowed its startup threshold (96) while "steady" (90) serves beside it: the
    # box is over only when used% is over the threshold of the container that would be stopped.
    h = two(harness, "steady", "loading")
    h.started(ago_s=STEADY, name="steady")
    h.started(ago_s=20, name="loading")
    h.step(50)
    h.run_for(10, used_pct=93)
    assert stops(h) == []
    over = h.events("over_threshold")
    assert over == [], over
    h.run_for(1, used_pct=96.5)
    assert stops(h) == ["/containers/loading/stop?t=10"]
    assert stop_line(h)["threshold"] == 96


def test_the_grace_period_ends_and_the_choice_moves_to_priority(harness):
    h = two(harness, {"name": "keep", "priority": 900}, {"name": "drop", "priority": 100}, cooldown_s=5)
    h.started(ago_s=STEADY, name="drop")
    h.started(ago_s=295, name="keep")  # 5 s of grace left: chosen first while it lasts
    h.step(50)
    assert h.dog.choose()[0].cfg.name == "keep"
    h.run_for(7, used_pct=60)
    assert h.dog.choose() == (h.dog.watched[1], "priority")
    h.run_for(1, used_pct=95)
    assert stops(h) == ["/containers/drop/stop?t=10"]


def test_a_dry_run_names_the_one_it_would_stop(harness):
    h = two(harness, {"name": "a", "priority": 1}, "b", dry_run=True)
    h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.run_for(2, used_pct=95)
    assert h.docker.actions() == []
    lines = h.events("stop")
    assert [(e["container"], e["chosen_by"], e["dry_run"]) for e in lines] == [("a", "priority", True)]


def test_textfile_shows_each_priority_and_the_next_to_stop(harness, tmp_path):
    path = tmp_path / "wd.prom"
    h = two(harness, {"name": "a", "priority": 1}, {"name": "b", "priority": 2}, "c", textfile=str(path))
    h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.run_for(2, used_pct=60)
    m = parse_textfile(path)
    assert [m[f'sparkfleet_watchdog_priority{{container="{n}"}}'] for n in "abc"] == [1, 2, 100]
    assert [m[f'sparkfleet_watchdog_next_to_stop{{container="{n}"}}'] for n in "abc"] == [1, 0, 0]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1001, "out of range; expected a value between 0 and 1000"),
        (-1, "out of range"),
        (2.5, "not a whole number"),
        ("high", "not a number"),
        (True, "not a number"),
    ],
)
def test_a_priority_outside_0_to_1000_is_refused(value, message):
    with pytest.raises(wd.ConfigError) as refused:
        wd.parse_config({"containers": ["a", {"name": "b", "priority": value}]})
    text = str(refused.value)
    assert text.startswith("containers[1].priority (b)") and message in text, text
    assert "the lowest priority is stopped first" in text


def test_priority_defaults_to_100_and_is_kept_as_an_integer():
    config = wd.parse_config({"containers": ["a", {"name": "b", "priority": 5.0}]})
    assert [(c.name, c.priority) for c in config.containers] == [("a", 100), ("b", 5)]
    assert isinstance(config.containers[1].priority, int)


def test_a_new_choice_while_confirming_starts_the_count_again(harness):
    # samples_to_act counts samples over the threshold of one container: when the one that would be stopped
    # changes (here someone else stops it during the confirmation), the other's count starts from its own first.
    h = two(harness, {"name": "a", "priority": 1}, {"name": "b", "priority": 2})
    box = h.started(ago_s=STEADY, name="a")
    h.started(ago_s=STEADY, name="b")
    h.step(50)
    box.running = False  # docker stop a, by hand; the inspection sent at the first sample over says so
    h.step(91)
    assert h.events("over_threshold")[0]["container"] == "a"
    h.step(91)
    h.step(91)
    assert stops(h) == [], "b was stopped on samples counted for a"
    h.step(91)
    assert stops(h) == ["/containers/b/stop?t=10"]
    assert [e["container"] for e in h.events("over_threshold")] == ["a", "b"]
