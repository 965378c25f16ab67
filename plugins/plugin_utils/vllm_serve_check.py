# Copyright (c) sparkfleet.serving contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Checks a `vllm serve` command line against the options and names of one vLLM release.

vLLM refuses an unknown flag or a bad choice only when the container starts, and an unknown
parser, quantization or backend name minutes later, after the weights are read. This check says
it before anything changes on a host, from the release's own tables (vllm_releases.py, generated
from the release's sdist by tests/testbed/vllm-standin/generate.py):

* the words are first rewritten as the release's FlexibleArgumentParser.parse_args does
  (vllm/utils/argparse_utils.py): `--max_model_len` is `--max-model-len`, `-O3` is
  `--optimization-level 3`, `--limit-mm-per-prompt.image 0` sets a key of a JSON option, and
  `--model X` moves to the front;
* then argparse's rules (Python 3.12's argparse.py, which the images run): exact option strings,
  `--flag=value`, a unique prefix of a long option when the release's parser allows
  abbreviations (allow_abbrev), an ambiguous prefix refused, the number of values (nargs), the
  choices, and the value types its converters take (an int, a float, JSON, a token count such as
  `32K` or `25.6k`, `None` for an optional one);
* then the names vLLM looks up at start-up, which argparse lets through: quantization methods,
  tool-call and reasoning parsers, load formats, attention, MoE and linear backends, KV-cache
  dtypes, the "method" of --speculative-config, and the compilation mode of --compilation-config
  (which argparse refuses, through the config class).

