# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters of the vLLM role: the serve argument list, the image reference of a recorded
deployment, what differs between the running container and the role's, and the start-up log
diagnosis."""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

# Helpers are imported where they are used, so that loading this file costs little: to find
# one filter of the collection, ansible-core imports every filter file of it (see ruff.toml).


def vllm_serve_args(settings: dict) -> list[str]:
    """Settings dict -> the arguments after `vllm serve`."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_args import build_serve_args

    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"vllm_serve_args expects a dict of settings, got {type(settings).__name__}")
    try:
        return build_serve_args(settings)
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_serve_args: {exc}") from exc


def _repository(reference: str) -> str:
    """repo[:tag][@digest] -> repo (a registry's host:port keeps its colon)."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def vllm_image_ref(images: object, record: object) -> str:
    """The reference to run a recorded deployment's image by: the recorded reference when it
    still names the recorded image (docker_image_info of [image_id, reference] found both with
    the same id), else a recorded repo digest (of the same repository first), else the id."""
    if not isinstance(images, list) or not isinstance(record, dict):
        raise AnsibleFilterError("vllm_image_ref expects docker_image_info's images and a deployment record (dict)")
    image_id, reference = record.get("image_id") or "", record.get("image") or ""
    if not image_id:
        raise AnsibleFilterError("vllm_image_ref: the deployment record has no image_id")
    ids = [image.get("Id") for image in images if isinstance(image, dict)]
    if reference and ids.count(image_id) == 2:
        return reference
    digests = [d for d in record.get("repo_digests") or [] if isinstance(d, str) and "@sha256:" in d]
    same_repo = [d for d in digests if _repository(d) == _repository(reference)]
    return (same_repo or digests or [image_id])[0]


def vllm_container_differences(container: object, image: object, spec: object, env: object,
                               image_ref: object) -> list[str]:
    """`docker container inspect` and `docker image inspect` of the container and its image (a
    dict each; none or empty: not there) -> what differs from what the role's docker_container
    task sets; empty when nothing does."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_container import differences

    if not container:
        return ["container: not on the box"]
    if not image:
        return ["image: not on the box"]
    if not all(isinstance(v, dict) for v in (container, image, spec, env)) or not isinstance(image_ref, str):
        raise AnsibleFilterError(
            "vllm_container_differences expects the container's and the image's inspect (dicts), the deployment "
            "spec (dict), its environment (dict) and the image reference (str)"
        )
    # Plain copies of the templating engine's lazy containers: each value is templated once here,
    # not again at every comparison.
    spec, env = json.loads(json.dumps(spec)), json.loads(json.dumps(env))
    return differences(container, image, spec, env, image_ref)


def log_lines(log: object) -> str | list[str] | None:
    """The log as diagnose reads it: text, or a list of text lines (None, numbers, bytes made text)."""
    if log is None or isinstance(log, str):
        return log
    if isinstance(log, bytes):
        return log.decode("utf-8", "replace")
    if isinstance(log, (list, tuple)):
        return [
            "" if line is None else line.decode("utf-8", "replace") if isinstance(line, bytes) else str(line)
            for line in log
        ]
    raise AnsibleFilterError(
        f"vllm_diagnose expects the log as text or a list of lines, got {type(log).__name__}; "
        "pass a registered result's .stdout or .stdout_lines"
    )


def vllm_diagnose(log: object, exit_code: object = None, release: object = None) -> list[dict]:
    """Log text or list of lines (and the container's exit code) -> the known failures found, in the
    words of the vLLM release (default the newest supported one)."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_diagnosis import diagnose

    if exit_code is not None and not isinstance(exit_code, int):
        try:
            exit_code = int(exit_code)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"vllm_diagnose: exit_code must be an integer, got {exit_code!r}") from exc
    try:
        return diagnose(log_lines(log), exit_code, None if release is None else str(release))
    except ValueError as exc:
        raise AnsibleFilterError(f"vllm_diagnose: {exc}") from exc


def vllm_recipe(name: object) -> dict:
    """A recipe's name (roles/vllm/recipes/<name>.yml) or the path of a recipe file -> the recipe, checked."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_recipe import RecipeError, load

    try:
        return load(str(name))
    except RecipeError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def vllm_recipe_for_box(recipe: object, mem_total_bytes: object) -> dict:
    """A recipe -> its settings sized to a box of mem_total_bytes of memory."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_recipe import RecipeError, for_box

    if not isinstance(recipe, dict):
        raise AnsibleFilterError(f"vllm_recipe_for_box expects a recipe (dict), got {type(recipe).__name__}")
    try:
        return for_box(recipe, mem_total_bytes)  # type: ignore[arg-type]
    except (RecipeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"vllm_recipe_for_box: {exc}") from exc


def vllm_release_of(image: object, label: object = "") -> str:
    """The vLLM release an image is: its ai.vllm.image.tag label (vLLM's docker/Dockerfile sets it from 0.2x on),
    else its tag (vllm/vllm-openai:v0.34.0, ...:v0.19.1-cu130); "" when neither says."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import (
        release_from_image,
        release_from_label,
    )

    return (release_from_label(str(label or "")) if label else None) or release_from_image(str(image or "")) or ""


