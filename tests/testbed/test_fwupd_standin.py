"""The fwupdmgr stand-in (standins/bin/fwupdmgr) answers as fwupd 1.9.24 does, and simspark-firmware sets up
what it sees: run without a box, SPARKFLEET_SIM_FWUPD_STATE points both at a state file in tmp_path."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
BIN = HERE / "standins" / "bin"
NAME = "System Firmware"


def load(name: str) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(BIN / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


fwupdmgr = load("fwupdmgr")


@pytest.fixture
def state(tmp_path: Path) -> Path:
    return tmp_path / "fwupd.json"


def tool(state: Path, name: str, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPARKFLEET_SIM_FWUPD_STATE": str(state)}
    return subprocess.run([sys.executable, str(BIN / name), *argv], env=env, capture_output=True, text=True,
                          check=False)


def fw(state: Path, *argv: str) -> subprocess.CompletedProcess:
    return tool(state, "fwupdmgr", *argv)


def sim(state: Path, *argv: str) -> None:
    done = tool(state, "simspark-firmware", *argv)
    assert done.returncode == 0, done.stderr


def devices(state: Path, command: str = "get-devices") -> list[dict]:
    done = fw(state, command, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)["Devices"]


def json_error(code: int, message: str) -> str:
    return ('{\n  "Error" : {\n    "Domain" : "FwupdError",\n'
            f'    "Code" : {code},\n    "Message" : "{message}"\n  }}\n}}\n')


def test_a_box_without_firmware_devices_has_nothing_to_do(state):
    done = fw(state, "get-devices", "--json")
    assert (done.returncode, done.stdout, done.stderr) == (2, json_error(9, "No detected devices"), "")
    done = fw(state, "get-devices")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", "No detected devices\n")
    assert fw(state, "get-updates", "--json").returncode == 2
    assert fw(state, "update", "-y", "--no-reboot-check").returncode == 2
    # The metadata is downloaded, then there is no device to count.
    done = fw(state, "refresh")
    assert (done.returncode, done.stdout, done.stderr) == (2, "Updating lvfs\n", "No detected devices\n")
    done = fw(state, "get-history", "--json")
    assert (done.returncode, done.stdout) == (2, json_error(9, "No history"))


def test_get_devices_has_fwupds_keys_in_its_order_and_layout(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "offer", NAME, "1.3.0", "--in-metadata")
    done = fw(state, "get-devices", "--json")
    assert done.stdout.startswith('{\n  "Devices" : [\n    {\n      "Name" : "System Firmware",\n')
    [device] = json.loads(done.stdout)["Devices"]
    assert list(device) == ["Name", "DeviceId", "Guid", "Plugin", "Protocol", "Flags", "Vendor", "Version",
                            "VersionFormat", "Icons", "Created", "Releases"]
    assert len(device["DeviceId"]) == 40 and int(device["DeviceId"], 16) >= 0
    assert device["Flags"] == ["internal", "updatable", "require-ac", "supported", "registered", "needs-reboot",
                               "usable-during-update"]
    assert (device["Plugin"], device["Version"], device["VersionFormat"]) == ("uefi_capsule", "1.2.3", "triplet")
    [release] = device["Releases"]
    assert list(release) == ["AppstreamId", "RemoteId", "Name", "Summary", "Description", "Version", "Filename",
                             "Protocol", "Checksum", "License", "Size", "Created", "Vendor", "Flags"]
    assert release["Flags"] == ["trusted-payload", "trusted-metadata", "is-upgrade"]
    assert not any(key.startswith("Sim") for key in {*device, *release})


def test_get_updates_without_a_newer_release(state):
    sim(state, "add", NAME, "1.2.3")
    # No release at all: the device is not supported by the metadata.
    done = fw(state, "get-updates")
    assert (done.returncode, done.stderr) == (2, "No updatable devices\n")
    assert done.stdout == "Devices with no available firmware updates: \n \u2022 System Firmware\n"
    # The JSON form lists only devices with updates, and exits 0 when there are none.
    done = fw(state, "get-updates", "--json")
    assert (done.returncode, done.stdout) == (0, '{\n  "Devices" : []\n}\n')
    # The same version as installed.
    sim(state, "offer", NAME, "1.2.3", "--in-metadata")
    done = fw(state, "get-updates")
    assert (done.returncode, done.stderr) == (2, "No updates available\n")
    assert done.stdout == "Devices with the latest available firmware version:\n \u2022 System Firmware\n"
    assert devices(state, "get-updates") == []


def test_a_release_is_seen_after_a_refresh_and_fresh_metadata_needs_force(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "offer", NAME, "1.3.0")
    assert devices(state, "get-updates") == []
    done = fw(state, "refresh")
    assert (done.returncode, done.stdout) == (0, "Updating lvfs\nSuccessfully downloaded new metadata: "
                                                 "1 local device supported\n")
    [device] = devices(state, "get-updates")
    assert [rel["Version"] for rel in device["Releases"]] == ["1.3.0"]
    sim(state, "offer", NAME, "1.10.0")
    done = fw(state, "refresh")
    assert (done.returncode, done.stdout, done.stderr) == (
        2, "", "Metadata is up to date; use --force to refresh again.\n")
    assert fw(state, "refresh", "--force").returncode == 0
    [device] = devices(state, "get-updates")
    assert [rel["Version"] for rel in device["Releases"]] == ["1.10.0", "1.3.0"]


def test_an_update_is_staged_and_the_next_boot_applies_it(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "offer", NAME, "1.3.0", "--in-metadata")
    done = fw(state, "update", "--assume-yes", "--no-reboot-check")
    assert (done.returncode, done.stdout, done.stderr) == (0, "Successfully installed firmware\n", "")
    [device] = devices(state)
    assert (device["Version"], device["UpdateState"]) == ("1.2.3", 4)
    assert "needs-reboot" in device["Flags"]
    # Until the reboot, no update is offered again.
    assert devices(state, "get-updates") == []
    done = fw(state, "update", "-y")
    assert (done.returncode, done.stdout) == (0, "Devices with the latest available firmware version:\n"
                                                 " \u2022 System Firmware\n")
    [entry] = devices(state, "get-history")
    assert (entry["Version"], entry["UpdateState"], entry["Releases"][0]["Version"]) == ("1.2.3", 4, "1.3.0")
    assert "historical" in entry["Flags"]

    sim(state, "boot")
    [device] = devices(state)
    assert device["Version"] == "1.3.0" and "UpdateState" not in device
    [entry] = devices(state, "get-history")
    assert (entry["Version"], entry["UpdateState"]) == ("1.3.0", 2)
    done = fw(state, "get-updates")
    assert (done.returncode, done.stderr) == (2, "No updates available\n")


def test_a_capsule_that_fails_at_boot_is_recorded_as_failed(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "offer", NAME, "1.3.0", "--in-metadata", "--fails-at-boot")
    assert fw(state, "update", "-y").returncode == 0
    sim(state, "boot")
    assert devices(state)[0]["Version"] == "1.2.3"
    [entry] = devices(state, "get-history")
    assert entry["UpdateState"] == 3
    assert entry["UpdateError"] == "failed to run update on reboot: expected 1.3.0 and got 1.2.3"
    assert [rel["Version"] for rel in devices(state, "get-updates")[0]["Releases"]] == ["1.3.0"]


def test_a_device_without_needs_reboot_is_written_at_once(state):
    sim(state, "add", "Embedded Controller", "7", "--live")
    sim(state, "offer", "Embedded Controller", "8", "--in-metadata")
    assert fw(state, "update", "-y", "--json").returncode == 0
    [device] = devices(state)
    assert (device["Version"], device["UpdateState"]) == ("8", 2)
    assert "needs-reboot" not in device["Flags"]


def test_update_takes_device_ids_and_guids_and_refuses_anything_else(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "add", "Embedded Controller", "7")
    sim(state, "offer", NAME, "1.3.0")
    sim(state, "offer", "Embedded Controller", "8", "--in-metadata")
    controller = next(dev for dev in devices(state) if dev["Name"] == "Embedded Controller")
    assert fw(state, "update", controller["DeviceId"], "-y").stdout == "Successfully installed firmware\n"
    assert [dev.get("UpdateState") for dev in devices(state)] == [4, None]
    done = fw(state, "update", NAME)
    assert (done.returncode, done.stdout, done.stderr) == (
        1, "\nUse fwupdmgr --help for help\n", "'System Firmware' is not a valid GUID nor DEVICE-ID\n")
    done = fw(state, "update", "--allow-older", "-y")
    assert (done.returncode, done.stderr) == (1, "--allow-older is not supported for this command\n")
    done = fw(state, "get-updates", "ffff", "--json")
    assert (done.returncode, done.stdout) == (3, json_error(8, "failed to find ffff"))
    [device] = devices(state, "get-updates")
    assert device["Name"] == NAME
    assert devices(state, "get-devices")[0]["Name"] == "Embedded Controller"


@pytest.mark.parametrize(("argv", "stdout"), [
    (["frobnicate"], "\nUse fwupdmgr --help for help\n"),
    ([], "\nUse fwupdmgr --help for help\n"),
    (["--bogus", "get-devices"], "Failed to parse arguments: Unknown option --bogus\n"),
])
def test_unknown_commands_and_options_fail_as_in_fwupdmgr(state, argv, stdout):
    done = fw(state, *argv)
    assert (done.returncode, done.stdout) == (1, stdout)
    if argv and argv[0] == "frobnicate":
        assert done.stderr == "Command not found\n"


@pytest.mark.parametrize("argv", [
    ["install", "firmware.cab"],
    ["get-releases", "--json"],
    ["get-devices"],
    ["get-updates"],
    ["get-history"],
    ["update", "--offline", "-y"],
    ["-v", "get-devices", "--json"],
    ["refresh", "metadata.xml.gz", "metadata.xml.gz.jcat", "lvfs"],
])
def test_what_the_stand_in_does_not_do_is_refused(state, argv):
    for name, version, newer in ((NAME, "1.2.3", "1.3.0"), ("Embedded Controller", "7", "8")):
        sim(state, "add", name, version)
        sim(state, "offer", name, newer, "--in-metadata")
    assert fw(state, "update", fwupdmgr.sim.device_id(NAME), "-y").returncode == 0  # some history to list
    before = state.read_text()
    done = fw(state, *argv)
    assert done.returncode == 1
    assert done.stderr.startswith("fwupdmgr: not supported by the test-bed stand-in (tests/testbed/standins/bin/")
    assert state.read_text() == before


def test_a_terminal_and_a_non_root_update_are_refused(state):
    sim(state, "add", NAME, "1.2.3")
    sim(state, "offer", NAME, "1.3.0", "--in-metadata")
    code, _out, err = fwupdmgr.run(["get-updates"], state, tty=True)
    assert code == 1 and "running on a terminal" in err
    assert fwupdmgr.run(["get-updates", "--json"], state, tty=True)[0] == 0
    code, _out, err = fwupdmgr.run(["update", "-y"], state, euid=1000)
    assert code == 1 and "as a non-root user" in err
    assert devices(state)[0]["Version"] == "1.2.3" and "UpdateState" not in devices(state)[0]


def test_json_is_printed_as_json_glib_prints_it():
    text = fwupdmgr.render({"A": [], "B": {}, "C": [{"D": 1}], "E": 'q"\\\n\x01\x1f\x7f\u00e9'})
    assert text == ('{\n  "A" : [],\n  "B" : {  },\n  "C" : [\n    {\n      "D" : 1\n    }\n  ],\n'
                    '  "E" : "q\\"\\\\\\n\\u0001\x1f\\u007f\u00e9"\n}')


@pytest.mark.parametrize(("a", "b", "want"), [
    ("1.10.0", "1.9.0", 1), ("1.2", "1.2.1", -1), ("1.0~rc1", "1.0", -1), ("2.0", "2.0", 0), ("1.0b", "1.0a", 1),
])
def test_versions_compare_as_in_fwupd(a, b, want):
    assert fwupdmgr.sim.version_compare(a, b) == want


def test_simspark_firmware_refuses_unknown_devices_and_a_boot_without_firmware_writes_nothing(state):
    done = tool(state, "simspark-firmware", "offer", NAME, "1.3.0")
    assert done.returncode == 2 and "add it first" in done.stderr
    sim(state, "boot")
    assert not state.exists()
    sim(state, "add", NAME, "1.2.3")
    assert tool(state, "simspark-firmware", "add", NAME, "1.2.4").returncode == 2
    sim(state, "reset")
    assert not state.exists()
