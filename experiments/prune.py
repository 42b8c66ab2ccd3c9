"""The paper's degenerate-head pruning: prune, evaluate, fine-tune, evaluate.

    python -m experiments.prune CKPT [--data-dir DIR] [--epochs 100] [--lr 0.01] [--control SEED]
                                     [--json FILE]

Degenerate heads (the paper's appendix on the generalized Gaussian): inverse covariance with condition
number > 1000 or largest eigenvalue < 1e-5; for the quadratic encoding the isotropic rule s^2 < 1e-5.
They are removed from their layers (their encoding parameters and their block of the output
projection); the test accuracy is measured before pruning, after it, and after fine-tuning (the paper:
lr 0.01 for 100 epochs), on the checkpoint's own data unless ``--data-dir`` names other data.

``--control SEED``: the control the paper does not run: as many heads per layer as were pruned, drawn at
random (seeded) among the layer's non-degenerate heads, removed from the same checkpoint and fine-tuned
alike; the report compares the two fine-tuned models on the same test images (McNemar's exact test).
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sa_conv.data.datamodule import CIFAR10DataModule
    from sa_conv.models import Backbone
    from sa_conv.training.module import ImageClassifier

from experiments.cli import (
    ArgumentParser,
    UserError,
    computing,
    data_flags,
    datamodule_of_checkpoint,
    main_guard,
    output_file,
    output_folder,
    positive_float,
    positive_int,
    seed_int,
    trained_model,
)
from experiments.cli.memory import MemoryUse
from sa_conv.training.config import RunConfig, RunOptions
from sa_conv.utils.files import write_json


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="python -m experiments.prune", description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    data_flags(parser, default_note="the checkpoint's own data")
    parser.add_argument("--epochs", type=positive_int, default=100, help="fine-tuning epochs (default: 100)")
    parser.add_argument(
        "--lr", type=positive_float, default=0.01, help="fine-tuning learning rate (default: 0.01)"
    )
    parser.add_argument("--limit-train-batches", type=positive_int, help="fine-tune on N batches per epoch")
    parser.add_argument(
        "--batch-size", type=positive_int, help="fine-tuning and evaluation batches (default: the run's)"
    )
    parser.add_argument(
        "--output-dir", type=output_folder, default=Path("runs/pruned"), help="the fine-tuning run"
    )
    parser.add_argument(
        "--control",
        type=seed_int,
        metavar="SEED",
        help="also prune as many random healthy heads per layer (drawn with SEED), fine-tuned alike",
    )
    parser.add_argument("--json", type=output_file, help="also write the report here")
    return parser


def degenerate(backbone: Backbone) -> dict[int, list[int]]:
    """``{layer: [head, ...]}`` of degenerate heads; UserError for an encoding without a rule."""
    found = {}
    for i, encoding in enumerate(backbone.encodings()):
        flags = encoding.degenerate_heads() if encoding is not None else None
        if flags is None:
            kind = type(encoding).__name__ if encoding is not None else "content-only"
            raise UserError(
                f"layer {i + 1} ({kind}) has no degenerate-head rule: "
                "only quadratic and gaussian models prune"
            )
        heads = [int(h) for h in flags.nonzero().flatten()]
        if heads:
            found[i] = heads
    return found


def nearest_to_degenerate(backbone: Backbone) -> dict[str, dict[str, float]]:
    """Per layer (numbered from 1), how near its heads come to the rule: the largest condition number and
    the smallest largest eigenvalue of their inverse covariances (the rule: above 1000, below 1e-5)."""
    from sa_conv.nn.encodings import spectrum

    nearest = {}
    for i, encoding in enumerate(backbone.encodings()):
        gaussians = encoding.head_gaussians() if encoding is not None else None
        if gaussians is None:
            continue
        condition, largest = spectrum(gaussians[1])
        nearest[str(i + 1)] = {
            "max_condition": float(condition.max()),
            "min_largest_eigenvalue": float(largest.min()),
        }
    return nearest


def random_heads(heads_per_layer: list[int], pruned: dict[int, list[int]], seed: int) -> dict[int, list[int]]:
    """As many heads of each layer as ``pruned`` holds, drawn with ``seed`` among the others."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    control = {}
    for layer, heads in pruned.items():
        others = [h for h in range(heads_per_layer[layer]) if h not in heads]
        if len(others) < len(heads):
            raise UserError(f"--control: layer {layer + 1} has fewer healthy heads than degenerate ones")
        order = torch.randperm(len(others), generator=generator)[: len(heads)]
        control[layer] = sorted(others[int(i)] for i in order)
    return control


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    computing()  # the arguments are checked: now the heavy imports
    from sa_conv.analysis.statistics import mcnemar, per_image

    record, module = trained_model(args.checkpoint, needs_attention="attention heads")
    config = RunConfig.from_dict(record.config())
    backbone = module.backbone
    pruned = degenerate(backbone)
    heads_before = list(backbone.config.heads_per_layer)
    params_before = sum(p.numel() for p in backbone.parameters())
    rules = [e.degenerate_rule for e in backbone.encodings() if e is not None and e.degenerate_rule]
    report: dict[str, Any] = {
        "checkpoint": str(args.checkpoint),
        "model": config.model,
        "rule": "; ".join(dict.fromkeys(rules)),
        "pruned": {str(i + 1): [h + 1 for h in heads] for i, heads in pruned.items()},  # layers, heads from 1
        "heads_before": heads_before,
        "params_before": params_before,
        "nearest_to_degenerate": nearest_to_degenerate(backbone),
    }
    if not pruned:
        print(
            f"{config.model}: no degenerate head in {len(heads_before)} layers "
            f"({sum(heads_before)} heads): nothing to prune; nearest per layer: "
            + ", ".join(
                f"layer {layer} condition {n['max_condition']:.3g}, "
                f"largest eigenvalue {n['min_largest_eigenvalue']:.3g}"
                for layer, n in report["nearest_to_degenerate"].items()
            )
        )
        report.update(heads_after=heads_before, params_after=params_before)
        if args.json:
            write_json(args.json, report)
        return 0
    if args.batch_size is not None:
        config = config.replace(data={"batch_size": args.batch_size})
    datamodule = datamodule_of_checkpoint(record, args, batch_size=args.batch_size)
    control = random_heads(heads_before, pruned, args.control) if args.control is not None else None
    with MemoryUse(batch_size=config.data.batch_size):
        result = prune_and_fine_tune(module, pruned, config, datamodule, args)
        if control is not None:  # the same checkpoint, other heads removed, fine-tuned alike
            _, fresh = trained_model(args.checkpoint, needs_attention="attention heads")
            against = prune_and_fine_tune(fresh, control, config, datamodule, args)
    correct = result.pop("test_correct")
    report.update(result)
    if control is not None:
        control_correct = against.pop("test_correct")
        only_pruned, only_control, p = mcnemar(per_image(correct), per_image(control_correct))
        report["control"] = {
            "seed": args.control,
            "pruned": {str(i + 1): [h + 1 for h in heads] for i, heads in control.items()},
            **against,
            "mcnemar": {"only_pruned": only_pruned, "only_control": only_control, "p": p},
        }
    if args.json:
        write_json(args.json, report)
    print(json.dumps(report, indent=2))
    return 0


