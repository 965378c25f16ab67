"""pf-gb10: the preflight passed, the roles after it ran, and the facts are the GB10's."""

from __future__ import annotations

from preflight_helpers import MARKER, changes, gpu_facts, networks, outcome

testinfra_hosts = ["ansible://pf-gb10"]


def test_gb10_passed_and_the_following_roles_ran(host):
    assert outcome(host) == ["passed"]
    assert host.file(MARKER).exists


def test_the_snapshot_sees_a_change_when_there_is_one(host):
    # The stand-in for the later roles wrote MARKER: the snapshot must show exactly that.
    changed = changes(host)
    assert changed, "the snapshot did not notice the file written after the preflight"
    assert all(MARKER in line for line in changed), changed


def test_gb10_facts(host):
    facts = gpu_facts(host)
    assert facts["present"] is True
    assert facts["names"] == ["NVIDIA GB10"]
    assert (facts["driver_version"], facts["cuda_driver_version"]) == ("580.142", "13.0")
    assert facts["unified_memory"] is True
    assert facts["toolkit"]["path"] == "/usr/local/cuda-13.0/bin/nvcc"
    assert facts["toolkit"]["full_version"] == "13.0.88"
    assert facts["kernel_module"]["flavour"] == "open"
    assert facts["memory"]["total_bytes"] == 127601248 * 1024


def test_gb10_sits_on_both_networks(host):
    assert networks(host) == ["pf-lan-a", "pf-lan-b"]