The fields inside a config option's JSON (--compilation-config's and the like, pydantic's) are not
checked, but for the registry names above. Pure functions:
tests/unit/plugins/plugin_utils/test_vllm_serve_check.py.
"""

from __future__ import annotations

import difflib
import json
import re

from ansible_collections.sparkfleet.serving.plugins.module_utils.vllm_releases import RELEASES, SUPPORTED

OPTIONS_SOURCE = "vllm/engine/arg_utils.py"
# A word argparse takes for a negative number rather than an option (argparse.py, _negative_number_matcher).
NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
# FlexibleArgumentParser's -O shorthand (vllm/utils/argparse_utils.py, parse_args).
OPTIMIZATION_LEVELS = {"0", "1", "2", "3"}
# Image tags vLLM publishes for a release (.buildkite/scripts/publish-release-images.sh and
# docker-build-metadata-args.sh, vLLM 0.34.0): v<version>, then variant suffixes such as -cu130 or
# -aarch64. Nightly and other tags name no release.
RELEASE_TAG = re.compile(r"^v(\d+\.\d+\.\d+)((?:-(?:cu\d+|aarch64|x86_64|arm64|amd64|ubuntu\d+\.\d+))*)$")
# A -cuXYZ component of a tag names the CUDA version its image is built for: two digits of major, then one of minor
# (cu130 is 13.0, cu129 12.9, cu131 13.1, cu118 11.8), as vLLM's variant tags and PyTorch's wheel tags write it; a
# shorter one (cu12) says no minor version and is not read.
CUDA_TAG = re.compile(r"(?:^|[-_.])cu(\d{2})(\d)(?=$|[-_.])")
# The CUDA version of the image family each supported release publishes without a -cuXYZ suffix (v<version> and its
# per-arch v<version>-aarch64 and -x86_64), with where its sdist says so; the CUDA check reads it before a pull
# (plugin_utils/vllm_image_cuda.py), so a release added to vllm_releases.py needs its line here
# (tests/unit/plugins/plugin_utils/test_vllm_image_cuda.py).
UNSUFFIXED_CUDA = {
    # Its release images are built with CUDA_VERSION=12.9.1 and tagged <commit>-$(uname -m)
    # (.buildkite/release-pipeline.yaml, lines 104-124, "Build release image - x86_64 / aarch64 - CUDA 12.9"), then
    # published as v0.19.1-x86_64, v0.19.1-aarch64 and their manifest v0.19.1; the CUDA 13.0 build is the -cu130
    # family (.buildkite/scripts/annotate-release.sh, lines 47-69, 103 and 109).
    "0.19.1": ("12.9", ".buildkite/release-pipeline.yaml, lines 104-124, and .buildkite/scripts/annotate-release.sh, "
                       "lines 47-63 and 103, in the vLLM 0.19.1 sdist"),
    # "CUDA (default: 13.0)" publishes the family with the suffix "" (publish_image_family, lines 27-54).
    "0.34.0": ("13.0", ".buildkite/scripts/publish-release-images.sh, lines 27-54 and 98-101, in the vLLM 0.34.0 "
                       "sdist"),
}

# Options whose value must name an entry of a registry: option's dest -> (registry, what it is).
REGISTRY_OPTIONS = {
    "quantization": ("quantization", "quantization method"),
    "tool_call_parser": ("tool_call_parsers", "tool-call parser"),
    "reasoning_parser": ("reasoning_parsers", "reasoning parser"),
    "load_format": ("load_formats", "load format"),
    "attention_backend": ("attention_backends", "attention backend"),
    "moe_backend": ("moe_backends", "MoE backend"),
    "linear_backend": ("linear_backends", "linear backend"),
    "kv_cache_dtype": ("kv_cache_dtypes", "KV-cache dtype"),
}
# Keys of JSON options that name a registry entry too: (option dest, key) -> option dest above.
JSON_REGISTRY_KEYS = {
    ("attention_config", "backend"): "attention_backend",
    ("structured_outputs_config", "reasoning_parser"): "reasoning_parser",
}


def release_from_image(ref: str) -> str | None:
    """The vLLM release of a vllm/vllm-openai image reference (`vllm/vllm-openai:v0.34.0`,
    `...:v0.19.1-cu130`, `...:v0.34.0-aarch64`, a mirror's `host:5000/vllm/vllm-openai:v0.34.0`);
    None for a digest-only reference or any other tag (nightly, latest)."""
    name, _at, _digest = str(ref).partition("@")
    repository, colon, tag = name.rpartition(":")
    if not colon or "/" in tag or repository.rsplit("/", 1)[-1] != "vllm-openai":
        return None
    match = RELEASE_TAG.match(tag)
    return match.group(1) if match else None


def image_tag(ref: str) -> str:
    """The tag of an image reference ("" for none: a repository alone, or a digest alone); a registry's host:port
    is no tag."""
    name = str(ref).partition("@")[0]
    _repository, colon, tag = name.rpartition(":")
    return tag if colon and "/" not in tag else ""


def cuda_from_image(ref: str) -> tuple[str, str] | None:
    """The CUDA version an image reference says its image is built for, and what says it: a -cuXYZ component of its
    tag (any repository's), else, for a vllm/vllm-openai release tag without one, the CUDA of that release's
    unsuffixed family (UNSUFFIXED_CUDA). None when the reference says nothing: a local build's tag, latest or a
    nightly, a digest alone, or a release this collection has no line for."""
    tag = image_tag(ref)
    suffix = CUDA_TAG.search(tag)
    if suffix:
        return f"{suffix.group(1)}.{suffix.group(2)}", f"the -cu{suffix.group(1)}{suffix.group(2)} of its tag"
    release = release_from_image(ref)
    if release in UNSUFFIXED_CUDA:
        cuda, where = UNSUFFIXED_CUDA[release]
        return cuda, f"vLLM {release}'s tags without a -cuXYZ suffix are its CUDA {cuda} build: {where}"
    return None


def release_from_label(tag_label: str) -> str | None:
    """The release named by the image label ai.vllm.image.tag, which vLLM 0.34.0's docker/Dockerfile
    sets to the public tag (`vllm/vllm-openai:v0.34.0`, plus a variant suffix); images of 0.19.1 have
    no such label. None for a nightly or local build's tag."""
    return release_from_image(tag_label) if tag_label else None


def check_serve_argv(release: str, argv: list[str]) -> list[str]:
    """Errors in `vllm serve`'s arguments (argv: the words after `vllm serve`, model first) for
    `release`, each naming the release; empty when the release would take them."""
    if release not in RELEASES:
        return [f"vLLM release {release!r} is not supported here: the collection has the `vllm serve` options "
                f"of {', '.join(SUPPORTED)}; pin one of them (vllm_releases.SUPPORTED)"]
    table = RELEASES[release]
    words = [str(word) for word in argv]
    errors: list[str] = []
    words = _model_first(release, words, errors)
    if errors:
        # FlexibleArgumentParser raises before argparse reads anything.
        return errors
    parsed: dict[str, list[str]] = {}
    for option, values in _Words(release, table, _rewrite(words), errors).parse():
        parsed.setdefault(option, []).extend(values)
    errors += _registry_errors(release, table, parsed)
    return errors


def options_given(release: str, words: list[str]) -> list[dict[str, str]]:
    """Each option among `words` as the release's parser reads it: {"word", "option", "dest"}: underscores,
    abbreviations, `--flag=value`, short forms and `--no-X` resolved to the option and the setting (dest) it
    sets. Words that are no option of the release are left out (check_serve_argv refuses them)."""
    table = RELEASES.get(release)
    if table is None:
        return []
    found = []
    for word in _rewrite([str(word) for word in words]):
        if not _option_like(word):
            continue
        option, _value, error = _split(release, table, word)
        if option and not error:
            found.append({"word": word, "option": option, "dest": table["options"][option]["dest"]})
    return found


# --- FlexibleArgumentParser's rewriting -------------------------------------------------------------

def _model_first(release: str, words: list[str], errors: list[str]) -> list[str]:
    """`--model X` moves to the front; otherwise the model must be the first word."""
    for i, word in enumerate(words):
        if word == "--model" and i + 1 < len(words):
            return [words[i + 1], *words[:i], *words[i + 2:]]
        if word.startswith("--model="):
            return [word.removeprefix("--model="), *words[:i], *words[i + 1:]]
    if not words or words[0].startswith("-"):
        errors.append(f"vLLM {release}: the model must be the first argument of `vllm serve` (`vllm serve <model> "
                      f"--<arg> <value>`, vllm/utils/argparse_utils.py); got {words[:1] or 'no argument'}")
    return words


def _rewrite(words: list[str]) -> list[str]:
    """Underscores in a long option's name become dashes; -O<n> is --optimization-level <n>."""
    out: list[str] = []
    for i, word in enumerate(words):
        if word.startswith("--"):
            key, eq, value = word.partition("=")
            name, dot, rest = key[2:].partition(".")
            out.append("--" + name.replace("_", "-") + dot + rest + eq + value)
        elif word.startswith("-O") and word != "-O" and not NEGATIVE_NUMBER.match(word):
            out += ["--optimization-level", word[3:] if word[2] == "=" else word[2:]]
        elif word == "-O" and i + 1 < len(words) and words[i + 1] in OPTIMIZATION_LEVELS:
            out.append("--optimization-level")
        else:
            out.append(word)
    return out


# --- argparse's rules -------------------------------------------------------------------------------

def _option_like(word: str) -> bool:
    return word.startswith("-") and word != "-" and not NEGATIVE_NUMBER.match(word)


def _resolve(release: str, table: dict, text: str) -> tuple[str | None, str | None]:
    """(option string, None) or (None, error) for what a word names, as argparse finds it."""
    options = table["options"]
    if text in options:
        return text, None
    if table["allow_abbrev"] and text.startswith("--"):
        matches = [option for option in options if option.startswith(text)]
        if len(matches) == 1:
            return matches[0], None
        if len(matches) > 1:
            return None, (f"vLLM {release}: {text} is ambiguous, it could be {', '.join(matches)} (argparse refuses an "
                          f"abbreviation that fits several options); write the option in full")
    close = difflib.get_close_matches(text, list(options), n=3, cutoff=0.75)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    return None, (f"vLLM {release} has no option {text}{hint} (its `vllm serve` options: {OPTIONS_SOURCE}); "
                  "remove it or pin a release that has it")


def _split(release: str, table: dict, word: str) -> tuple[str | None, str | None, str | None]:
    """(option, explicit value or None, error) of an option-like word: `--flag=value`, `--json.key`,
    `-n2` (a short option with its value attached)."""
    text, eq, value = word.partition("=")
    explicit = value if eq else None
    base, dot, _key = text.partition(".")
    if dot and base.startswith("-"):
        option, error = _resolve(release, table, base)
        return option, explicit, error
    option, error = _resolve(release, table, text)
    if error and not word.startswith("--") and len(word) > 2 and word[:2] in table["options"]:
        return word[:2], word[2:], None
    return option, explicit, error


class _Words:
    """argparse's walk over the words after the model: each option takes its values (nargs)."""

    def __init__(self, release: str, table: dict, words: list[str], errors: list[str]) -> None:
        self.release, self.table, self.words, self.errors = release, table, words, errors
        self.i = 1  # words[0] is the model

    def parse(self) -> list[tuple[str, list[str]]]:
        """(option, values) for each option in the words, with argparse's errors."""
        found: list[tuple[str, list[str]]] = []
        extras: list[str] = []
        while self.i < len(self.words):
            word = self.words[self.i]
            self.i += 1
            if not _option_like(word):
                extras.append(word)
                continue
            option, explicit, error = _split(self.release, self.table, word)
            if error:
                self.errors.append(error)
                # Its values go with it: argparse lists them among the unrecognized arguments.
                while self.i < len(self.words) and not _option_like(self.words[self.i]):
                    self.i += 1
                continue
            values = self.values(option, word, explicit)
            if values is not None:
                found.append((option, values))
        if extras:
            self.errors.append(
                f"vLLM {self.release}: `vllm serve` takes one positional argument (the model); it would refuse "
                f"{' '.join(extras)} (unrecognized arguments): a value of an option that takes none, or a stray word")
        return found

    def values(self, option: str, word: str, explicit: str | None) -> list[str] | None:
        """The option's values, as many as its nargs allows."""
        spec = self.table["options"][option]
        nargs = spec["nargs"]
        key = word.partition("=")[0].lstrip("-").partition(".")[2]
        if key:
            return self.dotted(option, key, explicit)
        if nargs == 0:
            if explicit is not None:
                self.errors.append(f"vLLM {self.release}: {option} takes no value (argparse: ignored explicit "
                                   f"argument {explicit!r}); give {option} alone")
                return None
            return []
        if explicit is not None:
            return _chosen(self.release, option, spec, [explicit], self.errors)
        taken: list[str] = []
        while self.i < len(self.words) and not _option_like(self.words[self.i]) and (
                nargs in ("+", "*") or not taken):
            taken.append(self.words[self.i])
            self.i += 1
        if not taken and nargs in (1, "+"):
            self.errors.append(f"vLLM {self.release}: {option} needs a value (argparse: expected "
                               f"{'one argument' if nargs == 1 else 'at least one argument'})")
            return None
        return _chosen(self.release, option, spec, taken, self.errors)

    def dotted(self, option: str, key: str, explicit: str | None) -> list[str] | None:
        """`--option.a.b value`: FlexibleArgumentParser makes {"a": {"b": value}} the option's JSON
        value (a value that parses as JSON is kept as such)."""
        if explicit is None:
            if self.i >= len(self.words) or _option_like(self.words[self.i]):
                self.errors.append(f"vLLM {self.release}: {option}.{key} needs a value")
                return None
            explicit = self.words[self.i]
            self.i += 1
        try:
            value: object = json.loads(explicit)
        except ValueError:
            value = explicit
        for part in reversed(key.split(".")):
            value = {part: value}
        return [json.dumps(value)]


def _converted(spec: dict, value: str) -> str:
    if spec.get("convert") == "lower_underscore":
        return value.lower().replace("-", "_")
    return value


# What each value type of the release's parser takes, converted as it converts them (vllm/engine/arg_utils.py
# parse_type and optional_type; vllm/utils/argparse_utils.py human_readable_int, human_readable_int_or_auto;
# vLLM 0.34.0).
_TYPE_WORDS = {"int": "an integer", "float": "a number", "json": "JSON", "parse:json": "JSON",
               "human_int": "an integer (8192, 8k = 8000, 8K = 8192)",
               "human_int_or_auto": "an integer (8192, 8k, 8K), -1 or auto"}


def _converts(convert: object, value: str) -> bool:
    try:
        convert(value)  # type: ignore[operator]
    except ValueError:
        return False
    return True


def _human_int(value: str) -> bool:
    text = value.strip()
    suffixed = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if suffixed:
        # Decimals only with the decimal (lower-case) multipliers.
        return suffixed.group(2).islower() or "." not in suffixed.group(1)
    return _converts(int, text)


def _fits_type(kind: str, value: str) -> bool:
    if kind.startswith("optional:") and value in ("", "None"):
        return True
    kind = kind.removeprefix("optional:")
    if kind == "human_int_or_auto" and value.strip().lower() in ("auto", "-1"):
        return True
    if kind in ("human_int", "human_int_or_auto"):
        return _human_int(value)
    convert = {"int": int, "float": float, "json": json.loads, "parse:json": json.loads}.get(kind)
    return convert is None or _converts(convert, value)


def _chosen(release: str, option: str, spec: dict, values: list[str], errors: list[str]) -> list[str] | None:
    choices = spec["choices"]
    values = [_converted(spec, value) for value in values]
    for value in values:
        if choices is not None and value not in choices:
            listed = ", ".join(map(str, choices))
            errors.append(f"vLLM {release}: {option} {value!r} is not one of its choices ({listed})")
            return None
        kind = spec.get("type")
        if kind and not _fits_type(kind, value):
            words = _TYPE_WORDS[kind.removeprefix("optional:")]
            errors.append(f"vLLM {release}: {option} takes {words}, not {value!r}")
            return None
    return values


# --- names vLLM looks up at start-up -----------------------------------------------------------------

def _by_dest(table: dict, parsed: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for option, values in parsed.items():
        out.setdefault(table["options"][option]["dest"], []).extend(values)
    return out


def _registry_errors(release: str, table: dict, parsed: dict[str, list[str]]) -> list[str]:
    values = _by_dest(table, parsed)
    errors: list[str] = []
    for dest, named in values.items():
        if dest in REGISTRY_OPTIONS:
            errors += [e for e in (_registry_error(release, table, dest, v) for v in named) if e]
    for (dest, key), target in JSON_REGISTRY_KEYS.items():
        for value in _json_values(values.get(dest, []), key):
            error = _registry_error(release, table, target, value)
            if error:
                errors.append(error)
    errors += _compilation_mode_errors(release, table, values.get("compilation_config", []))
    for method in _json_values(values.get("speculative_config", []), "method"):
        if method not in table["registries"]["speculative_methods"]:
            errors.append(_unknown(release, table, "speculative_methods", "speculative method (the \"method\" of "
                                   "--speculative-config)", method))
    return errors


def _compilation_mode_errors(release: str, table: dict, values: list[str]) -> list[str]:
    """CompilationConfig.mode (vllm/config/compilation.py): a CompilationMode's name in any case, or its
    number (3.0 too; true is 1), or null; argparse's parse_dataclass refuses anything else."""
    modes = table["registries"]["compilation_modes"]
    errors = []
    for value in values:
        try:
            data = json.loads(value)
        except ValueError:
            continue
        mode = data.get("mode") if isinstance(data, dict) else None
        if mode is None or isinstance(mode, bool):
            continue
        if isinstance(mode, str):
            ok = mode.upper() in modes
        else:
            ok = isinstance(mode, (int, float)) and float(mode).is_integer() and int(mode) in modes.values()
        if not ok:
            listed = ", ".join(f"{name} ({number})" for name, number in modes.items())
            errors.append(f"vLLM {release} has no compilation mode {mode!r} (the \"mode\" of --compilation-config; "
                          f"it has: {listed}); give one of those names or numbers")
    return errors


def _json_values(values: list[str], key: str) -> list[str]:
    """The `key` of JSON option values: a whole JSON object, or the value of a dotted `--option.key`
    (kept by _parse as the option's value; FlexibleArgumentParser makes {key: value} of it)."""
    out = []
    for value in values:
        try:
            data = json.loads(value)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get(key), str):
            out.append(data[key])
    return out


def _registry_error(release: str, table: dict, dest: str, value: str) -> str | None:
    registry, what = REGISTRY_OPTIONS[dest]
    names = table["registries"].get(registry) or []
    if dest == "attention_backend":
        # AttentionConfig.validate_backend_before: "auto" or a member name, in any case.
        ok = value.lower() == "auto" or value.upper() in names
    elif dest == "reasoning_parser":
        # An empty name turns reasoning parsing off, and from 0.34.0 on "none" in any case does
        # (parse_reasoning_parser, vllm/engine/arg_utils.py).
        unset = table["options"]["--reasoning-parser"].get("convert") == "none_is_unset" and value.lower() == "none"
        ok = not value or unset or value in names
    else:
        ok = value in names
    return None if ok else _unknown(release, table, registry, what, value)


def _unknown(release: str, table: dict, registry: str, what: str, value: str) -> str:
    names = table["registries"].get(registry) or []
    close = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    listed = ", ".join(names) if names else "none"
    return (f"vLLM {release} has no {what} {value!r}{hint} (it has: {listed}); vLLM would refuse it at start-up: "
            "fix the name or pin a release that has it")
