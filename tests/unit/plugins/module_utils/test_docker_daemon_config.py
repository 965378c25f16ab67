# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import (
    DaemonJsonError,
    apply_changes,
    changed_keys,
    check_values,
    deep_merge,
    effective_service,
    expand,
    find_flag_conflicts,
    flag_keys,
    parse_daemon_json,
    parse_env_file,
    reload_sufficient,
    remove_keys,
    render,
    unit_file_order,
    validate_registry_mirror,
)

NVIDIA = {"path": "nvidia-container-runtime", "args": []}

# What DGX OS / nvidia-ctk leave behind, plus keys an operator added.
SEEDED = {
    "data-root": "/var/lib/docker",
    "log-driver": "json-file",
    "log-opts": {"tag": "{{.Name}}"},
    "runtimes": {"custom": {"path": "/usr/local/bin/custom-runc"}},
}

# --- JSON values for property tests: daemon.json-like nested objects ---
keys = st.sampled_from(["a", "b", "c", "runtimes", "log-opts", "nvidia", "x-y"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3)),
    max_leaves=8,
)
objects = st.dictionaries(keys, values, max_size=5)


# --- parsing ------------------------------------------------------------------------


def test_blank_file_is_an_empty_configuration():
    assert parse_daemon_json("", "/etc/docker/daemon.json") == {}
    assert parse_daemon_json(" \n\t", "/etc/docker/daemon.json") == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"live-restore": true,}', "line 1 column 23"),
        ('{\n  "registry-mirrors": ["https://m.example"\n}', "line 3 column 1"),
        ("{'single': 'quotes'}", "Expecting property name enclosed in double quotes"),
    ],
)
def test_invalid_json_names_the_file_and_the_parse_error(text, fragment):
    with pytest.raises(DaemonJsonError) as err:
        parse_daemon_json(text, "/etc/docker/daemon.json")
    message = str(err.value)
    assert message.startswith("/etc/docker/daemon.json is not valid JSON")
    assert fragment in message
    assert "left as it is" in message


def test_top_level_must_be_an_object():
    with pytest.raises(DaemonJsonError, match="expected a JSON object at the top level, found list"):
        parse_daemon_json('["live-restore"]', "/x/daemon.json")


def test_repeated_key_is_refused_rather_than_silently_dropped():
    with pytest.raises(DaemonJsonError, match="'debug' appears more than once"):
        parse_daemon_json('{"debug": true, "debug": false}', "/x/daemon.json")


# --- merge rules --------------------------------------------------------------------


def test_foreign_keys_survive_and_objects_merge():
    wanted = {
        "registry-mirrors": ["https://mirror.example.com"],
        "live-restore": True,
        "log-opts": {"max-size": "50m", "max-file": "5"},
        "runtimes": {"nvidia": NVIDIA},
    }
    result = apply_changes(SEEDED, wanted)
    assert result["data-root"] == "/var/lib/docker"
    assert result["log-driver"] == "json-file"
    assert result["log-opts"] == {"tag": "{{.Name}}", "max-size": "50m", "max-file": "5"}
    assert result["runtimes"] == {"custom": {"path": "/usr/local/bin/custom-runc"}, "nvidia": NVIDIA}
    assert result["registry-mirrors"] == ["https://mirror.example.com"]


def test_lists_are_replaced_not_appended():
    current = {"registry-mirrors": ["https://old.example"]}
    assert apply_changes(current, {"registry-mirrors": ["https://new.example"]}) == {
        "registry-mirrors": ["https://new.example"]
    }


def test_runtime_args_are_replaced_as_nvidia_ctk_writes_them():
    current = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": ["--debug"]}}}
    assert apply_changes(current, {"runtimes": {"nvidia": NVIDIA}})["runtimes"]["nvidia"] == NVIDIA


def test_existing_key_order_is_kept_and_new_keys_come_last():
    result = apply_changes(SEEDED, {"live-restore": True, "data-root": "/srv/docker"})
    assert list(result) == [*SEEDED, "live-restore"]


def test_remove_top_level_and_nested_keys():
    result = apply_changes(SEEDED, {}, ["log-driver", "runtimes.custom", "runtimes.absent", "absent", "data-root.x"])
    assert result == {"data-root": "/var/lib/docker", "log-opts": {"tag": "{{.Name}}"}, "runtimes": {}}


def test_removal_happens_after_merge():
    assert apply_changes({}, {"debug": True}, ["debug"]) == {}


@pytest.mark.parametrize("path", ["", "runtimes.", ".nvidia", "a..b"])
def test_malformed_removal_paths_are_refused(path):
    with pytest.raises(DaemonJsonError, match="dotted key path"):
        remove_keys({}, [path])


