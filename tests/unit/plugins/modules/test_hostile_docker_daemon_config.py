# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile inputs for docker_daemon_config: odd files, odd settings, odd options.

Invariants: a clear error naming the option or file, or a daemon.json that a strict JSON
parser reads, with every key the module did not change exactly as it was; nothing
escapes as a Python exception; nothing on disk changes when the module fails.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.sparkfleet.serving.plugins.module_utils.docker_daemon_config import validate_registry_mirror
from ansible_collections.sparkfleet.serving.plugins.modules import docker_daemon_config
from ansible_collections.sparkfleet.serving.tests.unit.plugins.hostile import (
    assert_clear_failure,
    call_module,
    hostile,
    json_object_texts,
    literal_tree,
    python_values,
    snapshot,
)

NVIDIA = {"path": "nvidia-container-runtime", "args": []}
# Generated cases per property test (derandomized: the same cases every run).
GENERATED_CASES = 150


@contextlib.contextmanager
def box() -> Iterator[Path]:
    """A temporary root with empty systemd unit directories (no flag conflicts from the host)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "etc").mkdir()
        with mock.patch.object(docker_daemon_config, "UNIT_DIRS", (str(root / "units"),)):
            yield root


def run(root: Path, **args: object) -> dict:
    args.setdefault("path", str(root / "etc/daemon.json"))
    args.setdefault("validate", False)
    args.setdefault("backup", False)
    return call_module(docker_daemon_config, args)


def refused_untouched(root: Path, *names: str, **args: object) -> str:
    before = snapshot(root)
    result = run(root, **args)
    msg = assert_clear_failure(result, *names)
    assert snapshot(root) == before, "the module failed but changed files"
    return msg


# --- the classes of the hostile-input report, one case each ---------------------------


def test_a_setting_that_is_nan_or_infinite_is_refused_and_nothing_written():
    for value in (float("nan"), float("inf"), {"max-size": float("-inf")}):
        with box() as root:
            msg = refused_untouched(root, "settings", settings={"log-opts": value})
            assert "NaN" in msg or "Infinity" in msg or "nan" in msg or "inf" in msg


def test_a_foreign_number_too_large_for_a_float_survives_an_unrelated_change():
    with box() as root:
        path = root / "etc/daemon.json"
        path.write_text('{"x": 1e400, "y": 1.10, "z": -0, "big": 123456789012345678901234567890}\n')
        result = run(root, settings={"live-restore": True})
        assert not result["failed"], result
        text = path.read_text()
        assert "Infinity" not in text
        assert literal_tree(text) == {
            "x": ("number", "1e400"),
            "y": ("number", "1.10"),
            "z": ("number", "-0"),
            "big": ("number", "123456789012345678901234567890"),
            "live-restore": True,
        }


def test_non_ascii_text_is_kept_as_text():
    with box() as root:
        path = root / "etc/daemon.json"
        path.write_text('{"labels": ["owner=Zoë", "site=東京"]}\n', encoding="utf-8")
        assert not run(root, settings={"debug": True})["failed"]
        text = path.read_text(encoding="utf-8")
        assert "Zoë" in text
        assert "東京" in text


def test_nan_in_the_existing_file_is_refused_and_the_file_kept():
    with box() as root:
        (root / "etc/daemon.json").write_text('{"x": NaN}\n')
        refused_untouched(root, "daemon.json", settings={"debug": True})


def test_a_mirror_with_a_space_in_the_host_is_refused():
    with box() as root:
        mirrors = ["https://mirror .example.com"]
        msg = refused_untouched(root, "registry-mirrors", settings={"registry-mirrors": mirrors})
        assert "white space" in msg


@pytest.mark.parametrize("url", ["https://[", "https://[::1", "http://host:port", "https://user@host", "https:///x"])
def test_a_mirror_urllib_cannot_split_or_that_is_not_a_host_is_refused_with_a_reason(url):
    assert validate_registry_mirror(url)


def test_a_mirror_without_scheme_is_reported_as_no_scheme():
    why = validate_registry_mirror("mirror.example.com:5000")
    assert "no scheme" in why
    assert "found scheme" not in why


def test_a_foreign_kata_runtime_with_runtime_type_and_options_is_accepted():
    with box() as root:
        path = root / "etc/daemon.json"
        kata = {"runtimeType": "io.containerd.kata.v2", "options": {"ConfigPath": "/etc/kata/config.toml"}}
        path.write_text(json.dumps({"runtimes": {"kata": kata}}))
        result = run(root, settings={"runtimes": {"nvidia": NVIDIA}})
        assert not result["failed"], result
        assert json.loads(path.read_text())["runtimes"] == {"kata": kata, "nvidia": NVIDIA}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"path": "x", "runtimeType": "io.containerd.x.v2"}, "exclude each other"),
        ({"path": "x", "options": {"a": "b"}}, "'options' go with a 'runtimeType'"),
        ({"runtimeType": "io.containerd.x.v2", "runtimeArgs": ["--debug"]}, "'runtimeArgs' go with a 'path'"),
        ({"args": []}, "needs a non-empty 'path' or 'runtimeType'"),
        ("nvidia-container-runtime", "expected an object"),
        ({"path": 3}, "expected a string"),
    ],
)
def test_a_runtime_dockerd_refuses_is_refused(spec, why):
    with box() as root:
        assert why in refused_untouched(root, "runtimes", settings={"runtimes": {"new": spec}})


def test_the_reserved_runtime_name_runc_is_refused():
    with box() as root:
        assert "reserved" in refused_untouched(root, "runc", settings={"runtimes": {"runc": NVIDIA}})


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("registry-mirror", "registry-mirrors"),
        ("insecure-registry", "insecure-registries"),
        ("log-opt", "log-opts"),
        ("live_restore", "live-restore"),
        ("Live-Restore", "live-restore"),
        ("--debug", "debug"),
        ("registry-mirorrs", "registry-mirrors"),
        ("log-opts.max-size", "log-opts"),
        ("runtime.nvidia", "runtimes"),
    ],
)
def test_a_key_that_looks_like_a_mistake_is_refused_with_the_key_meant(key, meant):
    with box() as root:
        msg = refused_untouched(root, key, settings={key: ["x"]})
        assert repr(meant) in msg


def test_an_unknown_key_that_looks_like_nothing_known_is_a_warning():
    with box() as root, mock.patch.object(docker_daemon_config.AnsibleModule, "warn") as warn:
        result = run(root, settings={"some-future-option": True})
        assert not result["failed"], result
        assert "some-future-option" in warn.call_args[0][0]


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"log-opts": {"max-file": 3}}, 'quote numbers: "max-file": "3"'),
        ({"live-restore": "yes"}, "expected a bool"),
        ({"max-concurrent-downloads": 2.5}, "expected a int"),
        ({"registry-mirrors": "https://mirror.example.com"}, "expected a list of strings"),
        ({"features": {"buildkit": "true"}}, "expected a object of booleans"),
    ],
)
def test_a_value_of_the_wrong_type_for_dockerd_is_refused(settings, why):
    with box() as root:
        assert why in refused_untouched(root, next(iter(settings)), settings=settings)


@pytest.mark.parametrize("service", ["../../etc/passwd", "docker", "docker.service/x", "", "a b.service", "é.service"])
def test_a_service_that_is_not_a_unit_name_is_refused(service):
    with box() as root:
        refused_untouched(root, "service", service=service, settings={"debug": True})


def test_a_non_utf8_daemon_json_is_refused_naming_the_file():
    with box() as root:
        path = root / "etc/daemon.json"
        path.write_bytes(b'{"labels": ["caf\xe9"]}')
        msg = refused_untouched(root, str(path), settings={"debug": True})
        assert "UTF-8" in msg


def test_a_path_that_is_a_directory_or_under_a_file_is_refused():
    with box() as root:
        refused_untouched(root, "is a directory", path=str(root / "etc"), settings={"debug": True})
        (root / "etc/file").write_text("x")
        refused_untouched(root, "is a file", path=str(root / "etc/file/daemon.json"), settings={"debug": True})


def test_a_symlinked_daemon_json_is_followed_and_the_link_kept():
    with box() as root:
        target = root / "etc/real.json"
        target.write_text('{"data-root": "/srv/docker"}\n')
        link = root / "etc/daemon.json"
        link.symlink_to(target)
        result = run(root, settings={"live-restore": True})
        assert not result["failed"], result
        assert link.is_symlink()
        assert json.loads(target.read_text()) == {"data-root": "/srv/docker", "live-restore": True}
        assert result["path"] == str(target)


def test_a_dockerd_path_that_is_not_an_executable_is_refused():
    with box() as root:
        refused_untouched(root, "dockerd_path", dockerd_path=str(root / "etc"), validate=True, settings={"debug": True})


def test_odd_unit_files_do_not_break_the_flag_check():
    with box() as root:
        units = root / "units"
        units.mkdir()
        (units / "docker.service").write_bytes(
            b"[Service]\nEnvironment=\"UNBALANCED\nExecStart=/usr/bin/dockerd --debug \xff'\n"
        )
        msg = refused_untouched(root, "debug", settings={"debug": True})
        assert "dockerd flag --debug" in msg


def test_a_remove_path_with_an_empty_part_is_refused():
    with box() as root:
        refused_untouched(root, "runtimes..x", remove=["runtimes..x"])


# --- generated cases --------------------------------------------------------------


def check_outcome(root: Path, original: bytes | None, change: tuple[dict, list[str]], result: dict, before) -> None:
    settings, remove = change
    path = root / "etc/daemon.json"
    if result["failed"]:
        assert_clear_failure(result)
        assert snapshot(root) == before
        return
    if original is None and not path.exists():
        return
    text = path.read_text(encoding="utf-8")
    tree = literal_tree(text)  # strict: raises on NaN / Infinity / invalid JSON
    assert isinstance(tree, dict)
    if original is not None and result["changed"]:
        old = literal_tree(original.decode("utf-8")) if original.strip() else {}
        touched = set(settings) | {p.split(".", 1)[0] for p in remove}
        for key, value in old.items():
            if key not in touched:
                assert tree[key] == value, key


@hostile(GENERATED_CASES)
@given(
    existing=json_object_texts(),
    settings=st.dictionaries(
        st.sampled_from(["labels", "log-opts", "debug", "x-foreign", "runtimes", "registry-mirrors", "data-root"]),
        python_values,
        max_size=3,
    ),
    remove=st.lists(
        st.sampled_from(["x-foreign", "runtimes.nvidia", "log-opts.max-size", "a..b", "debug"]), max_size=2
    ),
)
def test_property_any_file_and_settings_give_a_clear_error_or_strict_json_keeping_foreign_keys(
    existing, settings, remove
):
    with box() as root:
        path = root / "etc/daemon.json"
        original = existing.encode("utf-8")
        path.write_bytes(original)
        before = snapshot(root)
        result = run(root, settings=settings, remove=remove)
        check_outcome(root, original, (settings, remove), result, before)


@hostile(GENERATED_CASES)
@given(content=st.binary(max_size=64) | st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_property_any_bytes_as_daemon_json_give_a_clear_error_or_a_valid_file(content):
    with box() as root:
        (root / "etc/daemon.json").write_bytes(content)
        before = snapshot(root)
        result = run(root, settings={"live-restore": True})
        if result["failed"]:
            assert_clear_failure(result, "daemon.json")
            assert snapshot(root) == before
        else:
            assert literal_tree((root / "etc/daemon.json").read_text(encoding="utf-8"))["live-restore"] is True


@hostile(GENERATED_CASES)
@given(url=st.text(max_size=40) | st.from_regex(r"\A(https?://)?[a-z0-9. :/@?#\[\]-]{0,30}\Z"))
def test_property_a_mirror_is_refused_with_a_reason_or_is_a_plain_http_host(url):
    why = validate_registry_mirror(url)
    if why is None:
        assert url.startswith(("http://", "https://"))
        assert not any(c.isspace() for c in url)
        assert "@" not in url.split("://", 1)[1]
    else:
        assert isinstance(why, str)
        assert why


@hostile(GENERATED_CASES)
@given(value=python_values)
def test_property_any_value_of_a_known_key_is_written_as_strict_json_or_refused(value):
    with box() as root:
        result = run(root, settings={"labels": value})
        path = root / "etc/daemon.json"
        if result["failed"]:
            assert_clear_failure(result, "labels", "settings")
            assert not path.exists()
        else:
            assert isinstance(value, list)
            tree = literal_tree(path.read_text(encoding="utf-8"))
            assert tree["labels"] == value
            assert not any(isinstance(v, float) and not math.isfinite(v) for v in value)
            assert os.stat(path).st_mode & 0o777 == 0o644
