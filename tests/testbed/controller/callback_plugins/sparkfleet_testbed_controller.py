# Test bed only: not part of the collection (galaxy.yml's build_ignore leaves tests/testbed out).
"""Test bed only: the controller's ansible-playbook keeps what it compiles and copies less when it forks.

ansible-core 2.19 parses a template, generates its Python and compiles that again each time
it renders it, and a task's worker process lives for one task, so nothing compiled is kept
from one task to the next (ansible/_internal/_templating/_engine.py, `_compile_template`;
https://github.com/ansible/ansible/issues/86881). The test bed runs the same roles some
hundreds of times on two cores: a sampling profile of a no-op site.yml run on three boxes
(py-spy, benchmarks/README.md, "The test bed's caches") put about a fifth of the controller's
CPU in that compilation.

This callback, enabled by the test bed only (.config/molecule/config.yml: ANSIBLE_CALLBACK_PLUGINS
and ANSIBLE_CALLBACKS_ENABLED), is loaded by ansible-playbook's main process before it forks any
worker. Two things, neither of which changes what runs:

- It wraps Jinja's `Environment.compile` for template strings: the code object compiled
  for a source is kept on disk, keyed by everything the generated code depends on (the source, the
  template overrides, backslash escaping, embedded-template support, the filter and test plugins'
  files, the versions of Python, Jinja and ansible-core), and loaded instead of compiling the same
  source again. The same code runs; only the compilation is saved. Sources with a name or file
  (includes, imports), raw output and template debugging are left to Jinja.
- At each task's start, before the main process forks that task's workers, it moves every object
  the process has so far out of reach of the cyclic garbage collector (`gc.freeze`, as Python's
  documentation of the gc module advises for a process that forks without exec): a worker's
  collections then no longer write into the objects it shares with the main process, so the
  kernel copies fewer of its pages. What the main process frees stays freed; cyclic garbage
  made before a freeze is kept until the run ends (a test-bed run is minutes long).

Off unless SPARKFLEET_TEST_TEMPLATE_CACHE names a directory; the benchmarks leave it unset, so
their controller figures are a user's.
"""

from __future__ import annotations

import gc
import hashlib
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import Any

import jinja2
from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ansible_version

try:
    from ansible._internal._templating import _jinja_bits, _jinja_common
except ImportError:  # not ansible-core 2.19's templating: the callback stays inactive
    _jinja_bits = _jinja_common = None

DOCUMENTATION = """
name: sparkfleet_testbed_controller
type: aggregate
short_description: Test bed only, keeps the code Jinja compiles and freezes the heap before forks
description:
  - Loaded by the test bed's Molecule runs; see the module's docstring.
requirements:
  - SPARKFLEET_TEST_TEMPLATE_CACHE set to a directory
"""

CACHE_ENV = "SPARKFLEET_TEST_TEMPLATE_CACHE"
# The collection's own filter and test plugins: the generated code calls a filter with the
# context or without, as the plugin function is declared (jinja2/compiler.py,
# `_filter_test_common`), so their files are part of the key.
PLUGIN_DIRS = ("plugins/filter", "plugins/test")


def _plugins_fingerprint(root: Path) -> str:
    digest = hashlib.sha256()
    for folder in PLUGIN_DIRS:
        for path in sorted((root / folder).glob("*.py")):
            stat = path.stat()
            digest.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


def _cache_dir(base: str) -> Path:
    root = Path(__file__).resolve().parents[4]
    versions = f"{MAGIC_NUMBER.hex()}-{jinja2.__version__}-{ansible_version}-{_plugins_fingerprint(root)}"
    return Path(base) / versions


def _load(path: Path) -> CodeType | None:
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _store(path: Path, code: CodeType) -> None:
    """Written under a name of this process's, then renamed: a reader sees all of it or nothing."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}")
        partial.write_bytes(marshal.dumps(code))
        os.replace(partial, path)
    except (OSError, ValueError):
        pass


def _install(cache: Path) -> bool:
    """Wraps AnsibleEnvironment.compile; False where this ansible-core is not the one it was written for."""
    if _jinja_bits is None:
        return False
    environment = _jinja_bits.AnsibleEnvironment
    override_names = getattr(_jinja_bits, "_TEMPLATE_OVERRIDE_FIELD_NAMES", None)
    context = getattr(_jinja_bits, "_TemplateCompileContext", None)
    if getattr(environment, "_sparkfleet_cached", False):
        return True
    if override_names is None or context is None:
        return False
    compile_source = environment.compile

    def key_of(env: Any, source: str) -> str:
        current = context.current(optional=True)
        settings = (
            tuple(repr(getattr(env, name)) for name in override_names),
            bool(current and current.escape_backslashes),
            bool(_jinja_common._TemplateConfig.allow_embedded_templates),
        )
        return hashlib.sha256(repr(settings).encode() + b"\0" + source.encode("utf-8", "surrogatepass")).hexdigest()

    # Jinja's own signature (jinja2/environment.py, Environment.compile), positional arguments and all.
    def compile_or_load(self: Any, source: Any, name: str | None = None, filename: str | None = None,  # noqa: PLR0917
                        raw: bool = False, defer_init: bool = False) -> Any:
        if (not isinstance(source, str) or name is not None or filename is not None or raw or defer_init
                or self._debuggable_template_source):
            return compile_source(self, source, name, filename, raw, defer_init)
        key = key_of(self, source)
        path = cache / key[:2] / key
        code = _load(path)
        if code is None:
            code = compile_source(self, source, name, filename, raw, defer_init)
            _store(path, code)
        return code

    environment.compile = compile_or_load
    environment._sparkfleet_cached = True
    return True


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sparkfleet_testbed_controller"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        base = os.environ.get(CACHE_ENV, "")
        self._active = bool(base) and _install(_cache_dir(base))
        if base and not self._active:
            print(f"{self.CALLBACK_NAME}: not active: written for ansible-core 2.19's templating", file=sys.stderr)

    def v2_playbook_on_task_start(self, task: Any, is_conditional: bool) -> None:
        if self._active:
            gc.freeze()
