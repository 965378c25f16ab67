# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sparkfleet.serving.role_default (plugins/filter/roles.py): a default read from its own role's defaults/main.yml."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.roles import ROLES, read_default, role_default


def roles(tmp_path: Path, text: str) -> Path:
    (tmp_path / "demo" / "defaults").mkdir(parents=True)
    (tmp_path / "demo" / "defaults" / "main.yml").write_text(text, encoding="utf-8")
    return tmp_path


def test_the_value_is_the_one_in_the_owners_defaults(tmp_path):
    path = roles(tmp_path, "---\ndemo_port: 8123\ndemo_list: [1, 2]\n")
    assert read_default(path, "demo_port", "demo") == 8123
    assert read_default(path, "demo_list", "demo") == [1, 2]


@pytest.mark.parametrize(("name", "role", "message"), [
    ("demo_missing", "demo", "'demo_missing' is not a default of the role 'demo'"),
    ("demo_port", "nosuchrole", "the role 'nosuchrole' has no defaults"),
    ("demo_port", "../demo", "is not a role name"),
    ("demo_templated", "demo", "is a template"),
])
def test_what_cannot_be_read_is_refused(tmp_path, name, role, message):
    path = roles(tmp_path, "---\ndemo_port: 8123\ndemo_templated: \"{{ demo_port }}\"\n")
    with pytest.raises(ValueError, match=re.escape(message)):
        read_default(path, name, role)


@pytest.mark.parametrize(("name", "role"), [("vllm_port", "vllm"), ("registry_cache_port", "registry_cache"),
                                            ("monitoring_node_exporter_port", "monitoring"),
                                            ("model_seed_port", "model")])
def test_the_collections_ports_read_from_their_roles(name, role):
    text = (ROLES / role / "defaults" / "main.yml").read_text(encoding="utf-8")
    assert role_default(name, role) == yaml.safe_load(text)[name]


def test_the_filter_names_itself_in_its_error():
    with pytest.raises(AnsibleFilterError, match=r"^role_default: 'nope' is not a default of the role 'vllm'"):
        role_default("nope", "vllm")
