# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared parts of the hostile-input suites: run a module's main() in-process, generate odd
inputs, and check the invariants every module and filter must keep:

1. a clear error (failed, with a message naming the option or file) or a right result;
2. no Python exception escapes (an escaping one is what users see as "Module failed");
3. no file changed when the module fails.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Deterministic (the same cases on every run, so CI cannot flake) and without deadlines
# (a slow machine is not a defect). Each suite states its own max_examples.
HOSTILE = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
}


def hostile(max_examples: int) -> settings:
    return settings(max_examples=max_examples, **HOSTILE)


class Exited(Exception):
    pass


class Failed(Exception):
    pass


def _exit(_module: object, **kwargs: object) -> None:
    raise Exited(kwargs)


def _fail(_module: object, **kwargs: object) -> None:
    raise Failed(kwargs)


def call_module(module: object, args: dict) -> dict:
    """Run module.main() with args; the result dict with failed True/False.

    Any exception other than the module's own exit / fail escapes: the test then fails,
    as a user would see "Module failed" with a traceback.
    """
    with (
        mock.patch.object(basic.AnsibleModule, "exit_json", _exit),
        mock.patch.object(basic.AnsibleModule, "fail_json", _fail),
        patch_module_args(args),
    ):
        try:
            module.main()
        except Exited as done:
            return {**done.args[0], "failed": False}
        except Failed as done:
            return {**done.args[0], "failed": True}
    raise AssertionError("the module returned without exit_json or fail_json")


def assert_clear_failure(result: dict, *names: str) -> str:
    """The module failed with a one-paragraph message that names one of names (option or file)."""
    assert result["failed"], result
    msg = result.get("msg")
    assert isinstance(msg, str), result
    assert msg.strip(), result
    assert "Traceback" not in msg, msg
    if names:
        assert any(name in msg for name in names), (names, msg)
    return msg


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under root: files by content, links by target, directories by name."""
    entries: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                entries[str(path)] = ("link", os.readlink(path))
            elif path.is_file():
                entries[str(path)] = ("file", path.read_bytes())
            else:
                entries[str(path)] = ("dir", "")
    return entries


# --- strategies -------------------------------------------------------------------

# JSON numbers as text, including ones no float holds (1e400) and forms a float would
# reformat (1.10, -0, 1E+2).
number_literals = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["1e400", "-1e400", "1.10", "-0", "0.0", "1E+2", "123456789012345678901234567890.5", "2.5e-400"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda t: "inf" not in t),
)
json_text_strings = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12
)  # non-ASCII included, no lone surrogates
json_scalar_texts = st.one_of(
    number_literals,
    json_text_strings.map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from(["true", "false", "null"]),
)


def json_document_texts(max_leaves: int = 12) -> st.SearchStrategy[str]:
    """JSON texts built from literals, so numbers keep their exact spelling."""

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        arrays = st.lists(children, max_size=4).map(lambda items: "[" + ", ".join(items) + "]")
        objects = st.dictionaries(json_text_strings, children, max_size=4).map(
            lambda d: "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in d.items()) + "}"
        )
        return arrays | objects

    return st.recursive(json_scalar_texts, extend, max_leaves=max_leaves)


def json_object_texts() -> st.SearchStrategy[str]:
    return st.dictionaries(json_text_strings, json_document_texts(6), max_size=5).map(
        lambda d: "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in d.items()) + "}"
    )


# Python values as Ansible hands them to a module (YAML / Jinja results), odd ones included.
python_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(),  # NaN and infinities included on purpose
    st.text(max_size=16),
)
python_values = st.recursive(
    python_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def literal_tree(text: str) -> object:
    """A JSON text parsed with every number kept as its literal (an independent strict reader)."""

    def refuse(name: str) -> None:
        raise ValueError(name)

    return json.loads(
        text,
        parse_float=lambda t: ("number", t),
        parse_int=lambda t: ("number", t),
        parse_constant=refuse,
    )
