"""How each head's centre moves while it sharpens: the loss gradient on the centres, averaged between two
locality snapshots (``CentreGradients``, kept on the device: no host sync per step), and, from a run's
locality history, when each head that ends sharp became sharp and how far its centre moved before and
after (``sharpening``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from sa_conv.analysis.locality import SHARP_MASS
from sa_conv.analysis.snapshots import LocalitySnapshot
from sa_conv.nn.encodings import PositionalEncoding
from sa_conv.utils.errors import CheckpointError

__all__ = ["CentreGradients", "HeadSharpening", "sharpening"]


class CentreGradients:
    """Per layer, the sum over training steps of each head's centre-gradient norm ``||dL/dc_h||`` and the
    steps summed, for encodings that learn centres (``PositionalEncoding.centre_parameter``); ``take``
    returns the means since the last take (a host sync) and starts again."""

    def __init__(self) -> None:
        self.sums: list[Tensor | None] = []  # per layer (heads,), on the parameters' device
        self.steps = 0

    def add(self, encodings: Sequence[PositionalEncoding | None]) -> None:
        """Add this step's gradient norms (call after the backward pass, before the optimizer step)."""
        grads = [_centre_grad(e) for e in encodings]
        if len(self.sums) != len(grads):
            self.sums = [None] * len(grads)
        for i, grad in enumerate(grads):
            if grad is not None:
                norm = grad.detach().float().norm(dim=-1)  # (heads,)
                current = self.sums[i]
                fresh = current is None or current.shape != norm.shape
                self.sums[i] = norm if fresh else current.to(norm.device) + norm  # type: ignore[union-attr]
        self.steps += 1

    def take(self) -> list[list[float] | None]:
        """Per layer, each head's mean centre-gradient norm over the steps since the last take (None for
        a layer without centres, or before any step)."""
        means = [None if s is None or not self.steps else (s / self.steps).tolist() for s in self.sums]
        self.sums, self.steps = [None] * len(self.sums), 0
        return means

    def state_dict(self) -> dict[str, object]:
        """Plain data (a resumed run continues the same means)."""
        return {"sums": [None if s is None else s.tolist() for s in self.sums], "steps": self.steps}

    def load_state_dict(self, state: dict[str, object]) -> None:
        """Restore what ``state_dict`` returned."""
        sums, steps = state.get("sums"), state.get("steps")
        if not isinstance(sums, list) or not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
            raise CheckpointError("the checkpoint's centre gradients hold no sums list and step count")
        self.sums = [None if s is None else torch.tensor(s, dtype=torch.float32) for s in sums]
        self.steps = steps


def _centre_grad(encoding: PositionalEncoding | None) -> Tensor | None:
    """The loss gradient on an encoding's centres ``(heads, 2)``, if it learns centres and has one."""
    if encoding is None or encoding.centre_parameter is None:
        return None
    grad: Tensor | None = getattr(encoding, encoding.centre_parameter).grad
    return grad


@dataclass(frozen=True)
class HeadSharpening:
    """One head that ends a run sharp: the first recorded step from which it stays sharp, and how far its
    centre moved (pixels) from its start to that step and from that step to the end."""

    layer: int  # from 1
    head: int  # from 1
    step: int
    moved_before: float
    moved_after: float


def sharpening(history: Sequence[LocalitySnapshot]) -> list[HeadSharpening]:
    """Every head sharp (>= ``SHARP_MASS`` on one pixel) at the last snapshot of a locality history that
    records centres from step 0: when it became sharp for good and its centre's motion before and after."""
    if not history or history[0].step != 0:
        return []
    out = []
    for li, start in enumerate(history[0].layers):
        if start.centres is None or any(s.layers[li].centres is None for s in history):
            continue
        mass = torch.tensor([s.layers[li].peak_mass for s in history])  # (T, heads)
        centres = torch.tensor([s.layers[li].centres for s in history])  # (T, heads, 2)
        sharp = mass >= SHARP_MASS
        for h in range(mass.shape[1]):
            if not sharp[-1, h]:
                continue
            unsharp = (~sharp[:, h]).nonzero()
            t = int(unsharp[-1]) + 1 if len(unsharp) else 0  # the first snapshot of its last sharp stretch
            before = float((centres[t, h] - centres[0, h]).norm())
            after = float((centres[-1, h] - centres[t, h]).norm())
            out.append(HeadSharpening(li + 1, h + 1, history[t].step, before, after))
    return out
