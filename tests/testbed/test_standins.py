"""The GPU tool stand-ins must print exactly what the real tools print on a GB10."""

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
FIXTURES = HERE.parent / "fixtures" / "gb10"
BIN = HERE / "standins" / "bin"
PROFILES = HERE / "standins" / "profiles"
CAPTURE_TIME = "Wed Dec 31 01:42:54 2025"


def load(name: str) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(BIN / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


smi = load("nvidia-smi")
nvcc = load("nvcc")


def profile(name: str = "gb10", **changes: str) -> dict:
    data = json.loads((PROFILES / f"{name}.json").read_text(encoding="utf-8"))
    data.update(changes)
    return data


def capture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_table_reproduces_the_capture_byte_for_byte():
    code, out, _err = smi.run([], profile(driver_version="580.95.05"), CAPTURE_TIME)
    assert code == 0
    assert out == capture("nvidia-smi.txt")


def test_csv_with_header_reproduces_the_capture():
    argv = ["--query-gpu=name,driver_version,memory.total", "--format=csv"]
    code, out, _err = smi.run(argv, profile(driver_version="580.95.05"), "")
    assert (code, out) == (0, capture("nvidia-smi-query-name-driver-memory.csv"))


def test_csv_noheader_reproduces_the_capture():
    argv = ["--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]
    code, out, _err = smi.run(argv, profile(driver_version="580.159.03"), "")
    assert (code, out) == (0, capture("nvidia-smi-query-name-driver-computecap.noheader.csv"))


def test_list_reproduces_the_capture():
    assert smi.run(["-L"], profile(), "")[1] == capture("nvidia-smi-L.txt")


def test_nvcc_reproduces_the_capture():
    assert nvcc.run(["--version"], profile()) == (0, capture("nvcc-version.txt"))


def test_nvcc_without_input_fails_like_the_real_one():
    code, out = nvcc.run([], profile())
    assert code == 1
    assert out.startswith("nvcc fatal   : No input files specified")


def test_gb10_profile_is_driver_580_142_cuda_13_0():
    code, out, _err = smi.run([], profile(), CAPTURE_TIME)
    assert code == 0
    assert "| NVIDIA-SMI 580.142                Driver Version: 580.142        CUDA Version: 13.0     |" in out


@pytest.mark.parametrize(
    ("fmt", "want"),
    [
        ("csv", "memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n81559 MiB, 1 MiB, 0 %\n"),
        ("csv,nounits", "memory.total, memory.used, utilization.gpu\n81559, 1, 0\n"),
        ("csv,noheader,nounits", "81559, 1, 0\n"),
    ],
)
def test_units_follow_the_format_options_on_a_discrete_gpu(fmt, want):
    argv = ["--query-gpu=memory.total,memory.used,utilization.gpu", f"--format={fmt}"]
    assert smi.run(argv, profile("h100"), "") == (0, want, "")


def test_unknown_field_is_refused_like_the_real_tool():
    code, out, _err = smi.run(["--query-gpu=name,vram", "--format=csv"], profile(), "")
    assert code == 2
    assert out == 'Field "vram" is not a valid field to query.\n'


def test_query_without_csv_format_is_refused():
    assert smi.run(["--query-gpu=name"], profile(), "")[0] == 2


def test_no_gpu_profile_fails_like_a_box_without_the_driver():
    for argv in ([], ["-L"], ["--query-gpu=name", "--format=csv"]):
        code, out, _err = smi.run(argv, profile("no-gpu"), "")
        assert code == 9
        assert "couldn't communicate with the NVIDIA driver" in out


@pytest.mark.parametrize("name", sorted(p.stem for p in PROFILES.glob("*.json")))
def test_every_profile_renders_aligned_tables(name):
    data = profile(name)
    if not data["driver_loaded"]:
        pytest.skip("no table without a driver")
    out = smi.run([], data, CAPTURE_TIME)[1]
    widths = {len(line) for line in out.splitlines()[1:] if line}
    assert widths == {91}


def test_profile_tool_switches_profile_toolkit_and_driver_file(tmp_path):
    (tmp_path / "usr/lib/sparkfleet-sim").mkdir(parents=True)
    (tmp_path / "usr/lib/sparkfleet-sim/profiles").symlink_to(PROFILES)
    (tmp_path / "usr/local").mkdir(parents=True)
    env = {**os.environ, "SPARKFLEET_SIM_ROOT": str(tmp_path)}

    def select(name: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, str(BIN / "simspark-profile"), name]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)

    assert select("gb10").returncode == 0
    assert (tmp_path / "usr/local/cuda-13.0/bin/nvcc").is_symlink()
    version_file = tmp_path / "var/lib/sparkfleet-sim/proc/driver/nvidia/version"
    assert version_file.read_text(encoding="utf-8") == capture("proc-driver-nvidia-version.txt")

    meminfo = (tmp_path / "var/lib/sparkfleet-sim/proc/meminfo").read_text(encoding="utf-8")
    assert meminfo.startswith("MemTotal:       127601248 kB\nMemFree:        ")
    assert "\nMemAvailable:   123773210 kB\n" in meminfo

    assert select("old-driver").returncode == 0
    assert not (tmp_path / "usr/local/cuda-13.0").exists()
    assert os.readlink(tmp_path / "usr/local/cuda") == "cuda-12.2"
    assert "535.247.01" in version_file.read_text(encoding="utf-8")

    assert select("h100").returncode == 0
    h100_meminfo = (tmp_path / "var/lib/sparkfleet-sim/proc/meminfo").read_text(encoding="utf-8")
    assert "MemTotal:       2113467392 kB\n" in h100_meminfo

    assert select("no-gpu").returncode == 0
    assert not version_file.exists()
    assert (tmp_path / "etc/sparkfleet-sim/profile").read_text(encoding="utf-8") == "no-gpu\n"

    refused = select("rtx9090")
    assert refused.returncode == 2
    assert "unknown profile 'rtx9090'" in refused.stderr


# --- -lgc / -rgc: GPU clock caps, held by the simulated driver until the box restarts -------


def test_lock_sets_the_caps_in_the_real_tools_words_and_keeps_them(tmp_path):
    state = tmp_path / "run/sparkfleet-sim/gpu-clocks.json"
    code, out, _err = smi.run(["-lgc", "600,1800"], profile(), "", euid=0, state=state)
    assert code == 0
    assert out == 'GPU clocks set to "(gpuClkMin 600, gpuClkMax 1800)" for GPU 0000000F:01:00.0\nAll done.\n'
    assert smi.locked_clocks(state) == {"0000000F:01:00.0": {"min_mhz": 600, "max_mhz": 1800}}


@pytest.mark.parametrize("argv", [["--lock-gpu-clocks=900"], ["-lgc", "900"], ["--lock-gpu-clocks", "900,900"]])
def test_lock_accepts_the_long_form_and_one_value(tmp_path, argv):
    state = tmp_path / "clocks.json"
    code, out, _err = smi.run(argv, profile(), "", euid=0, state=state)
    assert code == 0 and "(gpuClkMin 900, gpuClkMax 900)" in out
    assert smi.locked_clocks(state)["0000000F:01:00.0"] == {"min_mhz": 900, "max_mhz": 900}


def test_lock_lowers_a_maximum_above_the_gpus_to_it(tmp_path):
    """The h100 profile knows its highest graphics clock: the driver caps at it, as the real one does."""
    code, out, _err = smi.run(["-lgc", "0,2100"], profile("h100"), "", euid=0, state=tmp_path / "c.json")
    assert code == 0
    assert out.startswith('GPU clocks set to "(gpuClkMin 0, gpuClkMax 1980)" for GPU 00000000:18:00.0\n')


def test_reset_drops_the_caps(tmp_path):
    state = tmp_path / "clocks.json"
    smi.run(["-lgc", "600,1800"], profile(), "", euid=0, state=state)
    for option in ("-rgc", "--reset-gpu-clocks"):
        assert smi.run([option], profile(), "", euid=0, state=state) == (0, "All done.\n", "")
        assert smi.locked_clocks(state) == {}


@pytest.mark.parametrize("argv", [["-lgc", "600,1800"], ["-rgc"]])
def test_a_user_who_is_not_root_is_refused(tmp_path, argv):
    state = tmp_path / "clocks.json"
    code, out, _err = smi.run(argv, profile(), "", euid=1000, state=state)
    assert code == 4
    assert out == ("The current user does not have permission to change clocks for GPU 0000000F:01:00.0.\n"
                   "Terminating early due to previous errors.\n")
    assert not state.exists()


@pytest.mark.parametrize("value", ["1800,600", "fast", "1,2,3", ""])
def test_a_malformed_lock_is_refused(tmp_path, value):
    code, out, _err = smi.run(["-lgc", value], profile(), "", euid=0, state=tmp_path / "c.json")
    assert code == 2 and "Invalid combination of input arguments" in out


def test_max_graphics_clock_query_is_na_without_a_capture_and_unchanged_by_a_lock(tmp_path):
    """No GB10 capture of clocks.max.graphics: the stand-in says [N/A] there rather than invent one; a lock
    never changes the field on either profile (the real tool reports no locked range in --query-gpu)."""
    argv = ["--query-gpu=clocks.max.graphics", "--format=csv,noheader,nounits"]
    assert smi.run(argv, profile(), "", euid=0) == (0, "[N/A]\n", "")
    smi.run(["-lgc", "300,900"], profile("h100"), "", euid=0, state=tmp_path / "c.json")
    assert smi.run(argv, profile("h100"), "", euid=0) == (0, "1980\n", "")


def test_the_caps_live_under_run_which_a_restart_empties():
    assert smi.CLOCKS_FILE.relative_to(smi.SIM_ROOT).parts[0] == "run"
