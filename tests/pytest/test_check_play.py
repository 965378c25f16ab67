"""The check play (playbooks/check.yml) runs every role's checks before any role changes a box.

- every role of site.yml is in the check play, through an entry point with the same options
  as the role's main one (the argument spec is validated there), before the provisioning play;
- every assert or fail a role runs in site.yml on a role variable is on the check play's path
  too, or is listed below as needing the box as the roles leave it (guard: a new check that the
  check play does not run fails here);
- every variable checked on that path has a bad value in molecule/fleet/files/refusals.yml, which
  the fleet scenario feeds to site.yml on a fresh simulated Spark (refused in the check play,
  with the message, changed=0), or a reason in its `not_refusable`;
- the firewall's input check reads exactly the plan's inputs that are its variables (that it
  refuses what the plan refuses, without the box: tests/unit/plugins/plugin_utils/test_firewall_plan.py).
"""

from __future__ import annotations

import pytest
import yaml
from check_paths import (
    ROOT,
    check_play_files,
    check_play_imports,
    checked_variables,
    load,
    role_options,
    site_files,
    site_roles,
)

# Checks in site.yml's roles that need the box as it is then (not only the variables), and why
# the check play cannot make them before anything changes.
# tasks/watchdog-stop.yml: the memory watchdog's record of a stop on the box, when the container would start,
# against the deployment about to run (its spec: these settings).
WATCHDOG_STOP = "the watchdog's record of a stop on the box, when the container would start (tasks/watchdog-stop.yml)"
NEEDS_THE_BOX = {
    "common_role": "the role's name in the OS check's message; the preflight role checks the OS first",
    "docker_daemon_config_path": "the daemon.json on the box must be valid JSON: the probe reads it",
    "firewall_sshd_binary": "the SSH port comes from `sshd -T` on the box (tasks/plan.yml)",
    "firewall_fleet_hosts": "the fleet's addresses come from each host's facts (tasks/plan.yml)",
    "firewall_monitoring_hosts": "the monitoring hosts' addresses come from each host's facts (tasks/plan.yml)",
    "firewall_gateway_hosts": "the gateway hosts' addresses come from each host's facts (tasks/plan.yml)",
    "link_apply_command": "whether the addresses and the MTU are in force once it has run (tasks/present.yml)",
    "vllm_flush_page_cache_required": "whether the box can flush its page cache, asked when it must",
    "vllm_image": "whether the image is in the box's Docker engine after the docker role ran",
    "vllm_image_pull": "whether the image is in the box's Docker engine after the docker role ran",
    "vllm_restart_after_watchdog_stop": WATCHDOG_STOP,
    "vllm_labels": WATCHDOG_STOP,
    "vllm_runtime": WATCHDOG_STOP,
    "vllm_stop_timeout": WATCHDOG_STOP,
    "vllm_restart_policy": WATCHDOG_STOP,
    "vllm_gpus_all": WATCHDOG_STOP,
    "vllm_draft_model": WATCHDOG_STOP,
    "vllm_draft_model_dir": WATCHDOG_STOP,
    # tasks/health-diagnose.yml: which member's log to diagnose, told by the record of the deployment it runs.
    "vllm_rollback_target": "the deployment record on the box, for the diagnosis of a member's log",
    "vllm_state_dir": "the deployment record on the box, for the diagnosis of a member's log",
    "watchdog_python": "whether the interpreter exists on the box and systemd runs (one file_info call)",
    # Set by the role that publishes its ports (gateway, model), from what that role computes as it runs.
    "firewall_publish_owner": "given by the publishing role as it runs, not by the inventory",
    "firewall_publish_rules": "the publishing role's ports, computed as it runs (gateway routes, seed peers)",
}
REFUSALS = load(ROOT / "molecule/fleet/files/refusals.yml")


def test_check_play_runs_every_site_role_first() -> None:
    imports = check_play_imports()
    assert [role for role in site_roles() if role not in imports] == []
    plays = load(ROOT / "playbooks/site.yml")
    assert plays[0]["ansible.builtin.import_playbook"] == "check.yml"


@pytest.mark.parametrize("role", site_roles())
def test_check_entry_point_validates_the_main_options(role: str) -> None:
    """The argument spec is validated in the check play: its entry point has main's options."""
    entry = check_play_imports()[role]
    assert entry == "check", f"{role} is imported with tasks_from {entry!r}, expected its check entry point"
    specs = load(ROOT / "roles" / role / "meta/argument_specs.yml")["argument_specs"]
    assert specs["check"]["options"] == specs["main"]["options"]


def test_every_check_of_site_is_on_the_check_play_path() -> None:
    on_path = checked_variables(check_play_files())
    in_site = checked_variables(site_files())
    missing = {name: where for name, where in in_site.items() if name not in on_path and name not in NEEDS_THE_BOX}
    assert missing == {}, (
        "role variables checked in site.yml's roles but not by playbooks/check.yml (move the check into the role's "
        f"tasks/check.yml, or list the variable in NEEDS_THE_BOX with the reason): {missing}"
    )
    assert sorted(set(NEEDS_THE_BOX) - set(in_site)) == [], "NEEDS_THE_BOX names checks that no longer exist"


def test_every_checked_variable_has_a_bad_value_in_the_refusal_cases() -> None:
    on_path = set(checked_variables(check_play_files(), conditions_only=True)) - set(NEEDS_THE_BOX)
    covered = {name for case in REFUSALS["cases"] for name in case["set"]}
    excused = set(REFUSALS["not_refusable"])
    assert sorted(on_path - covered - excused) == [], "add a case to molecule/fleet/files/refusals.yml"
    assert sorted(covered & excused) == []
    retired = set(REFUSALS.get("retired") or {})
    assert sorted((covered | excused) - set(role_options()) - retired) == [], "cases name variables no role has"
    assert sorted(retired - covered) == [], "a retired setting needs its refusal case"


@pytest.mark.parametrize("case", REFUSALS["cases"], ids=lambda case: ",".join(case["set"]))
def test_refusal_cases_set_values_of_the_right_type(case: dict) -> None:
    """A case tests a check beyond the type: its values have the type the spec declares."""
    kinds = {"int": int, "float": (int, float), "str": str, "path": str, "list": list, "dict": dict, "bool": bool,
             "raw": object}
    for name, value in case["set"].items():
        if name in (REFUSALS.get("retired") or {}):
            continue
        kind = role_options()[name]["type"]
        assert isinstance(value, kinds[kind]), f"{name}: {value!r} is not a {kind}"


def test_firewall_settings_are_the_plan_inputs_that_are_variables() -> None:
    """vars/main.yml: the check reads exactly the plan's inputs that come from firewall_* variables."""
    variables = load(ROOT / "roles/firewall/vars/main.yml")
    settings, plan_input = variables["__firewall_settings"], variables["__firewall_input"]
    assert {key: value for key, value in plan_input.items() if key in settings} == settings
    from_variables = {key for key, value in plan_input.items() if "{{ firewall_" in yaml.safe_dump(value)}
    # The hosts whose addresses the rules name: their facts are the plan's to read (NEEDS_THE_BOX).
    assert from_variables - set(settings) == {"sshd_binary", "fleet_hosts", "monitoring_hosts", "gateway_hosts"}
