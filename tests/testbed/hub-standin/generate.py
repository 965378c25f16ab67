#!/usr/bin/env python
"""Generates the stand-in hub's model repositories: deterministic, so every run serves the same bytes.

    python3 tests/testbed/hub-standin/generate.py DIR     # writes DIR/blobs/<sha256>, DIR/repos.json

Each repository has commits; each commit maps a file path to a blob. The hashes are the ones the
real Hub publishes for a file:
- `sha256` of the content: the Git LFS object id, served as `lfs.oid` by the tree API and as the
  `X-Linked-Etag` of `resolve` (huggingface_hub 2.4.0 hf_api.py:717 reads `lfs["oid"]`,
  file_download.py:1678 prefers `X-Linked-Etag`);
- the git blob id, `sha1("blob <size>\\0" + content)` (https://git-scm.com/book/en/v2/Git-Internals-Git-Objects):
  of the content for a regular file, of the LFS pointer file for an LFS file, served as `oid`.

The shards are valid safetensors files (https://github.com/huggingface/safetensors#format): an
8-byte little-endian header length, a JSON header (dtype, shape, data_offsets per tensor), data.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import sys
from pathlib import Path
from typing import Any

MODEL_REPO = "Qwen/Qwen3.5-35B-A3B-FP8"
GATED_REPO = "sparkfleet-test/gated-model"
# The draft model of the vllm role's speculative-decoding recipe (roles/vllm/recipes/gpt-oss-120b-eagle3.yml): the
# model role downloads it as it does the main weights.
DRAFT_REPO = "nvidia/gpt-oss-120b-Eagle3-v3"
STANDIN_TOKEN = "hf_sparkfleet_standin_token"
SHARDS = 4
# Six FP8 expert matrices of 2048 x 2048 (4 MiB each) and their scales: about 24 MiB per shard.
TENSORS_PER_SHARD = 6
MATRIX = (2048, 2048)
# The first lines of the .gitattributes every new Hub repository starts with.
GITATTRIBUTES = (
    "*.bin filter=lfs diff=lfs merge=lfs -text\n"
    "*.h5 filter=lfs diff=lfs merge=lfs -text\n"
    "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    "*.pt filter=lfs diff=lfs merge=lfs -text\n"
    "*.pth filter=lfs diff=lfs merge=lfs -text\n"
)
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".h5")


def git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    # https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def safetensors_file(tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> bytes:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw + b"".join(tensor[2] for tensor in tensors.values())


def shard(index: int, version: str) -> tuple[bytes, list[str]]:
    """One shard: FP8 weights plus one F32 scale per weight, filled from a seeded generator."""
    rng = random.Random(f"{MODEL_REPO}/{index}/{version}")
    tensors: dict[str, tuple[str, tuple[int, ...], bytes]] = {}
    for t in range(TENSORS_PER_SHARD):
        layer = index * TENSORS_PER_SHARD + t
        name = f"model.language_model.layers.{layer}.mlp.experts.gate_up_proj"
        tensors[f"{name}.weight"] = ("F8_E4M3", MATRIX, rng.randbytes(MATRIX[0] * MATRIX[1]))
        tensors[f"{name}.weight_scale_inv"] = ("F32", (16, 16), struct.pack("<256f", *([1.0 / 448] * 256)))
    return safetensors_file(tensors), list(tensors)


def model_commits() -> list[dict[str, bytes]]:
    """Three commits: the second changes the last shard and config.json, nothing else; the third adds
    extra/notes.json and removes generation_config.json."""
    shards = {v: [shard(i, v if i == SHARDS else "v1") for i in range(1, SHARDS + 1)] for v in ("v1", "v2")}
    commits = []
    for version, transformers in (("v1", "4.57.0"), ("v2", "4.57.1")):
        files: dict[str, bytes] = {".gitattributes": GITATTRIBUTES.encode()}
        config = {
            "architectures": ["Qwen3_5MoeForConditionalGeneration"],
            "model_type": "qwen3_5_moe",
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"},
            "torch_dtype": "bfloat16",
            "transformers_version": transformers,
        }
        files["config.json"] = json.dumps(config, indent=2).encode() + b"\n"
        files["generation_config.json"] = json.dumps({"do_sample": True, "temperature": 0.7, "top_p": 0.8}).encode()
        tokenizer = {"model_max_length": 262144, "tokenizer_class": "Qwen2Tokenizer"}
        files["tokenizer_config.json"] = json.dumps(tokenizer).encode()
        weight_map: dict[str, str] = {}
        total = 0
        for i, (data, names) in enumerate(shards[version], start=1):
            filename = f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
            files[filename] = data
            weight_map.update(dict.fromkeys(names, filename))
            total += len(data)
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode() + b"\n"
        commits.append(files)
    # A third commit, on branch `dev` only: a file added in a folder, a file removed, the rest as in v2
    # (for plans across added and removed files, and `folder/` include patterns).
    third = {path: data for path, data in commits[-1].items() if path != "generation_config.json"}
    third["extra/notes.json"] = json.dumps({"note": "added in revision 3"}).encode() + b"\n"
    commits.append(third)
    return commits


def gated_commits() -> list[dict[str, bytes]]:
    rng = random.Random(GATED_REPO)
    weights = safetensors_file({"lm_head.weight": ("BF16", (512, 1024), rng.randbytes(512 * 1024 * 2))})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16"}
    return [{".gitattributes": GITATTRIBUTES.encode(), "config.json": json.dumps(config).encode(),
             "model.safetensors": weights}]


def draft_commits() -> list[dict[str, bytes]]:
    """One commit: an EAGLE3 head's config and one small BF16 shard (the real one is a decoder layer and its head)."""
    rng = random.Random(DRAFT_REPO)
    weight = ("BF16", (1024, 1024), rng.randbytes(1024 * 1024 * 2))
    weights = safetensors_file({"midlayer.mlp.down_proj.weight": weight})
    config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "torch_dtype": "bfloat16"}
    return [{".gitattributes": GITATTRIBUTES.encode(), "config.json": json.dumps(config).encode(),
             "model.safetensors": weights}]


