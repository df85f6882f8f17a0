"""Models whose page-cache residency a test sets on purpose.

    from helpers.pagecache import private_model, evict, make_resident, fincore_pages

    path = private_model(tmp_path, "bench")      # this test's own copy (its residency is the test's)
    evict(path)                                   # nothing of it in the page cache
    make_resident(path, [(offset, length), ...])  # exactly those bytes' pages, no readahead

A preset is generated once per machine into the user cache (``bmoe-top/models``, under a lock, by
one atomic rename) and copied for each test: two tests, or two xdist workers, never share the
file whose residency they set.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import platformdirs
import pytest

from bmoe_top.runtime.models import GENERATOR_VERSION, make_model


def cached_model(preset: str, qtype: str = "q8_0", seed: int = 0) -> Path:
    """The ``make-model`` output for these arguments, generated once per machine."""
    d = Path(platformdirs.user_cache_dir("bmoe-top")) / "models"
    d.mkdir(parents=True, exist_ok=True)
    out = d / f"{preset}-{qtype}-s{seed}-g{GENERATOR_VERSION}.gguf"
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            make_model(out, preset=preset, qtype=qtype, seed=seed)
    return out


def private_model(folder: Path, preset: str, name: str = "", qtype: str = "q8_0", seed: int = 0) -> Path:
    """A copy of the cached model in ``folder``, written to disk and out of the page cache."""
    out = folder / (name or f"{preset}.gguf")
    shutil.copyfile(cached_model(preset, qtype, seed), out)
    evict(out)
    return out


def evict(path: Path, ranges: list[tuple[int, int]] | None = None) -> None:
    """Drop the file's pages (or those of ``ranges``: ``(offset, length)``) from the page cache:
    written out first (a dirty page stays), then ``POSIX_FADV_DONTNEED``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        for off, length in ranges or [(0, 0)]:
            os.posix_fadvise(fd, off, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def make_resident(path: Path, ranges: list[tuple[int, int]]) -> None:
    """Read exactly ``ranges`` (``(offset, length)``) with buffered reads and no readahead
    (``POSIX_FADV_RANDOM``), so the pages they touch, and only those, are in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off, length in ranges:
            got = 0
            while got < length:
                b = os.pread(fd, min(length - got, 1 << 20), off + got)
                if not b:
                    break
                got += len(b)
    finally:
        os.close(fd)


def fincore_pages(path: Path) -> int:
    """Resident pages of ``path`` as util-linux ``fincore`` counts them (skips without fincore)."""
    exe = shutil.which("fincore")
    if exe is None:
        pytest.skip("util-linux fincore is not installed")
    out = subprocess.run([exe, "--bytes", "--noheadings", "--raw", "--output", "PAGES", str(path)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0])
