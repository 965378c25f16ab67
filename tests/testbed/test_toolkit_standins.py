"""The NVIDIA Container Toolkit stand-ins behave like the real tools where the roles use them."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TOOLKIT = HERE / "standins" / "toolkit"
PROFILES = HERE / "standins" / "profiles"


@pytest.fixture
def sim_root(tmp_path):
    shutil.copytree(PROFILES, tmp_path / "usr/lib/sparkfleet-sim/profiles")
    (tmp_path / "etc/sparkfleet-sim").mkdir(parents=True)
    return tmp_path


def ctk(sim_root: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    (sim_root / "etc/sparkfleet-sim/profile").write_text(profile + "\n")
    env = {**os.environ, "SPARKFLEET_SIM_ROOT": str(sim_root)}
    command = [sys.executable, str(TOOLKIT / "nvidia-ctk"), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


def test_cdi_generate_lists_the_profile_gpus(sim_root):
    out = sim_root / "etc/cdi/nvidia.yaml"
    result = ctk(sim_root, "gb10", "cdi", "generate", f"--output={out}")
    assert result.returncode == 0, result.stderr
    assert "Generated CDI spec" in result.stderr
    spec = out.read_text()
    assert "kind: nvidia.com/gpu" in spec
    assert 'name: "0"' in spec and "name: all" in spec
    listed = ctk(sim_root, "gb10", "cdi", "list")
    assert listed.stdout.split() == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert "Found 2 CDI devices" in listed.stderr


def test_cdi_generate_fails_like_the_real_tool_without_a_driver(sim_root):
    result = ctk(sim_root, "no-gpu", "cdi", "generate", "--output", str(sim_root / "x.yaml"))
    assert result.returncode == 1
    assert "failed to initialize NVML" in result.stderr
    assert not (sim_root / "x.yaml").exists()


def test_runtime_configure_merges_like_nvidia_ctk(sim_root):
    config = sim_root / "daemon.json"
    config.write_text('{"data-root": "/raid/docker", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}')
    result = ctk(sim_root, "gb10", "runtime", "configure", "--runtime=docker", f"--config={config}", "--set-as-default")
    assert result.returncode == 0, result.stderr
    assert json.loads(config.read_text()) == {
        "data-root": "/raid/docker",
        "runtimes": {"crun": {"path": "/usr/bin/crun"}, "nvidia": {"args": [], "path": "nvidia-container-runtime"}},
        "default-runtime": "nvidia",
    }


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb")
def test_packages_have_the_real_names_files_and_dependencies(tmp_path):
    subprocess.run([str(TOOLKIT / "build-toolkit-debs"), "1.17.8-1", str(tmp_path)], check=True, capture_output=True)
    debs = {p.name.split("_")[0]: p for p in tmp_path.glob("*.deb")}
    assert set(debs) == {
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    }

    def field(name: str, key: str) -> str:
        command = ["dpkg-deb", "-f", str(debs[name]), key]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()

    def files(name: str) -> str:
        return subprocess.run(["dpkg-deb", "-c", str(debs[name])], capture_output=True, text=True, check=True).stdout

    assert "nvidia-container-toolkit-base (= 1.17.8-1)" in field("nvidia-container-toolkit", "Depends")
    assert "./usr/bin/nvidia-container-runtime-hook" in files("nvidia-container-toolkit")
    assert "./usr/bin/nvidia-ctk" in files("nvidia-container-toolkit-base")
    assert "./usr/bin/nvidia-container-runtime" in files("nvidia-container-toolkit-base")
    for package, tool in (("nvidia-container-toolkit-base", "nvidia-ctk"),
                          ("nvidia-container-toolkit", "nvidia-container-runtime-hook"),
                          ("libnvidia-container-tools", "nvidia-container-cli")):
        text = subprocess.run(
            f"dpkg-deb --fsys-tarfile {debs[package]} | tar -xO ./usr/bin/{tool}",
            shell=True,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert text.startswith("#!/usr/bin/python3\n"), tool
        assert 'VERSION = "1.17.8"' in text, tool


# --- nvidia-container-runtime-hook and nvidia-container-cli: the container's CUDA requirement -------------------
#
# dockerd runs the hook for a GPU container (`--gpus`, device_requests) with the container's state on stdin; the hook
# reads the bundle's config.json and execs nvidia-container-cli, which checks the requirement against the simulated
# box's driver. Upstream: nvidia-container-toolkit v1.17.8 cmd/nvidia-container-runtime-hook/, libnvidia-container
# src/cli/configure.c and src/cli/dsl.c.

CLI = TOOLKIT / "nvidia-container-cli"
HOOK = TOOLKIT / "nvidia-container-runtime-hook"
VLLM_RELEASES = HERE / "vllm-standin" / "releases"
LEGACY = "Auto-detected mode as 'legacy'\n"
BRANDS = ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps", "vpc", "vcs", "vws",
          "cloudgaming")


def forward_compat(cuda: str, *branches: int) -> str:
    """An NVIDIA CUDA base image's NVIDIA_REQUIRE_CUDA: cuda>=X, or a listed brand on a forward-compatible branch."""
    return " ".join([f"cuda>={cuda}"] + [f"brand={b},driver>={n},driver<{n + 1}" for n in branches for b in BRANDS])