def vllm_image_cuda_check(deployment: object, drivers: object, image_env: object = None) -> dict:
    """A deployment (image, declared, env, name, host) against the NVIDIA drivers of the boxes that run its image
    (host -> {driver_version, cuda_version}) -> requires, source, disabled, checked, unknown and refusal ("" when the
    drivers run it). Before the pull from the reference or the declared version; with the image's Config.Env, from
    the image."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_image_cuda import check

    keys = ("image", "declared", "env", "name", "host")
    if not isinstance(deployment, dict) or set(keys) - set(deployment) or not isinstance(deployment["env"], dict):
        raise AnsibleFilterError(f"vllm_image_cuda_check expects the deployment as a dict of {', '.join(keys)} (env: "
                                 "a dict)")
    if not isinstance(drivers, dict):
        raise AnsibleFilterError(f"vllm_image_cuda_check expects the drivers by host (a dict), got "
                                 f"{type(drivers).__name__}")
    if image_env is not None and not isinstance(image_env, (list, dict)):
        raise AnsibleFilterError("vllm_image_cuda_check: image_env must be the image's Config.Env (a list of "
                                 f"NAME=value), got {type(image_env).__name__}")
    declared = "" if deployment["declared"] is None else str(deployment["declared"]).strip()
    return check({**deployment, "declared": declared}, drivers, image_env)


def vllm_driver_cuda(table: object) -> dict:
    """`nvidia-smi`'s table -> {driver_version, cuda_version} from its header (None each when it has none): the CUDA
    version the driver runs, read as the gpu_facts module reads it."""
    from ansible_collections.sparkfleet.serving.plugins.module_utils.gpu_facts import parse_smi_header

    return parse_smi_header(table if isinstance(table, str) else "")


def vllm_serve_check(argv: object, release: object) -> list[str]:
    """`vllm serve`'s arguments (the model first) -> what the release's own parser would refuse (empty: none)."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import check_serve_argv

    if not isinstance(argv, list):
        raise AnsibleFilterError(f"vllm_serve_check expects the argument list, got {type(argv).__name__}")
    return check_serve_argv(str(release), [str(arg) for arg in argv])


def vllm_serve_options(words: object, release: object) -> list[dict]:
    """`vllm serve` words -> each option as the release's parser reads it: word, option, dest."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.vllm_serve_check import options_given

    if not isinstance(words, list):
        raise AnsibleFilterError(f"vllm_serve_options expects a list of words, got {type(words).__name__}")
    return options_given(str(release), [str(word) for word in words])


def vllm_deployments(deployments: object, base: object) -> dict:
    """vllm_deployments, the role's own names -> {"deployments": [...], "errors": [...]}."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_deployments as planner
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    if not isinstance(base, dict):
        raise AnsibleFilterError("vllm_deployments expects the role's own names as a dict")
    return as_filter("vllm_deployments", planner.resolve, deployments, base)


def vllm_deployments_dropped(recorded: object, wanted: object) -> list:
    """The box's record of its deployments, the resolved list -> the recorded ones the list no longer names."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_deployments as planner
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    return as_filter("vllm_deployments_dropped", planner.dropped, recorded, wanted)


def vllm_admission(plans: object, mem_total: object, steady_percent: object, os_reserve: object,
                   overhead: object) -> dict:
    """Each deployment's plan figures -> whether the set fits below the watchdog's steady threshold, and the table."""
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils import vllm_deployments as planner
    from ansible_collections.sparkfleet.serving.plugins.plugin_utils.filter_errors import as_filter

    if not isinstance(plans, list):
        raise AnsibleFilterError("vllm_admission expects a list of the deployments' plan figures")
    percent = float(steady_percent) if steady_percent not in (None, "") else None
    return as_filter("vllm_admission", planner.admission, plans, int(mem_total), percent, int(os_reserve),
                     int(overhead))


class FilterModule:
    def filters(self) -> dict:
        return {
            "vllm_serve_args": vllm_serve_args,
            "vllm_diagnose": vllm_diagnose,
            "vllm_image_ref": vllm_image_ref,
            "vllm_container_differences": vllm_container_differences,
            "vllm_recipe": vllm_recipe,
            "vllm_recipe_for_box": vllm_recipe_for_box,
            "vllm_release_of": vllm_release_of,
            "vllm_image_cuda_check": vllm_image_cuda_check,
            "vllm_driver_cuda": vllm_driver_cuda,
            "vllm_serve_check": vllm_serve_check,
            "vllm_serve_options": vllm_serve_options,
            "vllm_deployments": vllm_deployments,
            "vllm_deployments_dropped": vllm_deployments_dropped,
            "vllm_admission": vllm_admission,
        }
