#!/usr/bin/python
# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: registry_warm
short_description: Have a pull-through registry cache store an image's blobs, each fetched from upstream once
version_added: 0.1.0
author: sparkfleet maintainers (@sparkfleet)
description:
  - Run on the host of a pull-through cache (the distribution's registry in proxy mode, the role
    sparkfleet.serving.registry_cache), before any box pulls the image through it.
  - The distribution's registry 2.8 fetches a blob it does not hold twice from upstream on the first request, once
    to store it and once to stream it to the client (C(registry/proxy/proxyblobstore.go), C(ServeBlob), v2.8.2), and
    goes on storing it when that client goes away. So for each blob of the image the cache has not stored yet,
    this module asks for the blob, reads O(read_bytes) of it and goes away; the cache stores the blob (one fetch from
    upstream) while its stream to this module ends within its first buffers. Measured with Debian's
    docker-registry 2.8.2 and a 64 MiB blob, three times - 1.06 to 1.14 blobs' worth from upstream against 2.00 for a
    client that reads the blob (benchmarks/README.md, "The image once per fleet").
  - Then the role's C(settle) entry point waits until the cache has stored them, and every box pulls from the
    cache's store.
  - The manifest is read through the cache (an image index gives the manifest of O(platform)), as the boxes' engines
    read it.
  - A blob already in O(storage_dir) is not asked for. Check mode asks for the manifests only and reports the blobs it
    would ask for.
