"""Test bed only: a simulated Spark's Python keeps the code it compiles from Ansible's module payloads.

Every module call sends its payload as a zip of Python sources (ansible-core 2.19,
ansible/_internal/_ansiballz/_wrapper.py), and Python's zipimport compiles each source it
imports, every call: a `stat` call took about 200 ms of a box's CPU without this cache and 130 ms
with it (benchmarks/README.md, "The test bed's caches"). The test bed runs some thousands of
module calls on two cores beside the controller; this keeps each compiled source, keyed
by the SHA-256 of its text and the interpreter's bytecode magic, in the directory that
SPARKFLEET_SIM_CODE_CACHE names, and gives the code its payload's file name again
(tracebacks name the zip as before). The same code runs: only the compile is saved.

Active only when SPARKFLEET_SIM_CODE_CACHE is set (molecule/resources/create.yml sets it on
the boxes Molecule starts); the benchmarks start their boxes without it, so the boxes' CPU
they report is a real box's. Loaded at interpreter start by sparkfleet-sim-codecache.pth.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import zipimport
from collections.abc import Callable
from importlib.util import MAGIC_NUMBER
from types import CodeType

try:
    import _imp
except ImportError:  # pragma: no cover - CPython always has it
    _imp = None

CACHE = os.environ.get("SPARKFLEET_SIM_CODE_CACHE", "")


def _store(path: str, code: CodeType) -> None:
    """Written under a name of this process's, then renamed: a reader sees all of it or nothing."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as out:
            out.write(marshal.dumps(code))
        os.replace(partial, path)
    except OSError:
        pass


def _cached(compile_source: Callable[[str, bytes], CodeType]) -> Callable[[str, bytes], CodeType]:
    def compile_or_load(pathname: str, source: bytes) -> CodeType:
        key = hashlib.sha256(MAGIC_NUMBER + source).hexdigest()
        path = os.path.join(CACHE, key[:2], key)
        try:
            with open(path, "rb") as kept:
                code = marshal.loads(kept.read())
        except (OSError, ValueError, EOFError, TypeError):
            code = compile_source(pathname, source)
            _store(path, code)
            return code
        _imp._fix_co_filename(code, pathname)
        return code

    return compile_or_load


# zipimport compiles a source with zipimport._compile_source(pathname, source) (CPython 3.8 to
# 3.13, Lib/zipimport.py): the one function replaced.
if CACHE and _imp is not None and callable(getattr(zipimport, "_compile_source", None)):
    zipimport._compile_source = _cached(zipimport._compile_source)
