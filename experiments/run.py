"""Train one model on CIFAR-10: ``python -m experiments.run MODEL [--scale S] [--config FILE] [options]``.

Every field of the run config and of the model's config is a flag (``--help`` after the model name
lists them with the preset's values); ``--print-config`` prints the resolved config as YAML, which
``--config FILE`` accepts, as it accepts a run's saved ``config.yaml`` to repeat that run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.cli import (
    ArgumentParser,
    UserError,
    add_config_flags,
    computing,
    data_flags,
    datamodule_from_flags,
    main_guard,
)
from experiments.cli.memory import MemoryUse
from sa_conv.models import MODELS
from sa_conv.training.config import SECTIONS, RunConfig, RunOptions, dump_config, load_config
from sa_conv.training.presets import SCALES, preset
from sa_conv.utils.config import config_to_dict, field_types
from sa_conv.utils.quote import quoted

if TYPE_CHECKING:
    from sa_conv.training.summary import RunSummary

# the run config's own options (its parts have their own flag groups)
_TOP_LEVEL = ("model", "scale", "model_config", *SECTIONS)

PROG = "python -m experiments.run"
SLOW_HINT = (
    "On a 2-core CPU, --scale tiny trains in about 2 minutes, --scale small in about 45 minutes per "
    "positional model, "
    "--scale small6 (the paper's 6 layers) in about 2 hours with 9 heads and 2.5 with 16 (alone; about "
    "twice that beside another run)."
)


def _first_stage(argv: list[str]) -> argparse.Namespace:
    """The model, scale and config file: what decides the other flags and their defaults.

    Parsed with every flag any model has (as strings), so that a flag's value is never taken for the model.
    """
    parser = ArgumentParser(prog=PROG, add_help=False)
    parser.add_argument("model", nargs="?")
    _meta_flags(parser)
    families = {entry.family for entry in MODELS.values()}
    for cls in (RunConfig, *SECTIONS.values(), RunOptions, *sorted(families, key=lambda c: c.__name__)):
        add_config_flags(parser, cls, {}, skip=_TOP_LEVEL, loose=True)
    data_flags(parser)
    args, _ = parser.parse_known_args(argv)
    return args


def base_config(argv: list[str]) -> RunConfig | None:
    """The preset (or the --config file) the command line starts from; None if no model is named."""
    first = _first_stage(argv)
    if first.config is not None:
        config = load_config(first.config)
        if first.model is not None and first.model != config.model:
            raise UserError(
                f"the model {quoted(first.model)} differs from {first.config}'s model {quoted(config.model)}"
            )
        if first.scale is not None:
            raise UserError("--scale and --config: a config file is complete; change its options with flags")
        return config
    if first.model is None:
        return None
    if first.model not in MODELS:
        raise UserError(f"unknown model {quoted(first.model)}; valid models: {', '.join(MODELS)}")
    return preset(first.model, first.scale or "paper")


def _meta_flags(parser: ArgumentParser) -> None:
    """The flags about the command line itself: where the config comes from, resuming, debugging."""
    parser.add_argument("--scale", help=f"the preset to start from: {', '.join(SCALES)} (default: paper)")
    parser.add_argument(
        "--config", type=Path, help="start from this YAML config (--print-config, config.yaml)"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config as YAML and exit"
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="PATH|latest|auto",
        help="resume PATH, or the newest run with this config (latest; auto: a new run if there is none)",
    )


def build_parser(base: RunConfig | None) -> ArgumentParser:
    """The full parser: the flags of the run config, of ``base.model``'s config, and of the run options."""
    models = ", ".join(MODELS)
    parser = ArgumentParser(
        prog=PROG,
        usage=f"{PROG} MODEL [--scale SCALE] [--config FILE] [--print-config] [--resume [PATH]] [options]",
        description=f"Train a model on CIFAR-10. Models: {models}. Scales: {', '.join(SCALES)} (paper = the "
        "paper's run.sh, a GPU scale; small = 2 layers of width 64, the CPU scale where heads localize, "
        "about 45 minutes per positional model on 2 cores; small6 = the same at the paper's 6 layers, "
        "about 2 hours with 9 heads and 2.5 with 16 alone on 2 cores; tiny = about 2 minutes, a smoke test). "
        "Name a model before --help to see its options with the preset's values.",
    )
    parser.add_argument("model", nargs="?" if base is not None else None, help=f"one of: {models}")
    _meta_flags(parser)
    if base is None:
        return parser
    family = MODELS[base.model].family
    model_group = parser.add_argument_group(f"model: {base.model} ({family.__name__})")
    add_config_flags(model_group, family, config_to_dict(base.model_config))
    add_config_flags(parser.add_argument_group("optimizer"), type(base.optim), config_to_dict(base.optim))
    data_group = parser.add_argument_group("data")
    add_config_flags(data_group, type(base.data), config_to_dict(base.data))
    data_flags(data_group)
    add_config_flags(parser.add_argument_group("training"), RunConfig, base.to_dict(), skip=_TOP_LEVEL)
    defaults = {"output_dir": Path("runs")}
    add_config_flags(parser.add_argument_group("execution"), RunOptions, defaults)
    return parser


