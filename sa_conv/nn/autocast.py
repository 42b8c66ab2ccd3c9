"""Autocast, asked the same way everywhere: whether it exists and is on for a device, and a block
outside it (devices without autocast, such as meta, have nothing to leave)."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast_available", "autocast_dtype", "autocast_enabled", "no_autocast"]


def autocast_available(device: torch.device) -> bool:
    """Whether autocast exists for ``device``'s type."""
    return torch.amp.is_autocast_available(device.type)


def autocast_enabled(device: torch.device) -> bool:
    """Whether autocast is on for ``device`` (never on devices without autocast)."""
    return autocast_available(device) and torch.is_autocast_enabled(device.type)


def autocast_dtype(device: torch.device, default: torch.dtype) -> torch.dtype:
    """The dtype products run in on ``device``: autocast's when it is on, else ``default``."""
    return torch.get_autocast_dtype(device.type) if autocast_enabled(device) else default


def no_autocast(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """A block outside autocast on ``device``."""
    if autocast_available(device):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()
