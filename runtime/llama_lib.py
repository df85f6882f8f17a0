"""llama-cpp-python's ctypes bindings (``llama_cpp.llama_cpp``, pinned 0.3.36) without the rest of
its package.

``import llama_cpp`` runs the package's ``__init__``, which also imports the high-level ``Llama``
class, its chat formats (jinja2) and its disk cache (diskcache, sqlite3, OpenSSL): about 13 MiB
of RAM in every bmoe-run process, which uses none of it (the expert budget is in MiB too). When the
package is not imported yet, it is registered without running its ``__init__``; the first name
asked of it that the bindings do not have runs the real ``__init__`` into the same module (PEP 562
``__getattr__``), so ``from llama_cpp import Llama`` elsewhere in the process still works.

ggml's CPU backend runs its compute threads through OpenMP (libgomp, loaded with the bindings):
every graph node ends at an OpenMP barrier (a few hundred a token). bmoe-run leaves libgomp's own
waiting as it is (a thread spins briefly at a barrier, then sleeps), as stock llama.cpp does: with
the cores to itself (bench model, 128 tokens, 2 threads) it decodes at 391 tok/s resident and 258
at 50 % of the expert bank, where ``OMP_WAIT_POLICY=PASSIVE`` (a futex sleep and wake at every
barrier) gives 82 and 73. On cores other processes crowd (a load average of 6-12 on 2 cores) the
spinning thread holds the core the late one needs and passive waiting is 15-40x faster; the user
says so with ``OMP_WAIT_POLICY=PASSIVE``, which the test suite sets (docs/runtime.md "Threads").
libgomp reads the variable once, when it is loaded.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

__all__ = ["L"]


def _bindings() -> Any:
    if "llama_cpp" not in sys.modules:
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or spec.loader is None:
            raise ImportError("llama-cpp-python is not installed")
        pkg = importlib.util.module_from_spec(spec)

        def rest_of_package(name: str) -> Any:
            del pkg.__dict__["__getattr__"]
            spec.loader.exec_module(pkg)  # type: ignore[union-attr]
            return getattr(pkg, name)

        pkg.__dict__["__getattr__"] = rest_of_package
        sys.modules["llama_cpp"] = pkg
    import llama_cpp.llama_cpp as bindings

    return bindings


L: Any = _bindings()
