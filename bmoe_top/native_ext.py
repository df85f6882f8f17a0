"""bmoe-top's C extensions: what is compiled at install and how the code finds it.

Three small C libraries are built by ``setup.py`` when the package is installed (``pip install``,
``make``), as extension modules of the package, and loaded with ctypes:

* ``bmoe_top.runtime._bmoe_native``: the runtime's eval callback, read lanes and expert LRU
  (runtime/bmoe_native.c, its contract runtime/bmoe_native.h; docs/runtime.md "How streaming works");
* ``bmoe_top.parsers._csv_native``: the CSV reader of well-formed chunks (parsers/csv_native.c);
* ``bmoe_top.tui.sources._residency_native``: the page-cache residency loops over byte ranges
  (tui/sources/residency_native.c; docs/memory.md).

Without a C compiler at install the build is skipped and :func:`load` raises OSError: the callers
then run their pure-Python paths (same results, slower). Each library carries a tag of the sources
it was built from (:func:`source_tag`); a library built from other sources (the C changed since the
last install) is refused with a message saying how to rebuild (``make native``), so a stale build
never runs. This module imports nothing of the project (``setup.py`` reads :data:`EXTENSIONS` from
it before the package is installed).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CFLAGS", "EXTENSIONS", "Extension", "load", "load_file", "source_tag"]

#: compiler flags of every extension (``make native`` adds -Werror)
CFLAGS = ("-O2", "-Wall", "-Wextra")
#: the file that defines ``bmoe_source_tag`` in every library (from the BMOE_SOURCE_TAG macro)
TAG_SOURCE = "bmoe_top/native_tag.c"


@dataclass(frozen=True)
class Extension:
    """One C library: its module name, its sources and headers (paths from the repository root,
    in the order they are tagged) and extra compiler flags."""

    module: str
    sources: tuple[str, ...]
    headers: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()


EXTENSIONS = (
    Extension("bmoe_top.runtime._bmoe_native", ("runtime/bmoe_native.c",), ("runtime/bmoe_native.h",), ("-pthread",)),
    Extension("bmoe_top.parsers._csv_native", ("parsers/csv_native.c",)),
    Extension("bmoe_top.tui.sources._residency_native", ("tui/sources/residency_native.c",)),
)


def source_tag(texts: list[bytes]) -> str:
    """The tag of a library built from these source texts (its sources, then its headers)."""
    crc, adler = 0, 1
    for t in texts:
        crc, adler = zlib.crc32(t, crc), zlib.adler32(t, adler)
    return f"{crc:08x}{adler:08x}"  # not hashlib: it would load OpenSSL for this


def load(module: str) -> ctypes.CDLL:
    """The compiled library of extension ``module`` (one of :data:`EXTENSIONS`).

    Raises OSError: not built (no C compiler when the package was installed), built from other
    sources than the package's (rebuild with ``make native``), or the dynamic loader's error."""
    ext = next((e for e in EXTENSIONS if e.module == module), None)
    if ext is None:
        raise OSError(f"{module} is not one of bmoe-top's C extensions")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not os.path.exists(spec.origin):
        raise OSError(f"{module} was not built (no C compiler when bmoe-top was installed)")
    package = importlib.util.find_spec(module.rsplit(".", 1)[0])
    assert package is not None and package.submodule_search_locations
    return load_file(ext, Path(spec.origin), Path(next(iter(package.submodule_search_locations))))


def load_file(ext: Extension, so: Path, package_dir: Path) -> ctypes.CDLL:
    """The library ``so`` of ``ext`` whose sources are in ``package_dir`` (the C files are the
    package's data). Raises OSError when it was built from other sources, or cannot be loaded."""
    lib = ctypes.CDLL(str(so))
    want = source_tag([(package_dir / Path(p).name).read_bytes() for p in (*ext.sources, *ext.headers)])
    got = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(lib, "bmoe_source_tag")))
    if got.decode("ascii", "replace") != want:
        raise OSError(f"{so} was built from other sources than {package_dir}'s: rebuild it (make native)")
    return lib
