"""Run-header facts from a runtime's log lines (its stderr live, the loader output in a console
log): the model, its arch, layers and experts, for sources whose ``BMOE_READY`` does not carry
them (the real bmoe-cli's READY has ``load_s``, ``arch`` and ``n_ctx`` only).

Lines read (docs/telemetry.md "Run header from the log"):

* llama.cpp's ``print_info:`` lines: ``arch = qwen3moe``, ``n_layer = 48``, ``n_expert = 128``,
  ``n_expert_used = 6`` (what the run uses, after any override), ``general.name = ...``,
  ``file size = 17.28 GiB (...)``;
* ``llama_model_loader: loaded meta data with ... from PATH (version ...)``: the model file (the
  line may start with the echoed prompt; a descriptor's path, ``/proc/self/fd/4``, is none);
* bmoe-cli's ``bmoe:`` lines: their ``key=value`` words (``bmoe: expert streaming ON
  n_expert=128 o_direct=1 io_threads=4 cache=4000 MiB``).

:func:`loader_facts` never raises; a line that says none of these gives ``{}``. No Textual import.
"""

from __future__ import annotations

import re

__all__ = ["BMOE_KEYS", "PRINT_INFO_KEYS", "loader_facts"]

#: ``print_info: NAME = value`` -> run-header key.
PRINT_INFO_KEYS = {
    "arch": "arch", "n_layer": "n_layer", "n_expert": "n_expert", "n_expert_used": "n_expert_used",
    "general.name": "model_name", "file size": "model_size", "file type": "model_type", "model type": "model_class",
}
#: ``bmoe: ... key=value`` -> run-header key (the flags' names as the CSV header spells them).
BMOE_KEYS = {"n_expert": "n_expert", "n_layer": "n_layer", "n_expert_used": "n_expert_used",
             "o_direct": "o_direct", "io_threads": "io_threads", "cache": "cache_mb", "model": "model",
             "arch": "arch", "overlap": "overlap", "prefetch": "prefetch"}
#: Dimensions are integers.
_INT_KEYS = frozenset({"n_layer", "n_expert", "n_expert_used", "io_threads", "o_direct"})

_PRINT_INFO = re.compile(r"print_info:\s+(?P<name>[A-Za-z_][\w. ]*?)\s*=\s*(?P<value>.*?)\s*$")
_LOADED = re.compile(r"llama_model_loader: loaded meta data with .*? from (?P<path>.+?)(?: \(version .*\))?\s*$")
_FD_PATH = re.compile(r"/(?:proc/(?:self|thread-self|\d+)|dev)/fd/\d+$")
_KV = re.compile(r"(?P<key>[A-Za-z_]\w*)=(?P<value>[^\s,;]+)")


def _clean(key: str, value: str) -> str | None:
    v = value.strip()
    if not v:
        return None
    if key in _INT_KEYS:
        return v if v.isdigit() else None
    return v[:200]


def loader_facts(line: str) -> dict[str, str]:
    """The run-header facts one log line gives (see the module docstring), ``{}`` for most lines."""
    if "print_info:" in line:
        m = _PRINT_INFO.search(line)
        if m is None:
            return {}
        key = PRINT_INFO_KEYS.get(m.group("name").strip())
        if key is None:
            return {}
        v = _clean(key, m.group("value"))
        return {key: v} if v is not None else {}
    if "loaded meta data" in line:
        m = _LOADED.search(line)
        path = m.group("path").strip() if m else ""
        # a descriptor (bmoe-run hands llama.cpp its file as /proc/self/fd/N) names no model
        return {"model": path[:500]} if path and not _FD_PATH.match(path) else {}
    i = line.find("bmoe:")
    if i >= 0 and (i == 0 or not line[i - 1].isalnum()):
        out: dict[str, str] = {}
        for m in _KV.finditer(line, i + 5):
            key = BMOE_KEYS.get(m.group("key"))
            if key is not None:
                v = _clean(key, m.group("value"))
                if v is not None:
                    out[key] = v
        return out
    return {}
