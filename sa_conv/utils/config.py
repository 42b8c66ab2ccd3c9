"""Configs as plain data: a dataclass from a dict (YAML, a checkpoint) with its values checked by type."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from sa_conv.utils.quote import quoted

__all__ = ["coerce", "config_from_dict", "config_to_dict", "field_help", "field_types", "is_count", "option"]


def option(default: Any, help: str) -> Any:
    """A dataclass field with a default and a one-line help (the flag's --help text)."""
    if isinstance(default, list | dict | set):
        raise TypeError("a mutable default needs default_factory")
    return dataclasses.field(default=default, metadata={"help": help})


def is_count(value: object, most: int) -> bool:
    """Whether ``value`` is an integer (not a boolean) from 1 to ``most``."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most


def field_help(cls: type) -> dict[str, str]:
    """Each field's help text (``option(..., help)``), by name."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}


def field_types(cls: type) -> dict[str, object]:
    """The resolved type hint of every field of the dataclass ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def coerce(value: Any, hint: Any, name: str) -> Any:
    """``value`` as type ``hint`` (``int | None``, ``tuple[int, ...]``, ``Literal[...]``), or ValueError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_union(hint):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, name)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError(errors[0] if errors else f"{name}: {quoted(value)} is not allowed")
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{name} must be one of {', '.join(map(str, args))}, got {quoted(value)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {quoted(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, got {quoted(value)}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {quoted(value)}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {quoted(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ValueError(f"{name} must be a list, got {quoted(value)}")
        item = args[0]
        return tuple(coerce(v, item, name) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, Mapping):
            raise ValueError(f"{name} must be a mapping, got {quoted(value)}")
        return dict(value)
    return value


def config_from_dict(cls: type, data: Mapping[str, object], *, what: str = "config") -> Any:
    """The dataclass ``cls`` from ``data``; unknown keys and ill-typed values name themselves."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a mapping of options, got {type(data).__name__}")
    types_ = field_types(cls)
    unknown = sorted(set(data) - set(types_))
    if unknown:
        raise ValueError(f"{what} has no option {', '.join(unknown)}; options: {', '.join(types_)}")
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in data]
    if missing:
        raise ValueError(f"{what} needs {', '.join(missing)}")
    values = {k: coerce(v, types_[k], k) for k, v in data.items()}
    return cls(**values)


def config_to_dict(config: Any) -> dict[str, object]:
    """A dataclass as plain data (nested dataclasses as mappings, tuples as lists): what YAML and JSON
    hold."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return config_to_dict(value)
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
