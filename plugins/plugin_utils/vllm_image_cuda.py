# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the NVIDIA driver of every box that runs a vLLM deployment's image runs the CUDA that image requires.

NVIDIA's container runtime refuses to start a container whose image requires a newer CUDA than the driver runs
(module_utils/cuda_requirement.py) - after the pull, when the old container is already gone - unless the image's
NVIDIA_REQUIRE_CUDA lists the driver's branch as a brand= alternative: then it starts it on CUDA forward
compatibility (the image's cuda-compat libraries), which NVIDIA supports on data-center GPUs only
(https://docs.nvidia.com/deploy/cuda-compatibility/), not a GB10. The role refuses both: only the cuda>= condition
is compared, the brand= alternatives are not taken. The vllm role asks
twice, and refuses with what it found, what is expected and what to do, before anything changes:

* before the pull (its check, with the other checks of the settings): the deployment's own NVIDIA_REQUIRE_CUDA
  (the container's replaces the image's), else what vllm_image_cuda_version declares, else what the image reference
  says - a -cuXYZ tag suffix, or the CUDA family a vLLM release publishes without a suffix
  (vllm_serve_check.cuda_from_image); a reference that says nothing (a local build's tag, a digest alone) is not
  checked then;
* once the image is on the box, before its container is created or replaced: what the image's own environment
  requires (NVIDIA_REQUIRE_CUDA, or a legacy image's CUDA_VERSION), with the deployment's environment over it as the
  container's is; vllm_image_cuda_version only where the image requires nothing.

NVIDIA_DISABLE_REQUIRE set true in the deployment's environment (or the image's) turns the check off, as it turns
the runtime's off. The driver's CUDA is nvidia-smi's "CUDA Version" (the preflight role's GPU facts, else the role's
own read of nvidia-smi); a box whose driver's CUDA is not known is not checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sparkfleet.serving.plugins.module_utils.cuda_requirement import (
    REQUIRE_CUDA,
    container_environment,
    driver_runs,
    environment,
    required_cuda,
    requirement_disabled,
)
from ansible_collections.sparkfleet.serving.plugins.module_utils.driver_policy import driver_for_cuda
from ansible_collections.sparkfleet.serving.plugins.module_utils.versions import parse_version
from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import (
    UNSUFFIXED_CUDA,
    cuda_from_image,
    release_from_image,
)

# libnvidia-container's refusal, as `docker run` prints it (https://github.com/NVIDIA/nvidia-docker/issues/1442).
RUNTIME_REFUSAL = ("requirement error: unsatisfied condition: cuda>={cuda}, please update your driver to a newer "
                   "version, or use an earlier cuda container")
DECLARED = "as vllm_image_cuda_version declares"
_CUDA = re.compile(r"^\d+(?:\.\d+){0,2}$")


def declared_problem(declared: str) -> str:
    """Why vllm_image_cuda_version cannot be used ("" when it can): empty, or a CUDA version such as 13.0."""
    if not declared or _CUDA.match(declared):
        return ""
    return (f"vllm_image_cuda_version is {declared!r}; expected the CUDA version the image requires, such as 13.0 "
            "(its NVIDIA_REQUIRE_CUDA's cuda>=), or '' to read it from the image reference. Nothing changed.")


def own_requirement(env: Mapping[str, Any]) -> tuple[str, str] | None:
    """The deployment's own NVIDIA_REQUIRE_CUDA (vllm_env, vllm_extra_env): the container's replaces the image's, so
    it is what the runtime reads whatever the image says."""
    value = environment(env).get(REQUIRE_CUDA, "")
    cuda = required_cuda({REQUIRE_CUDA: value}) if value else None
    return (cuda, f"NVIDIA_REQUIRE_CUDA={value!r} in the deployment's vllm_env or vllm_extra_env") if cuda else None


def from_image_env(image_env: Sequence[str] | Mapping[str, Any], env: Mapping[str, Any]) -> tuple[str, str] | None:
    """What the image on the box requires, as the runtime reads the container's environment, and what says it."""
    merged = container_environment(image_env, env)
    cuda = required_cuda(merged)
    if cuda is None:
        return None
    if not merged.get(REQUIRE_CUDA):
        return cuda, (f"its CUDA_VERSION {merged.get('CUDA_VERSION', '')}, which the runtime reads as cuda>={cuda} "
                      "for an image without NVIDIA_REQUIRE_CUDA")
    return own_requirement(env) or (cuda, f"its NVIDIA_REQUIRE_CUDA, cuda>={cuda}")


def requirement(image: str, declared: str, env: Mapping[str, Any],
                image_env: Sequence[str] | Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(the CUDA version the image requires, what says it), or None when nothing does. Once the image is on the box
    (image_env) its environment decides, with the deployment's over it; before the pull the deployment's own
    NVIDIA_REQUIRE_CUDA, else the declared version, else what the reference says. The declared version stands for
    an image that requires nothing."""
    found = from_image_env(image_env, env) if image_env is not None else own_requirement(env)
    if found or image_env is not None:
        return found or ((declared, DECLARED) if declared else None)
    return (declared, DECLARED) if declared else cuda_from_image(image)


def known_drivers(drivers: Mapping[str, Any]) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """host -> (driver version, CUDA version) for the boxes whose driver's CUDA is known, and the other hosts."""
    known, unknown = {}, []
    for host, found in drivers.items():
        driver = found if isinstance(found, Mapping) else {}
        cuda = str(driver.get("cuda_version") or "")
        if not _CUDA.match(cuda):
            unknown.append(str(host))
            continue
        known[str(host)] = (str(driver.get("driver_version") or "of an unknown version"), cuda)
    return known, unknown


def suggested_image(image: str, driver_cuda: str) -> str:
    """What to run instead: the same release's unsuffixed tag where that is its build for the driver's CUDA, else
    an image built for that CUDA or older."""
    release = release_from_image(image)
    if release in UNSUFFIXED_CUDA and UNSUFFIXED_CUDA[release][0] == driver_cuda:
        name = image.partition("@")[0]
        unsuffixed = f"{name.rpartition(':')[0]}:v{release}"
        if unsuffixed != name:
            return f"{unsuffixed} (vLLM {release}'s CUDA {driver_cuda} build)"
    return f"an image built for CUDA {driver_cuda} or older"


def refusal(deployment: Mapping[str, Any], found: tuple[str, str], short: Mapping[str, tuple[str, str]],
            cluster: bool, after_pull: bool) -> str:
    """The message: what was found, what is expected, what to do, and that nothing changed."""
    (cuda, source), name, host = found, deployment["name"], deployment["host"]
    oldest = min((driver_cuda for _version, driver_cuda in short.values()), key=parse_version)
    drivers = ", ".join(f"{box}'s NVIDIA driver {version} runs CUDA up to {driver_cuda}"
                        for box, (version, driver_cuda) in short.items())
    members = "; its cluster runs the image on every member" if cluster else ""
    fix = (f"set vllm_image to {suggested_image(deployment['image'], oldest)}, or move {', '.join(short)} to such "
           "a driver")
    # Before the pull the reference may be wrong about the image; once it is on the box, the image says it.
    if source == DECLARED:
        fix += ", or correct vllm_image_cuda_version"
    elif not after_pull:
        fix += "; if the reference is wrong about the image, set vllm_image_cuda_version to the CUDA it requires"
    end = (f"The image is on {host}, but the container {name} was neither created nor replaced: nothing changed on "
           "it." if after_pull else "Nothing was pulled and nothing changed.")
    return (f"{host}: deployment {name}'s image {deployment['image']} requires CUDA {cuda} ({source}), but {drivers} "
            f"(nvidia-smi's \"CUDA Version\"{members}): NVIDIA's container runtime refuses it (\""
            f"{RUNTIME_REFUSAL.format(cuda=cuda)}\"), or, where the image lists its driver branch as a brand= "
            "alternative, starts it on CUDA forward compatibility, which NVIDIA supports on data-center GPUs only "
            "(https://docs.nvidia.com/deploy/cuda-compatibility/). "
            f"Expected: an image that requires CUDA {oldest} or older, or "
            f"{driver_for_cuda(cuda)}. Fix: {fix}. {end}")


def check(deployment: Mapping[str, Any], drivers: Mapping[str, Any],
          image_env: Sequence[str] | Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A deployment (image, declared: vllm_image_cuda_version, env: its own environment, name, host) against the
    drivers of the boxes that run its image (host -> {driver_version, cuda_version}: the box, or every member of its
    cluster), before the pull or, with the image's Config.Env, once it is on the box -> requires, source, disabled,
    checked (the hosts compared), unknown (the hosts whose driver's CUDA is not known) and refusal ("" when none)."""
    image, declared, env = str(deployment["image"]), str(deployment["declared"]), deployment["env"]
    result: dict[str, Any] = {"requires": None, "source": "", "disabled": False, "checked": [], "unknown": [],
                              "refusal": declared_problem(declared)}
    if result["refusal"]:
        return result
    result["disabled"] = requirement_disabled(container_environment(image_env, env))
    found = requirement(image, declared, env, image_env)
    if result["disabled"] or found is None:
        return result
    result["requires"], result["source"] = found
    known, result["unknown"] = known_drivers(drivers)
    result["checked"] = sorted(known)
    short = {box: driver for box, driver in sorted(known.items()) if not driver_runs(driver[1], found[0])}
    if short:
        result["refusal"] = refusal(deployment, found, short, len(drivers) > 1, image_env is not None)
    return result
