"""A real read-only folder for write-error tests: a tmpfs mounted read-only in a private mount
namespace (``unshare -m``), which holds for root too (a chmod does not)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def read_only_prefix(folder: Path) -> list[str] | None:
    """A command prefix that runs the rest of the command with ``folder`` a read-only tmpfs, or
    None where that cannot be done here (no ``unshare``, no right to mount)."""
    if not sys.platform.startswith("linux") or not shutil.which("unshare"):
        return None
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o ro tmpfs {folder}"],
                           capture_output=True)
    if probe.returncode != 0:
        return None
    return ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o ro tmpfs {folder} && exec "$@"', "sh"]
