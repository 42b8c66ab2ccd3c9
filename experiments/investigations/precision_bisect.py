"""Why bf16 diverged: the `small` quadratic run's first steps under one precision policy, loss per step.

    python -m experiments.investigations.precision_bisect POLICY --data-dir DIR [--steps 1200] [--seed 0]
        [--out FILE]
    python -m experiments.investigations.precision_bisect --figure PNG [RESULT.json ...]   # the loss curves

Every policy trains the same model from the same initialization on the same batches (the `small`
preset's recipe: its augmentation, optimizer and 15-epoch schedule), for the first ``--steps`` steps,
and writes the training loss of every step with a summary (JSON). Policies: ``float32``; ``autocast``
(plain bf16 autocast, what Lightning's bf16-mixed does); ``contract`` (the project's mixed precision,
sa_conv.training.precision); and plain autocast with one part kept in float32: ``norms`` (the LayerNorms
computed in float32, their output rounded back to bf16), ``residual`` (the LayerNorms' outputs in
float32: the residual stream), ``ffn`` (the feed-forward sublayers), ``embed`` (the pixel embedding),
``head`` (pooling, classifier and loss), ``attention`` (the attention sublayers). On a CPU without native
bf16, bf16 products are emulated (exact products, float32 accumulation: ``Bf16ProductsInFloat32``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from experiments.cli import main_guard
from sa_conv.data.augmentation import random_crop_flip
from sa_conv.models.sa_classifier import SABlock, SAClassifier
from sa_conv.nn.autocast import no_autocast
from sa_conv.training.precision import Bf16ProductsInFloat32, flush_denormals, mixed_precision
from sa_conv.training.presets import preset
from sa_conv.training.run import datamodule_for, module_for
from sa_conv.utils.machine import cpu_has_native_bf16
from sa_conv.utils.schedule import lr_factor

POLICIES = ("float32", "autocast", "contract", "norms", "residual", "ffn", "embed", "head", "attention")


def _in_float32(module: nn.Module, *, round_back: bool) -> None:
    """Run ``module`` outside autocast on float32 inputs; ``round_back``: its output in its input's dtype."""
    forward = module.forward

    def wrapped(*args: Any) -> Any:
        dtype = next(a.dtype for a in args if isinstance(a, Tensor))
        with no_autocast(args[0].device):
            out = forward(*(a.float() if isinstance(a, Tensor) else a for a in args))
        return out.to(dtype) if round_back else out

    module.forward = wrapped


class _FeedForward(nn.Module):
    """A block's feed-forward sublayer as one module (fc1, GELU, fc2), to keep it whole in float32."""

    def __init__(self, fc1: nn.Linear, fc2: nn.Linear) -> None:
        super().__init__()
        self.fc1, self.fc2 = fc1, fc2

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


def apply_policy(model: SAClassifier, policy: str) -> None:
    """Keep the part of ``policy`` in float32 (in place; the plain-autocast policies)."""
    for block in model.sa_blocks():
        if policy in ("norms", "residual"):
            for norm in (block.attn_norm, block.ffn_norm):
                _in_float32(norm, round_back=policy == "norms")
        elif policy == "ffn":
            ffn = _FeedForward(block.fc1, block.fc2)
            _in_float32(ffn, round_back=True)
            patched: nn.Module = block  # sublayers and forward replaced by ones of other types
            patched.fc2 = ffn  # fc2(gelu(fc1(x))) -> the whole sublayer; fc1 then passes through
            patched.fc1 = nn.Identity()
            patched.forward = _ffn_block_forward(block)
        elif policy == "attention":
            _in_float32(block.attention, round_back=True)
    if policy == "embed":
        _in_float32(model.embed, round_back=True)


def _ffn_block_forward(block: SABlock) -> Callable[[Tensor], Tensor]:
    def forward(x: Tensor) -> Tensor:
        a = block.attention(x)
        x = block.attn_norm(x + block.dropout(block.attn_dense(a)))
        return block.ffn_norm(x + block.dropout(block.fc2(x)))

    return forward


def _logits_and_loss(model: SAClassifier, images: Tensor, labels: Tensor, policy: str) -> Tensor:
    if policy != "head":
        return F.cross_entropy(model(images), labels)
    x = model.tokens(images)
    for block in model.blocks:
        x = block(x)
    with no_autocast(images.device):  # pooling, classifier and loss in float32
        return F.cross_entropy(model.head(x.float().mean(dim=(1, 2))), labels)


