"""A package's public names imported from their modules on first use (``import sa_conv`` stays light)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package`` for the names ``homes`` maps to the modules that define
    them: each imported on first use and kept in the package, any other name an ``AttributeError``."""

    def attribute(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return attribute