def test_inputs_are_not_mutated():
    current = json.loads(json.dumps(SEEDED))
    wanted = {"log-opts": {"max-size": "1m"}}
    apply_changes(current, wanted, ["runtimes.custom"])
    assert current == SEEDED
    assert wanted == {"log-opts": {"max-size": "1m"}}


@settings(max_examples=100, deadline=None)
@given(objects, objects)
def test_property_every_foreign_key_is_kept(current, wanted):
    result = deep_merge(current, wanted)
    for key, value in current.items():
        assert key in result
        if key not in wanted:
            assert result[key] == value


def leaf_paths(value: object, prefix: tuple = ()) -> dict:
    """{path: value} of every non-object value (and empty object) inside value."""
    if isinstance(value, dict) and value:
        paths: dict = {}
        for key, item in value.items():
            paths.update(leaf_paths(item, (*prefix, key)))
        return paths
    return {prefix: value}


def overridden(path: tuple, wanted: object) -> bool:
    """True when wanted sets path or one of its parents to a non-object value."""
    node = wanted
    for key in path:
        if not isinstance(node, dict):
            return True
        if key not in node:
            return False
        node = node[key]
    return True


@settings(max_examples=150, deadline=None)
@given(objects, objects)
def test_property_nested_foreign_keys_survive_at_every_depth(current, wanted):
    # A runtime or log option somebody else set stays unless wanted replaces it.
    result = leaf_paths(deep_merge(current, wanted))
    for path, value in leaf_paths(current).items():
        if path and not overridden(path, wanted):
            assert result.get(path, "missing") == value, path


@settings(max_examples=100, deadline=None)
@given(objects, objects)
def test_property_wanted_values_win_at_every_leaf(current, wanted):
    result = deep_merge(current, wanted)

    def check(res: object, want: object) -> None:
        if isinstance(want, dict):
            assert isinstance(res, dict)
            for key, value in want.items():
                check(res[key], value)
        else:
            assert res == want

    check(result, wanted)


@settings(max_examples=100, deadline=None)
@given(objects, objects, st.lists(keys, max_size=3))
def test_property_applying_twice_changes_nothing(current, wanted, remove):
    once = apply_changes(current, wanted, remove)
    assert apply_changes(once, wanted, remove) == once
    assert changed_keys(once, apply_changes(once, wanted, remove)) == []


@settings(max_examples=100, deadline=None)
@given(objects, objects)
def test_property_render_round_trips(current, wanted):
    result = apply_changes(current, wanted)
    assert parse_daemon_json(render(result), "daemon.json") == result


@settings(max_examples=100, deadline=None)
@given(objects, st.lists(keys, max_size=3))
def test_property_removed_keys_are_gone_and_others_stay(current, remove):
    result = remove_keys(current, remove)
    assert not set(remove) & set(result)
    assert {k: v for k, v in current.items() if k not in remove} == result


# --- what a change needs --------------------------------------------------------------


def test_changed_keys_lists_added_changed_and_removed():
    before = {"a": 1, "b": 2, "c": 3}
    after = {"a": 1, "b": 20, "d": 4}
    assert changed_keys(before, after) == ["b", "c", "d"]


def test_a_null_value_differs_from_a_missing_key():
    assert changed_keys({}, {"debug": None}) == ["debug"]


@pytest.mark.parametrize(
    ("after", "reload_ok"),
    [
        ({**SEEDED, "registry-mirrors": ["https://m.example"]}, True),
        ({**SEEDED, "runtimes": {"nvidia": NVIDIA}}, True),
        ({**SEEDED, "live-restore": True, "default-runtime": "nvidia", "insecure-registries": ["r:5000"]}, True),
        ({**SEEDED, "log-opts": {"max-size": "50m"}}, False),
        ({**SEEDED, "registry-mirrors": ["https://m.example"], "data-root": "/srv/docker"}, False),
        ({k: v for k, v in SEEDED.items() if k != "log-driver"}, False),
    ],
)
def test_reload_or_restart(after, reload_ok):
    assert reload_sufficient(SEEDED, after) is reload_ok


def test_removing_a_reloadable_key_needs_a_restart():
    assert not reload_sufficient({"registry-mirrors": ["https://m.example"]}, {})


# --- values -----------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["https://mirror.example.com", "http://10.0.0.5:5000", "https://m.example/"])
def test_good_mirrors(url):
    assert validate_registry_mirror(url) is None


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("mirror.example.com", "expected an http:// or https:// URL"),
        ("ftp://mirror.example.com", "found scheme 'ftp'"),
        ("https://mirror.example.com/v2/", "host only"),
        ("https://mirror.example.com?x=1", "host only"),
        ("https://user:pw@mirror.example.com", "docker login"),
        ("https://", "no host name"),
        ("https://m.example:port", "not a URL"),
    ],
)
def test_bad_mirrors_say_why(url, why):
    assert why in validate_registry_mirror(url)


