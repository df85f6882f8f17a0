"""Small C sources compiled once with the system C compiler into the user cache dir, named by a
hash of the source and the machine (the runtime's eval-callback shim, runtime/bmoe_native.c; the
CSV number reader, parsers/csv_native.c).

:func:`build` returns the shared object's path, compiling it the first time on this machine (a
few hundred ms); it raises OSError when no compiler is found or it fails, and the caller then runs
its Python path.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path

import platformdirs

__all__ = ["build"]


def build(name: str, src: str, flags: tuple[str, ...] = ()) -> Path:
    """Path of ``name-<hash>.so`` built from the C text ``src`` (``-O2 -shared -fPIC`` plus
    ``flags``) in ``<user cache>/bmoe-top/native``. Raises OSError (no compiler: ``$CC``, cc, gcc,
    clang; or the compiler failed, with the first 200 characters of its message);
    subprocess.TimeoutExpired after 120 s."""
    key = (src + platform.machine() + " ".join(flags)).encode()
    tag = f"{zlib.crc32(key):08x}{zlib.adler32(key):08x}"  # not hashlib: it would load OpenSSL for this
    d = Path(platformdirs.user_cache_dir("bmoe-top")) / "native"
    so = d / f"{name}-{tag}.so"
    if so.exists():
        return so
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise OSError("no C compiler found")
    d.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d) as td:
        c = Path(td) / f"{name}.c"
        c.write_text(src, encoding="utf-8")
        out = Path(td) / f"{name}.so"
        r = subprocess.run([cc, "-O2", "-shared", "-fPIC", *flags, "-o", str(out), str(c)],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise OSError(f"compiler failed: {r.stderr.strip()[:200]}")
        os.replace(out, so)
    return so
