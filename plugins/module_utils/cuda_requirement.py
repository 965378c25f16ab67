# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The CUDA version a container image requires, read as NVIDIA's container runtime reads it, and whether a driver
runs it.

The runtime (nvidia-container-toolkit, internal/config/image/cuda_image.go, GetRequirements) hands an image's
NVIDIA_REQUIRE_CUDA to libnvidia-container, which refuses to start the container on a driver whose CUDA version is
older: "requirement error: unsatisfied condition: cuda>=13.1, please update your driver to a newer version, or use an
earlier cuda container" (https://github.com/NVIDIA/nvidia-docker/issues/1442). An image with CUDA_VERSION and no
NVIDIA_REQUIRE_CUDA (a "legacy" image, IsLegacy) requires cuda>= its major.minor; NVIDIA_DISABLE_REQUIRE set to a
true value (HasDisableRequire) turns the requirement off. The container's environment is the image's with the
container's own (`docker run -e`) over it, so a deployment's environment can set either.

Only the cuda>= condition is read. libnvidia-container also takes brand=...,driver>=N,driver<M alternatives (each
space-separated word an alternative, src/cli/dsl.c): NVIDIA's CUDA base images list recent driver branches there,
so the runtime starts such an image on those branches on CUDA forward compatibility, which NVIDIA supports on
data-center GPUs only (https://docs.nvidia.com/deploy/cuda-compatibility/). For a Spark that is no way to run it:
the alternatives are left out on purpose.

Shared by the driver policy (the image's CUDA against the driver before and after an update) and the vllm role's
checks (the image's CUDA against the driver before a pull and before its container changes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import compare_versions

# NVIDIA's CUDA base images: NVIDIA_REQUIRE_CUDA="cuda>=13.0 brand=unknown,driver>=535,driver<536 ..."
# (gitlab.com/nvidia/container-images/cuda, dist/*/base/Dockerfile); CUDA_VERSION is the toolkit's full version.
# The brand=...,driver>=N,driver<N+1 alternatives let data-centre GPUs on an older long-term branch run the image
# through the CUDA forward-compatibility package; they are not read here: the GPU's brand is not among the facts,
# and the cuda>= term is what a driver without that package must meet.
_REQUIRE_CUDA = re.compile(r"(?:^|\s)cuda>=(\d+(?:\.\d+)?)(?=\s|,|$)")
_CUDA_VERSION = re.compile(r"^\s*(\d+)\.(\d+)")
# The values Go's strconv.ParseBool reads as true (strconv/atob.go), which HasDisableRequire uses; any other value,
# an unparsable one included, leaves the requirement on.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"


def environment(env: Iterable[str] | Mapping[str, object] | None) -> dict[str, str]:
    """An image's Config.Env (NAME=value lines) or a mapping of names to values -> {name: value as text}."""
    if isinstance(env, Mapping):
        return {str(name): "" if value is None else str(value) for name, value in env.items()}
    return dict(str(item).split("=", 1) for item in env or [] if "=" in str(item))


def container_environment(image_env: Iterable[str] | Mapping[str, object] | None,
                          own_env: Mapping[str, object] | None) -> dict[str, str]:
    """What the container's processes, and the runtime's hook, see: the image's environment with the container's own
    over it (a `docker run -e NAME=...` replaces the image's NAME)."""
    return {**environment(image_env), **environment(own_env)}


def required_cuda(env: Iterable[str] | Mapping[str, object] | None) -> str | None:
    """The CUDA version an environment requires: NVIDIA_REQUIRE_CUDA's cuda>=X.Y, or for a legacy image (CUDA_VERSION
    without NVIDIA_REQUIRE_CUDA) CUDA_VERSION's major.minor; None when it requires none."""
    values = environment(env)
    if values.get(REQUIRE_CUDA):
        match = _REQUIRE_CUDA.search(values[REQUIRE_CUDA])
        return match.group(1) if match else None
    legacy = _CUDA_VERSION.match(values.get("CUDA_VERSION", ""))
    return f"{legacy.group(1)}.{legacy.group(2)}" if legacy else None


def requirement_disabled(env: Iterable[str] | Mapping[str, object] | None) -> bool:
    """Whether NVIDIA_DISABLE_REQUIRE turns the runtime's requirement check off."""
    return environment(env).get(DISABLE_REQUIRE, "").strip() in _GO_TRUE


def driver_runs(driver_cuda: str, image_cuda: str) -> bool:
    """Whether a driver whose newest CUDA is driver_cuda runs an image requiring image_cuda (cuda>=image_cuda)."""
    return compare_versions(image_cuda, driver_cuda) <= 0
