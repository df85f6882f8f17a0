"""Fixtures shared by the parser tests."""

from __future__ import annotations

import pytest

from bmoe_top.parsers import token_csv as tc


@pytest.fixture(params=["orjson reader", "compiled reader"])
def both_readers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a CSV test once with each fast reader of well-formed chunks: orjson (small bodies)
    and the compiled reader (parsers/_csv_kernel.py, bodies of ``_KERNEL_MIN_BYTES`` and more)."""
    if request.param == "compiled reader":
        monkeypatch.setattr(tc, "_KERNEL_MIN_BYTES", 0)
    return str(request.param)
