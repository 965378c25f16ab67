# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Strategy sparkfleet.serving.mitogen_linear: Mitogen's linear strategy where Mitogen is
installed, ansible.builtin.linear where it is not.

Why: with pipelining, every module call still starts a Python on the box that imports
ansible.module_utils.basic from the AnsiballZ zip, where nothing can be cached (about 0.3 s
a call on the test bed; https://github.com/ansible/ansible/issues/76941). Mitogen
(https://mitogen.networkgenomics.com/ansible_detailed.html) keeps one interpreter per box
for the run and sends each module once. Measured in benchmarks/README.md.

The class is built as Mitogen's own strategy plugins build theirs
(ansible_mitogen/plugins/strategy/mitogen_linear.py, mitogen 0.3.54): its StrategyMixin
over the linear strategy, imported under the real module names so that Mitogen's types
exist once.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
short_description: Mitogen's linear strategy when Mitogen is installed, else the linear strategy
description:
  - Runs plays as P(ansible.builtin.linear#strategy) does, task by task on every host.
  - When the C(mitogen) Python package is installed on the controller, its connection
    multiplexer carries the tasks over the C(ssh) and C(local) connections; a no-op C(site.yml)
    run of one box took 28% less time and 73% less CPU on the box (benchmarks/README.md of the
    repository). On a controller with 2 cores, three boxes at once took longer, as Mitogen's
    multiplexer adds controller CPU per box.
  - When C(mitogen) is not installed, this is P(ansible.builtin.linear#strategy), unchanged.
  - Select it with C(strategy = sparkfleet.serving.mitogen_linear) in C(ansible.cfg) or with
    C(ANSIBLE_STRATEGY=sparkfleet.serving.mitogen_linear).
author: sparkfleet maintainers (@sparkfleet)
notes:
  - Install with C(pip install mitogen). Tested with mitogen 0.3.54 and ansible-core 2.19.
seealso:
  - name: Mitogen for Ansible
    link: https://mitogen.networkgenomics.com/ansible_detailed.html
    description: How Mitogen runs Ansible's tasks, and its limits.
"""

from typing import Any

from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.utils.display import Display

display = Display()

try:
    import ansible_mitogen.loaders
    import ansible_mitogen.strategy
except ImportError:
    HAS_MITOGEN = False
else:
    HAS_MITOGEN = True

if HAS_MITOGEN:
    _Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)

    class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):  # type: ignore[misc,valid-type]
        """Mitogen's connection multiplexer over the linear strategy."""

else:

    class StrategyModule(LinearStrategyModule):  # type: ignore[no-redef]
        """The linear strategy, unchanged: Mitogen is not installed."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            display.vv("sparkfleet.serving.mitogen_linear: mitogen is not installed, running the linear strategy")