def resolve(argv: list[str]) -> tuple[RunConfig, argparse.Namespace]:
    """The run config the command line asks for, and every parsed flag."""
    base = base_config(argv)
    parser = build_parser(base)
    if base is None:
        parser.parse_known_args(argv)  # --help stops here
        parser.error(
            f"the following arguments are required: model (one of {', '.join(MODELS)}), or --config FILE"
        )
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unknown_flags(parser, base, unknown)
    family = MODELS[base.model].family

    def values(cls: type) -> dict[str, Any]:
        return {name: getattr(args, name) for name in field_types(cls) if name not in _TOP_LEVEL}

    data = {"model": base.model, "scale": base.scale, "model_config": values(family), **values(RunConfig)}
    data.update({name: values(cls) for name, cls in SECTIONS.items()})
    return RunConfig.from_dict(data), args


def _unknown_flags(parser: ArgumentParser, base: RunConfig | None, unknown: list[str]) -> None:
    """A flag of another model's config says so; anything else is argparse's one-line error."""
    if base is not None:
        own = MODELS[base.model].family
        for token in unknown:
            name = token.split("=", 1)[0].lstrip("-").replace("-", "_")
            owners = [m for m, e in MODELS.items() if e.family is not own and name in field_types(e.family)]
            if token.startswith("--") and owners:
                kind = "every SA model" if len(owners) > 1 else owners[0]
                listed = f" ({', '.join(owners)})" if len(owners) > 1 else ""
                raise UserError(
                    f"{base.model} has no option {token.split('=', 1)[0]} (it is an option of {kind}{listed})"
                )
    parser.error(f"unrecognized arguments: {' '.join(unknown)}")


def run_options(args: argparse.Namespace) -> RunOptions:
    """The execution options of the parsed flags."""
    values: dict[str, Any] = {name: getattr(args, name) for name in field_types(RunOptions)}
    devices = values["devices"]
    values["devices"] = int(devices) if str(devices).isdigit() else devices
    return RunOptions(**values)


def newest_checkpoint(output_dir: Path, config: RunConfig) -> Path | None:
    """The checkpoint ``--resume`` would continue from (a run of this config), if there is one."""
    from sa_conv.training.resume import find_resume

    resume = find_resume("auto", output_dir, config, warn=lambda _message: None)
    return resume.path if resume is not None else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    config, args = resolve(argv)
    if args.print_config:
        print(dump_config(config), end="")
        return 0
    options = run_options(args)  # every argument checked: now the heavy imports
    computing()
    from sa_conv.training.resume import find_resume
    from sa_conv.training.run import train

    datamodule = datamodule_from_flags(args, config)
    resume = None
    if args.resume is not None:
        warn = lambda message: print(message, file=sys.stderr)  # noqa: E731
        resume = find_resume(args.resume, options.output_dir, config, warn=warn)
        if resume is None:
            print(
                f"--resume auto: no run of {config.model} with this config yet; starting one", file=sys.stderr
            )
    with MemoryUse(
        batch_size=config.data.batch_size,
        resume="continue from {checkpoint} with the same command and --resume (at the batch size it ran)",
        checkpoint=lambda: newest_checkpoint(options.output_dir, config),
    ):
        summary = train(config, datamodule=datamodule, options=options, resume=resume, slow_hint=SLOW_HINT)
    print(done_line(summary))
    return 0


def done_line(summary: RunSummary) -> str:
    """The run's last line: its accuracy, time, speed and folder."""
    if summary.protocol == "paper":
        accuracy = f"best test acc {summary.best_test_acc:.4f} | final test acc {summary.final_test_acc:.4f}"
    else:
        accuracy = f"best val acc {summary.best_val_acc:.4f} | test acc {summary.test_acc:.4f}"
    mfu = f", MFU {summary.mfu:.1%}" if summary.mfu is not None else ""
    return (
        f"done: {accuracy} | wall {summary.wall_time_s:.1f} s | {summary.train_images_per_s:.1f} train "
        f"images/s ({summary.train_tflops:.3f} TFLOP/s{mfu}) | {summary.run_dir}"
    )


if __name__ == "__main__":
    sys.exit(main_guard(main)())
