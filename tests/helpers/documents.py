"""Headless JSON documents made comparable across machines: paths replaced by placeholders, values
that depend on timing (``VOLATILE`` key paths) replaced by ``"<volatile>"``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def masked(doc: Any, replace: Mapping[str, str], volatile: Iterable[str] = ()) -> Any:
    """``doc`` with every string's ``replace`` keys swapped for their values (longest first), and
    the values at the dotted key paths in ``volatile`` (``live.wall_s``; ``*`` matches any key or
    list index) set to ``"<volatile>"`` where present."""
    pairs = sorted(replace.items(), key=lambda kv: -len(kv[0]))
    paths = [p.split(".") for p in volatile]

    def walk(x: Any, path: list[str]) -> Any:
        if any(_matches(p, path) for p in paths):
            return "<volatile>"
        if isinstance(x, str):
            for a, b in pairs:
                x = x.replace(a, b)
            return x
        if isinstance(x, Mapping):
            return {walk(str(k), []): walk(v, [*path, str(k)]) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, [*path, str(i)]) for i, v in enumerate(x)]
        return x

    return walk(doc, [])


def _matches(pattern: list[str], path: list[str]) -> bool:
    return len(pattern) == len(path) and all(p in ("*", q) for p, q in zip(pattern, path))
