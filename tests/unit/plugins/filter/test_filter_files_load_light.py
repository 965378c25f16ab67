# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""To find one filter of a collection, ansible-core imports every filter file of it in each worker
(lib/ansible/plugins/loader.py, Jinja2Loader.get_with_context): loading them must not import the
helpers behind the filters; each filter imports its own when it is called."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
import ansible_collections.sparkfleet.serving.plugins.filter as filters
names = [m.name for m in pkgutil.iter_modules(filters.__path__, filters.__name__ + ".")]
for name in names:
    importlib.import_module(name)
helpers = sorted(m for m in sys.modules if ".plugins.module_utils." in m or ".plugins.plugin_utils." in m)
print(json.dumps({"files": names, "helpers": helpers}))
"""


def load_every_filter_file() -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def test_loading_every_filter_file_imports_none_of_their_helpers():
    loaded = load_every_filter_file()
    assert loaded["files"], loaded
    assert loaded["helpers"] == []