options:
  url:
    description:
      - The cache's URL, as the boxes' engines use it (C(http://HOST:PORT)).
    type: str
    required: true
  image:
    description:
      - The image, as Docker names it on Docker Hub (C(vllm/vllm-openai:TAG) or C(vllm/vllm-openai@sha256:...));
        a name without a namespace is an official image (C(library/NAME)).
    type: str
    required: true
  platform:
    description:
      - The boxes' platform, C(OS/ARCHITECTURE) as in an image index (a DGX Spark is C(linux/arm64)).
    type: str
    required: true
  storage_dir:
    description:
      - The cache's storage directory (C(registry_cache_storage_dir)); the blobs it holds are not asked for.
    type: path
    required: true
  read_bytes:
    description:
      - How much of each blob is read before going away.
    type: int
    default: 65536
  timeout:
    description:
      - Seconds each request may take to answer.
    type: float
    default: 60
seealso:
  - name: Registry as a pull through cache
    description: The distribution's registry in proxy mode.
    link: https://distribution.github.io/distribution/recipes/mirror/
"""

EXAMPLES = r"""
- name: Have the cache store the image before any box pulls it
  sparkfleet.serving.registry_warm:
    url: http://cache-1:5000
    image: vllm/vllm-openai:v0.19.1-cu130
    platform: linux/arm64
    storage_dir: /var/lib/docker-registry
  delegate_to: cache-1
"""

RETURN = r"""
manifest:
  description: The digest of the platform's image manifest.
  returned: success
  type: str
  sample: sha256:0d6f6e4c3b7c0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293
blobs:
  description: Every blob of that manifest (its configuration, then its layers).
  returned: success
  type: list
  elements: str
asked:
  description: The blobs the cache did not hold, which it was asked for (in check mode, would be).
  returned: success
  type: list
  elements: str
"""

import json
import os
import re
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# Docker Hub's own names for itself.
DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")
# Its requests are told apart from the boxes' in the cache's access log.
USER_AGENT = "sparkfleet-registry-warm"


class WarmError(Exception):
    """What went wrong, said for the task's failure message."""


def repository_and_reference(image: str) -> tuple[str, str]:
    """vllm/vllm-openai:v1 -> ('vllm/vllm-openai', 'v1'); ubuntu -> ('library/ubuntu', 'latest');
    a digest reference keeps its digest; a name with a registry host is refused (the cache mirrors Docker Hub)."""
    rest, _at, digest = image.partition("@")
    name, colon, tag = rest.rpartition(":")
    if not colon or "/" in tag:
        name, tag = rest, ""
    first = name.split("/", 1)[0]
    if "/" in name and first in DOCKER_HUB:
        name = name.split("/", 1)[1]
    elif "/" in name and ("." in first or ":" in first or first == "localhost"):
        raise WarmError(f"{image} is not a Docker Hub image (registry {first}): the cache mirrors Docker Hub only")
    if "/" not in name:
        name = f"library/{name}"
    if digest and not DIGEST.match(digest):
        raise WarmError(f"{image}: the digest is not sha256: and 64 hex digits")
    return name, digest or tag or "latest"


def get_json(url: str, accept: tuple[str, ...], timeout: float) -> tuple[dict, str]:
    try:
        with open_url(url, headers={"Accept": ", ".join(accept)}, http_agent=USER_AGENT, timeout=timeout) as answer:
            return json.loads(answer.read()), answer.headers.get("Docker-Content-Digest", "")
    except urllib.error.HTTPError as exc:
        raise WarmError(f"GET {url} answered HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise WarmError(f"GET {url} failed: {exc}") from None


def platform_manifest(base: str, name: str, reference: str, platform: str, timeout: float) -> tuple[dict, str]:
    """The image manifest of the platform, through an image index when the reference names one."""
    document, digest = get_json(f"{base}/v2/{name}/manifests/{reference}", INDEX_TYPES + MANIFEST_TYPES, timeout)
    if document.get("mediaType") in INDEX_TYPES or "manifests" in document:
        wanted = platform.split("/")
        found = [m for m in document.get("manifests") or []
                 if [(m.get("platform") or {}).get("os"), (m.get("platform") or {}).get("architecture")] == wanted[:2]]
        if not found:
            have = sorted({"/".join(str((m.get("platform") or {}).get(k)) for k in ("os", "architecture"))
                           for m in document.get("manifests") or []})
            raise WarmError(f"{name}:{reference} has no image for {platform} (it has {', '.join(have) or 'none'})")
        digest = found[0]["digest"]
        document, _digest = get_json(f"{base}/v2/{name}/manifests/{digest}", MANIFEST_TYPES, timeout)
    return document, digest


def stored(storage_dir: str, digest: str) -> bool:
    """The blob is in the cache's store (registry/storage/paths.go: blobs/sha256/<first two>/<hex>/data)."""
    hex_digest = digest.split(":", 1)[1]
    path = os.path.join(storage_dir, "docker", "registry", "v2", "blobs", "sha256", hex_digest[:2], hex_digest, "data")
    return os.path.isfile(path)


def ask(base: str, name: str, digest: str, read_bytes: int, timeout: float) -> None:
    """GET the blob, read the first bytes, go away: the cache stores the whole blob by itself."""
    url = f"{base}/v2/{name}/blobs/{digest}"
    try:
        with open_url(url, http_agent=USER_AGENT, timeout=timeout) as answer:
            answer.read(read_bytes)
    except urllib.error.HTTPError as exc:
        raise WarmError(f"GET {url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise WarmError(f"GET {url} failed: {exc}") from None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "platform": {"type": "str", "required": True},
            "storage_dir": {"type": "path", "required": True},
            "read_bytes": {"type": "int", "default": 65536},
            "timeout": {"type": "float", "default": 60},
        },
        supports_check_mode=True,
    )
    params = module.params
    base = params["url"].rstrip("/")
    try:
        if params["read_bytes"] < 1 or params["timeout"] <= 0:
            raise WarmError(f"read_bytes {params['read_bytes']} must be >= 1 and timeout {params['timeout']} > 0")
        name, reference = repository_and_reference(params["image"])
        manifest, digest = platform_manifest(base, name, reference, params["platform"], params["timeout"])
        parts = [manifest.get("config") or {}, *(manifest.get("layers") or [])]
        blobs = [part["digest"] for part in parts if part.get("digest")]
        asked = [blob for blob in blobs if not stored(params["storage_dir"], blob)]
        if not module.check_mode:
            for blob in asked:
                ask(base, name, blob, params["read_bytes"], params["timeout"])
    except WarmError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=bool(asked), manifest=digest, blobs=blobs, asked=asked)


if __name__ == "__main__":
    main()
