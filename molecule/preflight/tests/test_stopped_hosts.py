"""pf-old-driver and pf-no-gpu: the preflight stopped them with messages naming what was
found and what is required, and nothing on them changed."""

from __future__ import annotations

from preflight_helpers import MARKER, changes, gpu_facts, name, networks, outcome

testinfra_hosts = ["ansible://pf-old-driver", "ansible://pf-no-gpu"]

NOT_LOADED = "NVIDIA driver not loaded (nvidia-smi could not communicate with the driver)"
EXPECTED = {
    "pf-old-driver": [
        "Preflight failed on pf-old-driver with 2 error(s); nothing was changed:",
        "NVIDIA driver: found 535.247.01 (nvidia-smi), required >= 580.",
        "CUDA version supported by the driver: found 12.2, required >= 13.0.",
    ],
    "pf-no-gpu": [
        "Preflight failed on pf-no-gpu with 3 error(s); nothing was changed:",
        "Usable NVIDIA GPU: found none (NVIDIA driver not loaded",
        f"NVIDIA driver: found none ({NOT_LOADED}), required >= 580.",
        f"CUDA version supported by the driver: found none ({NOT_LOADED}), required >= 13.0.",
    ],
}


def test_stopped_with_found_and_required_versions(host):
    lines = outcome(host)
    assert lines[0] == "failed"
    text = "\n".join(lines)
    for sentence in EXPECTED[name(host)]:
        assert sentence in text


def test_nothing_changed_on_a_stopped_host(host):
    assert changes(host) == []
    assert not host.file(MARKER).exists


def test_facts_name_the_cause(host):
    facts = gpu_facts(host)
    if name(host) == "pf-old-driver":
        assert facts["present"] is True
        assert (facts["driver_version"], facts["cuda_driver_version"]) == ("535.247.01", "12.2")
        assert facts["toolkit"]["version"] == "12.2"
    else:
        # No driver: no crash, present false with the reason; the toolkit is still seen.
        assert facts["present"] is False
        assert facts["reason"].startswith("NVIDIA driver not loaded")
        assert facts["toolkit"]["version"] == "13.0"


def test_on_their_own_networks(host):
    assert networks(host) == {"pf-old-driver": ["pf-lan-a"], "pf-no-gpu": ["pf-lan-b"]}[name(host)]
