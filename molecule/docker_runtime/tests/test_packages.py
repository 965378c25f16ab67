"""dk-bare: the common role's packages entry point on a box whose apt lists were emptied a minute ago.

Every role installs its packages through it (roles/common/README.md). A box made from a container
image or a fresh cloud image has an empty lists directory whose own time is recent: an install that
trusted that time (ansible.builtin.apt's cache_valid_time) would find no package at all.
"""

from __future__ import annotations

from pathlib import Path

from spark_testinfra import recap_changed, run_playbook

testinfra_hosts = ["dk-bare"]

PLAYBOOK = Path(__file__).resolve().parents[1] / "packages.yml"
# Small, in Debian's main archive, and not in the test-bed image.
PACKAGE = "tree"
LISTS = "/var/lib/apt/lists"


def package_lists(host) -> list[str]:
    return host.check_output(f"find {LISTS} -maxdepth 1 -type f -name '*_Packages*' -printf '%f %T@\\n'").splitlines()


def test_a_box_whose_lists_were_just_emptied_gets_its_index_refreshed_and_the_package(host):
    host.check_output(f"apt-get purge -y -qq {PACKAGE} >/dev/null 2>&1; rm -rf {LISTS}/* && touch {LISTS}")
    assert not host.package(PACKAGE).is_installed
    assert package_lists(host) == []

    checked = run_playbook(PLAYBOOK, {"packages_under_test": [PACKAGE]}, check=True)
    assert checked.returncode == 0, checked.output
    assert (f"Check mode: {PACKAGE} would be installed after apt refreshes its index "
            f"(apt's index is empty (no package lists in {LISTS}))") in checked.stdout
    assert not host.package(PACKAGE).is_installed
    assert package_lists(host) == [], "check mode refreshed apt's index"

    done = run_playbook(PLAYBOOK, {"packages_under_test": [PACKAGE]})
    assert done.returncode == 0, done.output
    assert host.package(PACKAGE).is_installed
    refreshed = package_lists(host)
    assert refreshed, "the package was installed without a refresh of the emptied index"

    again = run_playbook(PLAYBOOK, {"packages_under_test": [PACKAGE]})
    assert again.returncode == 0, again.output
    assert recap_changed(again.stdout) == 0
    assert package_lists(host) == refreshed, "a run with nothing to install refreshed apt's index"


def test_a_package_apt_does_not_know_is_refused_with_apt_s_own_words(host):
    done = run_playbook(PLAYBOOK, {"packages_under_test": ["sparkfleet-no-such-package"]})
    assert done.returncode != 0
    assert "No package matching 'sparkfleet-no-such-package' is available" in done.output