def _forward_context(policy: str, emulate: bool) -> contextlib.AbstractContextManager[object]:
    if policy == "float32":
        return contextlib.nullcontext()
    if policy == "contract":
        return mixed_precision("cpu", emulate_bf16=emulate)
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False))
    if emulate:
        stack.enter_context(Bf16ProductsInFloat32())
    return stack


def _batches(datamodule: Any, seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    generator = torch.Generator().manual_seed(seed + 1)
    for epoch in range(10**6):
        loader = datamodule.train_dataloader()
        loader.batch_sampler.set_epoch(epoch)
        for images, labels in loader:
            yield datamodule.normalize(random_crop_flip(images, generator=generator)), labels


def bisect(policy: str, *, data_dir: Path, steps: int, seed: int) -> dict[str, Any]:
    """Train the first ``steps`` steps under ``policy``; the losses and a summary."""
    flush_denormals()
    config = preset("quadratic", "small").replace(seed=seed)
    datamodule = datamodule_for(config, data_dir=data_dir)
    datamodule.setup("fit")
    pl.seed_everything(seed, verbose=False)
    module = module_for(config)
    model = module.backbone
    assert isinstance(model, SAClassifier)  # the quadratic preset's model
    apply_policy(model, policy)
    model.train()
    optim = config.optim
    total = datamodule.train_batches() * config.epochs
    optimizer = torch.optim.SGD(module.parameter_groups(), lr=optim.lr, momentum=optim.momentum)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total, optim))
    emulate = policy != "float32" and not cpu_has_native_bf16()
    losses: list[float] = []
    start = time.perf_counter()
    for step, (images, labels) in enumerate(_batches(datamodule, seed)):
        if step == steps:
            break
        with _forward_context(policy, emulate):
            loss = _logits_and_loss(model, images, labels, policy)
        with Bf16ProductsInFloat32() if emulate else contextlib.nullcontext():
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        losses.append(loss.item())
        if step % 100 == 0:
            print(f"{policy} step {step} loss {losses[-1]:.3f}", flush=True)
    window = [sum(losses[i : i + 50]) / 50 for i in range(0, len(losses) - 49, 50)]
    after_min = max(window[window.index(min(window)) :])
    return {
        "policy": policy,
        "seed": seed,
        "steps": len(losses),
        "schedule_steps": total,
        "bf16_products": "emulated" if emulate else ("native" if policy != "float32" else "none"),
        "min_mean50": min(window),
        "last_mean50": window[-1],
        "max_mean50_after_min": after_min,
        "diverged": after_min > min(window) + 1.0 or not math.isfinite(losses[-1]),
        "seconds": time.perf_counter() - start,
        "losses": losses,
    }


def loss_figure(results: list[dict[str, Any]]) -> Any:
    """The training loss of each policy's run, mean of every 50 steps, against the step."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = figure.add_subplot()
    for r in results:
        losses = r["losses"]
        means = [sum(losses[i : i + 50]) / 50 for i in range(0, len(losses) - 49, 50)]
        style = "--" if r["diverged"] else "-"
        label = f"{r['policy']} ({'diverged' if r['diverged'] else 'trains'})"
        ax.plot([i * 50 + 25 for i in range(len(means))], means, style, label=label)
    ax.set(xlabel="training step (batch 100)", ylabel="training loss, mean of 50 steps", ylim=(1.3, 8))
    ax.set_title(f"small quadratic, seed {results[0]['seed']}: bf16 policies (dashed: diverged)")
    ax.legend(fontsize=8)
    return figure


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m experiments.investigations.precision_bisect", description=__doc__
    )
    if argv is None:
        import sys

        argv = sys.argv[1:]
    if argv and argv[0] == "--figure":
        from sa_conv.utils.files import save_png

        paths = [Path(p) for p in argv[2:]] or sorted(Path("results/precision").glob("bisect_*.json"))
        save_png(loss_figure([json.loads(p.read_text()) for p in paths]), Path(argv[1]))
        print(argv[1])
        return 0
    parser.add_argument("policy", choices=POLICIES)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = bisect(args.policy, data_dir=args.data_dir, steps=args.steps, seed=args.seed)
    out = args.out or Path("results/precision") / f"bisect_{args.policy}_seed{args.seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result) + "\n")
    print({k: v for k, v in result.items() if k != "losses"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main_guard(main)())
