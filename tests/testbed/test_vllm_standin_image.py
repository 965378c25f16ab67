"""The vLLM stand-in images carry their real images' CUDA environment (releases/<version>/image.env).

vllm/vllm-openai inherits CUDA_VERSION and NVIDIA_REQUIRE_CUDA from its nvidia/cuda base image, and NVIDIA's
container runtime checks the box's driver against them; build.sh passes each release's values to the Containerfile,
which sets them as ENV, and the image's tag (a hash of its inputs) changes with them. With VLLM_SDIST set to a
supported release's sdist, CUDA_VERSION is checked against the release pipeline that built the real image.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

STANDIN_DIR = Path(__file__).resolve().parent / "vllm-standin"
RELEASES = ("0.19.1", "0.34.0")
ALTERNATIVE = re.compile(r"brand=([a-z]+),driver>=(\d+),driver<(\d+)")


def image_env(release: str, root: Path = STANDIN_DIR) -> dict[str, str]:
    lines = (root / "releases" / release / "image.env").read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.parametrize("release", RELEASES)
def test_image_env_is_a_cuda_13_0_images(release):
    env = image_env(release)
    assert set(env) == {"CUDA_VERSION", "NVIDIA_REQUIRE_CUDA"}
    assert re.fullmatch(r"13\.0\.\d+", env["CUDA_VERSION"])
    first, *alternatives = env["NVIDIA_REQUIRE_CUDA"].split(" ")
    # The base image requires its own CUDA major.minor, or a listed brand on a forward-compatible driver branch.
    assert first == "cuda>=13.0"
    for alternative in alternatives:
        _brand, low, high = ALTERNATIVE.fullmatch(alternative).groups()
        assert int(high) == int(low) + 1, alternative
    assert sorted({int(ALTERNATIVE.fullmatch(a).group(2)) for a in alternatives}) == [535, 550, 565, 570, 575]


def test_the_containerfile_sets_them_as_env():
    text = (STANDIN_DIR / "Containerfile").read_text(encoding="utf-8")
    assert "ARG CUDA_VERSION\n" in text and "ARG NVIDIA_REQUIRE_CUDA\n" in text
    env_line = next(line for line in text.splitlines() if line.startswith("ENV VLLM_STANDIN_RELEASE="))
    assert 'CUDA_VERSION=${CUDA_VERSION} NVIDIA_REQUIRE_CUDA="${NVIDIA_REQUIRE_CUDA}"' in env_line
    # After the layers all releases share: the release's environment does not split them.
    assert text.index("ARG NVIDIA_REQUIRE_CUDA") > text.index("COPY bench_serve.py")


FAKE_DOCKER = """#!/bin/sh
# Records what build.sh asks of Docker; answers as an engine with the base image and no stand-in image.
log="$FAKE_DOCKER_LOG"
case "$1 $2" in
    "images "*) echo sparkfleet-sim/base-debian:0123456789ab ;;
    "image inspect")
        if [ "$3" = -f ]; then echo sha256:base; else exit 1; fi ;;
    "build "*) printf '%s\\0' "$@" >> "$log.build"; printf '\\n' >> "$log.build" ;;
    "tag "*) echo "$2 $3" >> "$log.tag" ;;
