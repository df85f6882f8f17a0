"""The native contract (runtime/bmoe_native.h): the ctypes structures and enums of runtime/native.py
are compared with the library's own tables at load, and any difference is refused by name."""

from __future__ import annotations

import ctypes
import enum

import pytest

from bmoe_top.runtime import native

LIB = native.library()
pytestmark = pytest.mark.skipif(LIB is None, reason=f"no native library: {native.native_error}")


def test_the_structures_and_enums_match_the_library() -> None:
    native.check_contract(LIB)  # what library() did; raises on any difference


def _struct(name: str, fields: list[tuple[str, object]]) -> type[ctypes.Structure]:
    return type(name, (ctypes.Structure,), {"_fields_": fields})


def test_a_field_out_of_place_is_refused_by_name() -> None:
    f = list(native.HookState._fields_)
    i, j = [n for n, _ in f].index("mode"), [n for n, _ in f].index("want_weights")
    f[i], f[j] = f[j], f[i]
    with pytest.raises(OSError, match=r"struct bmoe_hook: the library has mode at offset \d+"):
        native.check_contract(LIB, hook=_struct("Swapped", f))


def test_a_field_of_another_size_is_refused() -> None:
    f = [(n, ctypes.c_int64 if n == "fd" else t) for n, t in native.Job._fields_]
    with pytest.raises(OSError, match="struct bmoe_job: the library has fd"):
        native.check_contract(LIB, job=_struct("WideFd", f))


def test_a_missing_field_is_refused() -> None:
    with pytest.raises(OSError, match="struct bmoe_hook: the library has 27 fields"):
        native.check_contract(LIB, hook=_struct("Short", list(native.HookState._fields_)[:-1]))


def test_a_log_kind_of_another_value_is_refused() -> None:
    other = enum.IntEnum("Other", {"HIT": 0, "MISS": 1, "EVICT": 3, "INSERT": 2, "PREFETCH": 4})
    with pytest.raises(OSError, match="enum bmoe_log_kind"):
        native.check_contract(LIB, log=other)
