"""Golden files for headless outputs: compare a JSON result with ``tests/<area>/golden/NAME``
(floats to 1e-9 relative); ``BMOE_UPDATE_GOLDEN=1`` rewrites the file instead."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import orjson


def _close(a: Any, b: Any, path: str) -> None:
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{path}: {a!r} != {b!r}"
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), f"{path}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def check_golden(path: Path, obj: Any) -> None:
    """Compare ``orjson.dumps(obj)`` with the golden file at ``path`` (or write it)."""
    data = orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    if os.environ.get("BMOE_UPDATE_GOLDEN") == "1" or not path.exists():
        if not path.exists() and os.environ.get("CI"):
            raise AssertionError(f"golden file {path} is missing (run with BMOE_UPDATE_GOLDEN=1)")
        path.write_bytes(data + b"\n")
        return
    _close(orjson.loads(data), orjson.loads(path.read_bytes()), path.name)


def check_golden_text(path: Path, text: str) -> None:
    """Compare ``text`` with the golden file at ``path`` exactly (or write it, as :func:`check_golden`)."""
    if os.environ.get("BMOE_UPDATE_GOLDEN") == "1" or not path.exists():
        if not path.exists() and os.environ.get("CI"):
            raise AssertionError(f"golden file {path} is missing (run with BMOE_UPDATE_GOLDEN=1)")
        path.write_text(text, encoding="utf-8")
        return
    want = path.read_text(encoding="utf-8")
    assert text == want, f"{path.name} differs from its golden file:\n{text}"