CUDA_130_IMAGE = forward_compat("13.0", 535, 550, 565, 570, 575)
CUDA_131_IMAGE = forward_compat("13.1", 535, 550, 570, 575, 580)
REFUSED_131 = ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.1, please update your driver "
               "to a newer version, or use an earlier cuda container\n")


def load_cli_module():
    loader = importlib.machinery.SourceFileLoader("nvidia_container_cli_standin", str(CLI))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def dsl():
    return load_cli_module()


@pytest.fixture
def hook_box(sim_root, tmp_path):
    """A bundle, and PATH with an nvidia-container-cli that records its command line and runs the stand-in."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    argv_file = tmp_path / "cli-argv"
    wrapper = bindir / "nvidia-container-cli"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{argv_file}"\nexec "{sys.executable}" "{CLI}" "$@"\n')
    wrapper.chmod(0o755)
    bundle = tmp_path / "bundle"
    bundle.mkdir()

    def run(profile: str, env: list[str], *args: str, spec: dict | None = None, pid: int = 4242):
        (sim_root / "etc/sparkfleet-sim/profile").write_text(profile + "\n")
        body = {"ociVersion": "1.2.0", "process": {"env": env}, "root": {"path": "/var/lib/docker/overlay2/x/merged"}}
        (bundle / "config.json").write_text(json.dumps(spec if spec is not None else body))
        argv_file.unlink(missing_ok=True)
        state = json.dumps({"ociVersion": "1.2.0", "id": "c0ffee", "status": "creating", "pid": pid,
                            "bundle": str(bundle)})
        environ = {**os.environ, "SPARKFLEET_SIM_ROOT": str(sim_root), "PATH": f"{bindir}:{os.environ['PATH']}"}
        done = subprocess.run([sys.executable, str(HOOK), *(args or ("prestart",))], input=state, capture_output=True,
                              text=True, env=environ, check=False)
        cli_argv = argv_file.read_text().splitlines() if argv_file.exists() else None
        return done, cli_argv

    return run


def gpu_env(*extra: str) -> list[str]:
    # A CUDA image's environment, then what `docker run --gpus all` appends (moby daemon/nvidia_linux.go).
    return ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin", "NVIDIA_VISIBLE_DEVICES=all",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility", *extra, "NVIDIA_VISIBLE_DEVICES=all"]


def ldconfig() -> str:
    return "@/sbin/ldconfig.real" if os.path.exists("/sbin/ldconfig.real") else "@/sbin/ldconfig"


def test_hook_hands_the_real_command_line_to_the_cli(hook_box):
    done, argv = hook_box("gb10", gpu_env("CUDA_VERSION=13.0.2", f"NVIDIA_REQUIRE_CUDA={CUDA_130_IMAGE}"))
    assert done.returncode == 0, done.stderr
    assert done.stderr == LEGACY
    assert argv == ["--load-kmods", "configure", "--cuda-compat-mode=ldconfig", f"--ldconfig={ldconfig()}",
                    "--device=all", "--compute", "--utility", f"--require={CUDA_130_IMAGE}", "--pid=4242",
                    "/var/lib/docker/overlay2/x/merged"]


def test_an_image_that_needs_a_newer_cuda_is_refused_with_libnvidia_containers_words(hook_box):
    done, argv = hook_box("gb10", gpu_env("CUDA_VERSION=13.1.0", "NVIDIA_REQUIRE_CUDA=cuda>=13.1"))
    assert done.returncode == 1
    assert done.stderr == LEGACY + REFUSED_131
    assert "--require=cuda>=13.1" in argv


@pytest.mark.parametrize("value", ["true", "1", "t", "TRUE", "True"])
def test_nvidia_disable_require_turns_the_requirements_off(hook_box, value):
    done, argv = hook_box("gb10", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.1", f"NVIDIA_DISABLE_REQUIRE={value}"))
    assert done.returncode == 0, done.stderr
    assert not [word for word in argv if word.startswith("--require")]


@pytest.mark.parametrize("value", ["yes", "on", "", "false", "0"])
def test_nvidia_disable_require_is_read_as_gos_strconv_parsebool(hook_box, value):
    done, _argv = hook_box("gb10", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.1", f"NVIDIA_DISABLE_REQUIRE={value}"))
    assert done.returncode == 1
    assert done.stderr.endswith(REFUSED_131)


def test_the_containers_own_environment_replaces_the_images(hook_box):
    # `docker run -e NVIDIA_REQUIRE_CUDA=...` comes after the image's in process.env: the later one counts.
    done, argv = hook_box("gb10", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.1", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"))
    assert done.returncode == 0, done.stderr
    assert [word for word in argv if word.startswith("--require")] == ["--require=cuda>=13.0"]


def test_every_nvidia_require_variable_is_a_requirement_but_jetpacks(hook_box):
    done, argv = hook_box("gb10", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.0", "NVIDIA_REQUIRE_ARCH=arch>=12.2",
                                          "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS=base-only"))
    assert done.returncode == 1
    assert done.stderr == LEGACY + "nvidia-container-cli: requirement error: unsatisfied condition: arch>=12.2\n"
    assert [word for word in argv if word.startswith("--require")] == ["--require=cuda>=13.0", "--require=arch>=12.2"]


def test_a_legacy_image_requires_its_cuda_versions_major_minor_on_every_gpu(hook_box):
    # CUDA_VERSION without NVIDIA_REQUIRE_CUDA and no NVIDIA_VISIBLE_DEVICES: all GPUs, all capabilities, cuda>=13.1.
    done, argv = hook_box("gb10", ["PATH=/usr/bin", "CUDA_VERSION=13.1.0"])
    assert done.returncode == 1
    assert done.stderr == LEGACY + REFUSED_131
    assert argv[4:] == ["--device=all", "--compat32", "--compute", "--display", "--graphics", "--ngx", "--utility",
                        "--video", "--require=cuda>=13.1", "--pid=4242", "/var/lib/docker/overlay2/x/merged"]


def test_a_legacy_cuda_version_that_is_not_semver_is_refused_by_the_hook(hook_box):
    done, argv = hook_box("gb10", ["CUDA_VERSION=13.0.2.006"])
    assert (done.returncode, argv) == (1, None)
    assert done.stderr == ("failed to get requirements failed to get version: invalid CUDA version 13.0.2.006: "
                           "invalid version string\n")


@pytest.mark.parametrize("env", [["PATH=/usr/bin"], ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_REQUIRE_CUDA=cuda>=99"],
                                 ["NVIDIA_VISIBLE_DEVICES=", "NVIDIA_REQUIRE_CUDA=cuda>=99"]])
def test_a_container_without_gpus_is_left_alone(hook_box, env):
    done, argv = hook_box("gb10", env)
    assert (done.returncode, done.stderr, argv) == (0, "", None)


def test_the_driver_is_checked_before_the_requirements(hook_box):
    done, _argv = hook_box("no-gpu", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.1"))
    assert done.returncode == 1
    assert done.stderr == LEGACY + "nvidia-container-cli: initialization error: nvml error: driver not loaded\n"


def test_brand_alternatives_let_a_forward_compatible_branch_through(hook_box):
    # libnvidia-container ORs the space-separated alternatives. A CUDA 13.1 image lists brand=...,driver>=580,
    # driver<581: the GB10's 580 driver (CUDA 13.0) passes through them; a bare cuda>=13.1 does not.
    assert hook_box("gb10", gpu_env(f"NVIDIA_REQUIRE_CUDA={CUDA_131_IMAGE}"))[0].returncode == 0
    # The 535 branch (CUDA 12.2) runs a CUDA 13.0 image the same way; the message names the predicate's first word.
    assert hook_box("old-driver", gpu_env(f"NVIDIA_REQUIRE_CUDA={CUDA_130_IMAGE}"))[0].returncode == 0
    done, _argv = hook_box("old-driver", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=geforce,driver>=535,driver<536"))
    assert done.returncode == 1
    assert done.stderr.endswith("requirement error: unsatisfied condition: cuda>=13.0, please update your driver to "
                                "a newer version, or use an earlier cuda container\n")


def test_a_device_the_box_does_not_have_is_refused(hook_box):
    done, _argv = hook_box("gb10", ["NVIDIA_VISIBLE_DEVICES=1"])
    assert done.returncode == 1
    assert done.stderr == LEGACY + "nvidia-container-cli: device error: 1: unknown device\n"


@pytest.mark.parametrize("devices", ["0", "GPU-00000000-0000-0000-0000-000000000000", "0000000f:01:00.0", "0,0"])
def test_devices_are_selected_by_index_uuid_or_bus_id(hook_box, devices):
    done, argv = hook_box("gb10", [f"NVIDIA_VISIBLE_DEVICES={devices}", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"])
    assert done.returncode == 0, done.stderr
    # The hook's device list keeps a repeated ID at its last place (image/devices.go newDevices): "0,0" -> ",0".
    assert f"--device={',0' if devices == '0,0' else devices}" in argv


def test_all_among_the_devices_means_all(hook_box, sim_root):
    _done, argv = hook_box("gb10", ["NVIDIA_VISIBLE_DEVICES=0,all,9"])
    assert "--device=all" in argv
    # The cli stops at "all" (src/cli/common.c select_devices): what follows is not looked at.
    assert cli(sim_root, "gb10", "configure", "--device=0,all,9", "/r").returncode == 0


def test_a_spec_that_cannot_be_read_fails_like_the_real_hook(hook_box, tmp_path):
    done, _argv = hook_box("gb10", [], spec={"ociVersion": "1.2.0", "root": {"path": "/x"}})
    assert (done.returncode, done.stderr) == (1, "Process is empty in OCI spec\n")
    (tmp_path / "bundle" / "config.json").unlink()
    state = json.dumps({"pid": 1, "bundle": str(tmp_path / "bundle")})
    done = subprocess.run([sys.executable, str(HOOK), "prestart"], input=state, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 1
    spec_path = tmp_path / "bundle" / "config.json"
    assert done.stderr == f"could not open OCI spec: open {spec_path}: no such file or directory\n"


def test_the_hooks_command_line_is_gos_flag_package():
    version = subprocess.run([sys.executable, str(HOOK), "-version"], capture_output=True, text=True, check=False)
    assert version.stdout.startswith("NVIDIA Container Runtime Hook version ")
    refused = subprocess.run([sys.executable, str(HOOK), "-v"], capture_output=True, text=True, check=False)
    assert refused.returncode == 2
    assert refused.stderr.startswith("flag provided but not defined: -v\nUsage of ")
    for command in ("poststart", "poststop"):
        assert subprocess.run([sys.executable, str(HOOK), command], check=False).returncode == 0


def test_config_toml_disable_require_and_cli_path(hook_box, sim_root, tmp_path):
    config = sim_root / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    wrapper = tmp_path / "bin" / "nvidia-container-cli"
    config.write_text(f'disable-require = true\n[nvidia-container-cli]\npath = "{wrapper}"\nload-kmods = false\n')
    done, argv = hook_box("gb10", gpu_env("NVIDIA_REQUIRE_CUDA=cuda>=13.1"))
    assert done.returncode == 0, done.stderr
    assert argv[0] == "configure" and not [word for word in argv if word.startswith("--require")]


def test_the_vllm_standin_images_requirement_runs_on_the_simulated_sparks(hook_box):
    # releases/<version>/image.env: what the stand-in images carry, as the real vllm/vllm-openai images do.
    for release in ("0.19.1", "0.34.0"):
        env = [line for line in (VLLM_RELEASES / release / "image.env").read_text().splitlines()
               if line and not line.startswith("#")]
        for profile in ("gb10", "gb10-64", "h100"):
            done, argv = hook_box(profile, gpu_env(*env))
            assert done.returncode == 0, (release, profile, done.stderr)
            assert f"--require={CUDA_130_IMAGE}" in argv


def cli(sim_root: Path, profile: str, *args: str) -> subprocess.CompletedProcess:
    (sim_root / "etc/sparkfleet-sim/profile").write_text(profile + "\n")
    env = {**os.environ, "SPARKFLEET_SIM_ROOT": str(sim_root)}
    return subprocess.run([sys.executable, str(CLI), *args], capture_output=True, text=True, env=env, check=False)


def test_cli_configure_checks_without_a_hook(sim_root):
    ok = cli(sim_root, "gb10", "--load-kmods", "configure", "--device=all", "--require=cuda>=13.0", "--pid=1", "/r")
    assert (ok.returncode, ok.stderr) == (0, "")
    refused = cli(sim_root, "gb10", "configure", "--dev", "0", "-r", "cuda>=13.1", "/r")  # getopt: prefix, short
    assert (refused.returncode, refused.stderr) == (1, REFUSED_131)
    assert cli(sim_root, "gb10", "configure", "/").stderr == (
        "nvidia-container-cli: input error: invalid rootfs directory\n")
    many = cli(sim_root, "gb10", "configure", *["--require=cuda>=1"] * 33, "/r")
    assert many.stderr == "nvidia-container-cli: input error: too many requirements\n"
    assert cli(sim_root, "gb10", "configure", "--pid=x", "/r").stderr == (
        "nvidia-container-cli: input error: parse pid failed: invalid argument\n")
    unknown = cli(sim_root, "gb10", "configure", "--bogus", "/r")
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("nvidia-container-cli configure: unrecognized option '--bogus'\n")
    assert cli(sim_root, "gb10", "--version").stdout.startswith("cli-version: ")


@pytest.mark.parametrize(("predicate", "expected"), [
    ("cuda>=13.0", None),
    ("cuda>=13.1", "unsatisfied condition: cuda>=13.1, please update your driver to a newer version, or use an "
                   "earlier cuda container"),
    ("cuda>=13.1 brand=tesla,driver>=580,driver<581", "unsatisfied condition: cuda>=13.1, please update your driver "
                                                      "to a newer version, or use an earlier cuda container"),
    ("cuda>=13.1 brand=NVIDIA,driver>=580,driver<581", None),          # brand: case-insensitive
    ("brand=tesla,cuda>=13.0", "unsatisfied condition: brand=tesla,cuda>=13.0"),  # no advice without cuda>= first
    ("driver>=580.142 driver<1", None),
    ("driver>580.142", "unsatisfied condition: driver>580.142"),
    ("driver=580.142.0", None),                                       # trailing .0s are equal
    ("arch>=12.1,arch<12.2", None),
    ("cuda>=13.1   cuda>=13.0", None),                                # empty words are skipped
    ("cuda>=13.1 ,, cuda>=13.0", "unsatisfied condition: cuda>=13.1, please update your driver to a newer version, "
                                 "or use an earlier cuda container"),  # a word of empty conditions ends the search
    ("CUDA>=13.0", None),                                             # rule names: case-insensitive
    ("cuda=>13.0", "invalid expression"),
    ("cuda>=13.x", "invalid expression"),
    ("brand<nvidia", "invalid expression"),
    ("foo>=1", "invalid expression"),
    ("cuda!13.1", None),                                              # "!" is read as "!=" (strncmp on 1 char)
    ("", None),
])
def test_dsl_evaluates_like_libnvidia_container(dsl, predicate, expected):
    driver = {"nvrm_version": "580.142", "cuda_version": "13.0"}
    assert dsl.evaluate(predicate, driver, {"arch": "12.1", "brand": "Nvidia"}) == expected


def test_dsl_assumes_arch_and_brand_ok_without_a_visible_device(dsl):
    driver = {"nvrm_version": "535.247.01", "cuda_version": "12.2"}
    assert dsl.evaluate("cuda>=13.0 brand=geforce,driver>=535,driver<536", driver, None) is None
    assert dsl.evaluate("cuda>=13.0 brand=geforce,driver>=535,driver<536", driver,
                        {"arch": "12.1", "brand": "Nvidia"}) is not None


@pytest.mark.parametrize(("v1", "op", "v2", "expected"), [
    ("13.0", ">=", "13", 1), ("13.0", ">", "13", 0), ("13", "<", "13.0.1", 1), ("580.142", "<", "581", 1),
    ("535.247.01", ">=", "535", 1), ("535.247.01", "<", "536", 1), ("13.0", "!=", "13.00", 0),
    ("13.1", "=", "13.01", 1),
    (".5", ">=", "0", -1), ("13a", ">=", "1", -1), ("18446744073709551615", ">", "1", -1),
])
def test_version_comparison_is_dsl_compare_version(dsl, v1, op, v2, expected):
    assert dsl.compare_version(v1, op, v2) == expected
