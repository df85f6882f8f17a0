"""A JSON value checked against the ``TypedDict`` that types it: every key the type requires is
there, no key it does not name, and each value of the type given (``float`` takes an int, ``None``
only where the type allows it), recursively through lists and nested ``TypedDict``s. The check
that a document and its type (what mypy sees) have not drifted apart."""

from __future__ import annotations

import types
import typing
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict


def check_typed(value: Any, tp: Any, path: str = "$") -> None:
    """Raise AssertionError (naming the key path) where ``value`` does not match ``tp``."""
    origin = get_origin(tp)
    if is_typeddict(tp):
        assert isinstance(value, dict), f"{path}: {type(value).__name__}, not an object"
        hints = get_type_hints(tp)
        missing = sorted(set(tp.__required_keys__) - value.keys())
        extra = sorted(value.keys() - hints.keys())
        assert not missing and not extra, f"{path}: keys missing {missing}, keys not in {tp.__name__} {extra}"
        for k, v in value.items():
            check_typed(v, hints[k], f"{path}.{k}")
    elif origin in (Union, types.UnionType):
        errors = []
        for alt in get_args(tp):
            try:
                check_typed(value, alt, path)
                return
            except AssertionError as e:
                errors.append(str(e))
        raise AssertionError(" / ".join(errors))
    elif origin is list:
        assert isinstance(value, list), f"{path}: {type(value).__name__}, not a list"
        (item,) = get_args(tp)
        for i, v in enumerate(value):
            check_typed(v, item, f"{path}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), f"{path}: {type(value).__name__}, not an object"
        key_tp, item = get_args(tp)
        for k, v in value.items():
            check_typed(k, key_tp, f"{path} key {k!r}")
            check_typed(v, item, f"{path}[{k!r}]")
    elif tp is Any:
        return
    elif tp is type(None):
        assert value is None, f"{path}: {value!r}, not null"
    elif tp is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{path}: {value!r}, not a number"
    elif tp is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{path}: {value!r}, not an integer"
    elif tp in (str, bool):
        assert isinstance(value, tp), f"{path}: {value!r}, not {tp.__name__}"
    else:
        raise AssertionError(f"{path}: no check for the type {typing.get_origin(tp) or tp!r}")