def test_check_values_only_checks_changed_keys():
    config = {"registry-mirrors": ["https://m.example/path"], "default-runtime": "nvidia"}
    assert check_values(config, []) == []
    problems = check_values(config, ["registry-mirrors", "default-runtime"])
    assert len(problems) == 2
    assert "host only" in problems[0]
    assert "default-runtime 'nvidia' is not one of the runtimes" in problems[1]


def test_check_values_accepts_a_registered_default_runtime_and_rejects_pathless_runtimes():
    assert check_values({"runtimes": {"nvidia": NVIDIA}, "default-runtime": "nvidia"}, ["default-runtime"]) == []
    assert check_values({"default-runtime": "runc"}, ["default-runtime"]) == []
    assert "needs a non-empty 'path'" in check_values({"runtimes": {"x": {"args": []}}}, ["runtimes"])[0]


# --- flags in the systemd unit ---------------------------------------------------------

DEBIAN_UNIT = """\
[Unit]
Description=Docker Application Container Engine

[Service]
Type=notify
EnvironmentFile=-/etc/default/docker
ExecStart=/usr/sbin/dockerd -H fd:// $DOCKER_OPTS
ExecReload=/bin/kill -s HUP $MAINPID
"""

DGX_DROPIN = """\
[Service]
# reset, then the DGX-style command line
ExecStart=
ExecStart=/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock \\
    --log-opt max-size=10m --data-root=/raid/docker
"""


def test_drop_in_resets_exec_start():
    exec_start, _env, env_files = effective_service([("unit", DEBIAN_UNIT), ("dropin", DGX_DROPIN)])
    assert len(exec_start) == 1
    assert "--data-root=/raid/docker" in exec_start[0]
    assert env_files == ["-/etc/default/docker"]


def test_flags_map_to_daemon_json_keys():
    argv = expand(
        "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock --log-opt max-size=10m "
        "--data-root=/raid/docker -D --registry-mirror https://m.example --add-runtime x=/bin/x --config-file /e",
        {},
    )
    assert flag_keys(argv) == {
        "hosts": "-H",
        "containerd": "--containerd",
        "log-opts": "--log-opt",
        "data-root": "--data-root",
        "debug": "-D",
        "registry-mirrors": "--registry-mirror",
        "runtimes": "--add-runtime",
    }


def test_environment_file_variables_expand():
    env = parse_env_file('# comment\nDOCKER_OPTS="--registry-mirror=https://m.example --debug"\n')
    argv = expand("/usr/sbin/dockerd -H fd:// $DOCKER_OPTS ${UNSET}", env)
    assert argv == ["/usr/sbin/dockerd", "-H", "fd://", "--registry-mirror=https://m.example", "--debug", ""]


def test_conflicts_name_the_key_and_the_flag():
    argv = expand("/usr/sbin/dockerd -H fd:// --registry-mirror=https://flag.example", {})
    conflicts = find_flag_conflicts({"registry-mirrors": ["https://m.example"], "hosts": ["unix://"]}, argv)
    assert conflicts == [
        "'hosts' is set in daemon.json and as the dockerd flag -H in the service's ExecStart",
        "'registry-mirrors' is set in daemon.json and as the dockerd flag --registry-mirror in the service's ExecStart",
    ]


def test_no_conflict_for_keys_only_in_one_place():
    argv = expand("/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock", {})
    assert find_flag_conflicts({"registry-mirrors": [], "runtimes": {"nvidia": NVIDIA}}, argv) == []


def test_unit_file_order_follows_systemd_precedence():
    existing = [
        "/lib/systemd/system/docker.service",
        "/etc/systemd/system/docker.service.d/20-dgx.conf",
        "/lib/systemd/system/docker.service.d/10-vendor.conf",
        "/lib/systemd/system/docker.service.d/20-dgx.conf",
        "/etc/systemd/system/docker.service.d/notes.txt",
        "/etc/systemd/system/containerd.service",
    ]
    assert unit_file_order("docker.service", existing) == [
        "/lib/systemd/system/docker.service",
        "/lib/systemd/system/docker.service.d/10-vendor.conf",
        "/etc/systemd/system/docker.service.d/20-dgx.conf",
    ]
    assert unit_file_order("docker.service", ["/etc/systemd/system/docker.service.d/x.conf"]) == []


def test_render_is_indented_json_with_newline():
    assert render({"runtimes": {"nvidia": NVIDIA}}) == (
        '{\n    "runtimes": {\n        "nvidia": {\n            "path": "nvidia-container-runtime",\n'
        '            "args": []\n        }\n    }\n}\n'
    )
