"""Flags from config dataclasses: one ``--field-name`` per field, typed by the field's annotation, its
default and help text shown in --help."""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from experiments.cli.arguments import parse_float, parse_int
from sa_conv.utils.config import field_help, field_types

__all__ = ["add_config_flags", "flag"]


def flag(name: str) -> str:
    """The command-line flag of a config field: ``batch_size`` -> ``--batch-size``."""
    return "--" + name.replace("_", "-")


def _int_or_word(text: str) -> int | str:
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else text


def _count_or_fraction(text: str) -> int | float:
    """``"20"`` -> 20 batches; ``"0.5"`` or ``"1.0"`` -> a fraction of the epoch (Lightning's meanings)."""
    return parse_int(text) if re.fullmatch(r"[+-]?\d+", text) else parse_float(text)


def _parser_for(hint: Any) -> tuple[Callable[[str], Any], dict[str, Any]]:
    """argparse ``type`` and extra keywords for a field type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if set(rest) == {int, float}:
            inner: Callable[[str], Any] = _count_or_fraction
            extra: dict[str, Any] = {}
        elif set(rest) == {int, str}:  # a count or a word (devices: 2 or auto)
            inner, extra = _int_or_word, {}
        else:
            inner, extra = _parser_for(rest[0])
        if type(None) not in args:
            return inner, extra

        def optional(text: str) -> Any:
            return None if text.lower() == "none" else inner(text)

        return optional, extra
    if origin is Literal:
        return type(args[0]), {"choices": list(args)}
    if origin is tuple:
        item, _ = _parser_for(args[0])
        return item, {"nargs": "+"}
    parsers: dict[object, Callable[[str], Any]] = {int: parse_int, float: parse_float, str: str, Path: Path}
    return parsers.get(hint, str), {}


def add_config_flags(
    parser: argparse._ActionsContainer,
    cls: type,
    defaults: Mapping[str, Any],
    *,
    skip: tuple[str, ...] = (),
    loose: bool = False,
) -> list[str]:
    """One flag per field of the dataclass ``cls`` (``--field-name``), its default (``defaults``, else
    the field's own) shown in --help.

    Booleans get ``--x`` / ``--no-x``, ``X | None`` accepts ``none``, tuples take several values,
    ``Literal`` fields list their choices. ``loose``: the flags only, values kept as strings and flags
    the parser has already skipped (to find the positional arguments among any model's flags). Returns
    the field names added.
    """
    helps = field_help(cls)
    own = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    added = []
    for name, hint in field_types(cls).items():
        if name in skip:
            continue
        default = defaults.get(name, own.get(name))
        text = helps.get(name, "")
        shown = " ".join(map(str, default)) if isinstance(default, tuple | list) else default
        text = f"{text} (default: {shown})" if text else f"(default: {shown})"
        # argparse has no public way to ask whether a parser already has a flag
        if loose and flag(name) in parser._option_string_actions:
            continue
        if hint is bool:
            parser.add_argument(
                flag(name), dest=name, action=argparse.BooleanOptionalAction, default=default, help=text
            )
        elif loose:
            parser.add_argument(flag(name), dest=name, nargs=_parser_for(hint)[1].get("nargs"))
        else:
            kind, extra = _parser_for(hint)
            metavar = None if "choices" in extra else name.upper()
            parser.add_argument(
                flag(name), dest=name, type=kind, default=default, help=text, metavar=metavar, **extra
            )
        added.append(name)
    return added
