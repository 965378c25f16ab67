#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_archive_info
short_description: The image IDs and tags inside a C(docker save) archive, without loading it
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Reads the C(manifest.json) of an archive made by C(docker save) (the format C(docker load) reads, which Docker
    writes since 1.10 and, beside an OCI image layout, since 25.0) and returns each image's ID and tags.
  - The image ID is the digest of the image's configuration, the C(Id) that C(docker image inspect) shows after the
    archive is loaded; it names the layers' content, so a role can check an archive of tens of gigabytes before it
    copies it to a box. A registry digest (C(repository@sha256:...)) is not in such an archive.
  - Only the archive's headers and C(manifest.json) are read (the tar's members are skipped, not read), so a large
    archive takes about as long as listing it.
  - Changes nothing.
options:
  path:
    description:
      - The archive (an uncompressed tar, as C(docker save -o) writes it).
    type: path
    required: true
seealso:
  - name: docker image save
    description: The command that writes these archives.
    link: https://docs.docker.com/reference/cli/docker/image/save/
extends_documentation_fragment:
  - sparkfleet.serving.checks.READ_ONLY
"""

EXAMPLES = r"""
- name: Read the image ID of the archive on the controller
  sparkfleet.serving.image_archive_info:
    path: /srv/images/vllm-openai-v0.19.1-cu130.tar
  delegate_to: localhost
  run_once: true
  register: archive
"""

RETURN = r"""
images:
  description: The archive's images, in the order of its C(manifest.json).
  returned: success
  type: list
  elements: dict
  sample:
    - id: sha256:d02188e1e1498f81e67899f538f727d307679522b5f4e1696c9098b6343884e6
      repo_tags: [vllm/vllm-openai:v0.19.1-cu130]
      layers: 6
  contains:
    id:
      description: The image ID, C(sha256:) and 64 hex digits.
      type: str
    repo_tags:
      description: The names the image gets when loaded (C(docker save IMAGE) by ID gives none).
      type: list
      elements: str
    layers:
      description: How many layers the image has.
      type: int
"""

import json
import re
import tarfile

from ansible.module_utils.basic import AnsibleModule

MANIFEST = "manifest.json"
# The config's member: "<hex>.json" (Docker before 25.0) or "blobs/sha256/<hex>" (the OCI layout of 25.0 and later).
CONFIG_NAME = re.compile(r"^(?:blobs/sha256/)?([0-9a-f]{64})(?:\.json)?$")


def read_manifest(path: str) -> list:
    """The parsed manifest.json of the archive at path; ValueError says what is wrong."""
    try:
        with tarfile.open(path, mode="r:") as archive:
            try:
                member = archive.getmember(MANIFEST)
            except KeyError:
                raise ValueError(f"{path} has no {MANIFEST}: it is not an archive made by docker save") from None
            handle = archive.extractfile(member)
            if handle is None:
                raise ValueError(f"{path}: {MANIFEST} is not a regular file")
            manifest = json.loads(handle.read())
    except (tarfile.TarError, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} cannot be read as a docker save archive (an uncompressed tar): {exc}") from exc
    if not isinstance(manifest, list):
        raise ValueError(f"{path}: {MANIFEST} is not a list of images")
    return manifest


def images_of(manifest: list) -> list[dict]:
    images = []
    for entry in manifest:
        config = entry.get("Config") if isinstance(entry, dict) else None
        found = CONFIG_NAME.match(config) if isinstance(config, str) else None
        if not found:
            raise ValueError(f"{MANIFEST} names an image configuration {config!r}, "
                             "not <digest>.json or blobs/sha256/<digest>")
        tags = entry.get("RepoTags") or []
        layers = entry.get("Layers") or []
        images.append({"id": f"sha256:{found.group(1)}", "repo_tags": [str(tag) for tag in tags],
                       "layers": len(layers)})
    return images


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}}, supports_check_mode=True)
    try:
        images = images_of(read_manifest(module.params["path"]))
    except ValueError as exc:
        module.fail_json(msg=f"{exc}. Make the archive with `docker save -o FILE IMAGE:TAG`.")
    module.exit_json(changed=False, images=images)


if __name__ == "__main__":
    main()