def describe(path: str, content: bytes) -> dict[str, Any]:
    sha256 = hashlib.sha256(content).hexdigest()
    entry: dict[str, Any] = {"size": len(content), "sha256": sha256, "lfs": path.endswith(LFS_SUFFIXES)}
    if entry["lfs"]:
        pointer = lfs_pointer(sha256, len(content))
        entry.update(blob_id=git_blob_id(pointer), pointer_size=len(pointer))
    else:
        entry["blob_id"] = git_blob_id(content)
    return entry


def write_atomically(target: Path, content: bytes) -> None:
    """Several test processes may generate one state directory at once (pytest-xdist's workers): a
    file is renamed into place whole, so none of them ever reads another's half-written copy."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(content)
    tmp.replace(target)


def build_repo(repo: str, commits: list[dict[str, bytes]], blobs: Path, gated: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"gated": gated, "commits": {}, "history": []}
    parent = None
    for number, files in enumerate(commits, start=1):
        described = {path: describe(path, content) for path, content in sorted(files.items())}
        for path, content in files.items():
            target = blobs / described[path]["sha256"]
            if not target.exists():
                write_atomically(target, content)
        tree = json.dumps([parent, described], sort_keys=True).encode()
        sha = hashlib.sha1(repo.encode() + b"\0" + tree, usedforsecurity=False).hexdigest()
        out["commits"][sha] = {"files": described, "parent": parent, "title": f"Upload revision {number}",
                               "date": f"2026-01-{number:02d}T12:00:00.000Z"}
        out["history"].append(sha)
        parent = sha
    return out


def generate(state_dir: Path) -> dict[str, Any]:
    """Writes the blobs and repos.json under state_dir (reused while this file is unchanged)."""
    source_hash = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    index_file = state_dir / "repos.json"
    if index_file.exists():
        cached = json.loads(index_file.read_text(encoding="utf-8"))
        if cached.get("generator") == source_hash:
            return cached
    blobs = state_dir / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    model = build_repo(MODEL_REPO, model_commits(), blobs, gated=False)
    c1, c2, c3 = model["history"]
    # Branch and tag names: `main` on the Hugging Face Hub, `master` on ModelScope
    # (modelscope 1.40.0 modelscope/utils/constant.py:510 DEFAULT_MODEL_REVISION); the tag `v1` on both.
    # `dev` is listed by neither hub's refs route (they list main / master), only resolved.
    model["refs"] = {"branches": {"main": c2, "master": c2, "dev": c3}, "tags": {"v1": c1}}
    gated = build_repo(GATED_REPO, gated_commits(), blobs, gated=True)
    gated["refs"] = {"branches": {"main": gated["history"][-1], "master": gated["history"][-1]}, "tags": {}}
    draft = build_repo(DRAFT_REPO, draft_commits(), blobs, gated=False)
    draft["refs"] = {"branches": {"main": draft["history"][-1], "master": draft["history"][-1]}, "tags": {}}
    result = {"generator": source_hash, "token": STANDIN_TOKEN,
              "repos": {MODEL_REPO: model, GATED_REPO: gated, DRAFT_REPO: draft}}
    write_atomically(index_file, json.dumps(result, indent=1).encode())
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py STATE_DIR")
    repos = generate(Path(sys.argv[1]))["repos"]
    print(json.dumps({name: repo["refs"] for name, repo in repos.items()}, indent=1))
