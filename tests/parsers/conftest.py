"""Fixtures shared by the parser tests."""

from __future__ import annotations

import pytest

from bmoe_top.parsers import csv_native


@pytest.fixture(params=["native reader", "orjson reader"])
def both_readers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a CSV test once with each fast reader of well-formed chunks: the native reader
    (parsers/csv_native.c) and orjson (what runs where there is no C compiler)."""
    if request.param == "native reader":
        if csv_native.reader() is None:
            pytest.skip(f"no native CSV reader: {csv_native.native_error}")
    else:
        monkeypatch.setattr(csv_native, "reader", lambda: None)
    return str(request.param)