def prune_and_fine_tune(
    module: ImageClassifier,
    pruned: dict[int, list[int]],
    config: RunConfig,
    datamodule: CIFAR10DataModule,
    args: Namespace,
) -> dict[str, Any]:
    """Test, prune, test, fine-tune (a run of its own) and test: the report's numbers."""
    from sa_conv.nn.surgery import prune_model_heads
    from sa_conv.training.evaluation import evaluate
    from sa_conv.training.run import module_for, train

    backbone = module.backbone
    before = evaluate(module, datamodule)  # the run's own split, subset and augmentation
    prune_model_heads(backbone, pruned)
    after_pruning = evaluate(module, datamodule)
    tuned_config = config.replace(
        optim={"lr": args.lr},
        epochs=args.epochs,
        limit_train_batches=args.limit_train_batches,
        model_config={"layer_heads": backbone.config.layer_heads},
    )
    tuned = module_for(tuned_config)
    tuned.backbone.load_state_dict(backbone.state_dict())
    summary = train(
        tuned_config,
        datamodule=datamodule,
        options=RunOptions(output_dir=args.output_dir, figures_every=None),
        module=tuned,
    )
    return {
        "heads_after": list(backbone.config.heads_per_layer),
        "params_after": sum(p.numel() for p in backbone.parameters()),
        # the paper's protocol picks its best epoch on the test split: report the last epoch's instead
        "accuracy": {
            "before": before,
            "pruned": after_pruning,
            "finetuned": summary.test_acc if summary.final_test_acc is None else summary.final_test_acc,
        },
        "finetune": {"epochs": args.epochs, "lr": args.lr, "run_dir": summary.run_dir},
        "n_test_images": summary.n_test_images,
        "test_correct": summary.test_correct,  # which test images the fine-tuned model gets right
    }


if __name__ == "__main__":
    sys.exit(main_guard(main)())
