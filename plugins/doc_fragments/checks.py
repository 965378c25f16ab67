# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Documentation shared by the read-only check and facts modules."""

from __future__ import annotations


class ModuleDocFragment:
    # Modules that only read the box: what they report is the same in check mode.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Only reads and computes; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is nothing to diff.
"""

    # Modules that judge facts against requirements.
    FAIL_ON_ERROR = r"""
options:
  fail_on_error:
    description:
      - Fail when a requirement is not met. With V(false) the problems are only returned.
    type: bool
    default: true
"""

    # Check modules whose warnings the preflight role prints once in its own summary.
    REPORT_WARNINGS = r"""
options:
  report_warnings:
    description:
      - Also emit the warnings as Ansible warnings. The preflight role turns this off and
        prints each warning once in its summary.
    type: bool
    default: true
"""
