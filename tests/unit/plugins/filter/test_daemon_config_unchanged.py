# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""daemon_config_unchanged: the module's merge on the controller decides whether to call it."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.sparkfleet.serving.plugins.filter.docker import daemon_config_unchanged

NVIDIA = {"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
TEXT = '{\n  "live-restore": true,\n  "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}\n}\n'


def test_keys_already_there_change_nothing_in_text_or_parsed_form():
    assert daemon_config_unchanged(TEXT, NVIDIA) is True
    assert daemon_config_unchanged({"live-restore": True, **NVIDIA}, {"live-restore": True}) is True


@pytest.mark.parametrize(("current", "settings", "remove"), [
    ("", NVIDIA, []),                                            # no file yet
    (TEXT, {"default-runtime": "nvidia"}, []),                   # a key to add
    (TEXT, {"runtimes": {"nvidia": {"args": ["--debug"]}}}, []),  # a nested value to change
    (TEXT, {}, ["live-restore"]),                                # a key to remove
    ('{"live-restore": true, "live-restore": false}', {"live-restore": False}, []),  # the module refuses the file
    ("{not json", NVIDIA, []),
    (TEXT, {"registry-mirror": ["https://m.example"]}, []),      # a flag name: the module refuses it
])
def test_anything_to_change_or_to_refuse_calls_the_module(current, settings, remove):
    assert daemon_config_unchanged(current, settings, remove) is False


def test_removing_an_absent_key_changes_nothing():
    assert daemon_config_unchanged(TEXT, {}, ["registry-mirrors", "log-opts.max-size"]) is True


def test_settings_must_be_a_dict():
    with pytest.raises(AnsibleFilterError, match="settings must be a dict"):
        daemon_config_unchanged(TEXT, ["live-restore"])