esac
"""


@pytest.fixture
def fake_build(tmp_path):
    """build.sh on a copy of vllm-standin/ against a fake docker: the build commands and tags it issues."""
    if shutil.which("bash") is None or shutil.which("sha256sum") is None:
        pytest.skip("needs bash and sha256sum")
    copy = tmp_path / "vllm-standin"
    shutil.copytree(STANDIN_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER)
    (bindir / "docker").chmod(0o755)
    log = tmp_path / "docker"

    def run() -> tuple[subprocess.CompletedProcess, list[list[str]], list[str]]:
        for suffix in (".build", ".tag"):
            Path(f"{log}{suffix}").unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_DOCKER_LOG": str(log)}
        done = subprocess.run(["bash", str(copy / "build.sh")], capture_output=True, text=True, env=env, check=False)
        build_log = Path(f"{log}.build")
        builds = [entry.strip("\n").split("\0")[:-1] for entry in build_log.read_text().split("\0\n") if entry] \
            if build_log.exists() else []
        return done, builds, done.stdout.split()

    return copy, run


def build_args(command: list[str]) -> dict[str, str]:
    return dict(command[i + 1].split("=", 1) for i, word in enumerate(command) if word == "--build-arg")


def test_build_passes_each_releases_cuda_environment(fake_build):
    _copy, run = fake_build
    done, builds, images = run()
    assert done.returncode == 0, done.stderr
    assert [image.rsplit("-", 1)[1] for image in images] == list(RELEASES)
    for release, command in zip(RELEASES, builds, strict=True):
        args = build_args(command)
        assert args["VLLM_RELEASE"] == release
        assert {name: args[name] for name in ("CUDA_VERSION", "NVIDIA_REQUIRE_CUDA")} == image_env(release)


def test_a_changed_image_env_changes_only_its_releases_tag(fake_build):
    copy, run = fake_build
    _done, _builds, before = run()
    env_file = copy / "releases" / "0.34.0" / "image.env"
    env_file.write_text(env_file.read_text().replace("CUDA_VERSION=13.0.2", "CUDA_VERSION=13.0.3"))
    done, builds, after = run()
    assert done.returncode == 0, done.stderr
    assert after[0] == before[0] and after[1] != before[1]
    assert build_args(builds[-1])["CUDA_VERSION"] == "13.0.3"


@pytest.mark.parametrize("text", ["CUDA_VERSION=13.0.2\n",
                                  "CUDA_VERSION=13.0.2\nNVIDIA_REQUIRE_CUDA=cuda>=13.0\nX=1\n"])
def test_an_image_env_without_both_variables_or_with_others_stops_the_build(fake_build, text):
    copy, run = fake_build
    (copy / "releases" / "0.34.0" / "image.env").write_text(text)
    done, _builds, _images = run()
    assert done.returncode != 0
    assert "image.env" in done.stderr


SDIST = os.environ.get("VLLM_SDIST", "")


@pytest.mark.skipif(not Path(SDIST).is_file(), reason="set VLLM_SDIST=/path/to/vllm-0.34.0.tar.gz (or 0.19.1) to "
                                                      "check CUDA_VERSION against the release's own pipeline")
def test_cuda_version_is_what_the_release_pipeline_builds_the_cuda_13_image_with():
    with tarfile.open(SDIST) as sdist:
        top = sdist.getnames()[0].split("/")[0]
        release = top.removeprefix("vllm-")

        def read(name: str) -> str:
            return sdist.extractfile(f"{top}/{name}").read().decode()

        pipeline, dockerfile = read(".buildkite/release-pipeline.yaml"), read("docker/Dockerfile")
    assert release in RELEASES
    # Each "Build release image - <arch> - CUDA 13.0" step (the image the supported tag names) and its build args.
    steps = re.findall(r'- label: "Build release image - (x86_64|aarch64) - CUDA 13\.0"\n(.*?)(?=\n\s*- label:|\Z)',
                       pipeline, re.DOTALL)
    assert {step[0] for step in steps} == {"x86_64", "aarch64"}
    for _arch, body in steps:
        assert re.findall(r"CUDA_VERSION=(\S+)", body) == [image_env(release)["CUDA_VERSION"]]
        assert "FINAL_BASE_IMAGE" not in body  # the Dockerfile's nvidia/cuda:${CUDA_VERSION}-base-ubuntu... stays
    assert "ARG FINAL_BASE_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-ubuntu${UBUNTU_VERSION}" in dockerfile
    assert "ENV NVIDIA_REQUIRE_CUDA" not in dockerfile and "ENV CUDA_VERSION" not in dockerfile
