"""What the command-line programs share, one job a module: ``arguments`` (the parser, one line for a bad
option, and the argument types), ``config_flags`` (flags from config dataclasses), ``data`` (the data from
the flags or from a checkpoint), ``trained`` (a trained model read for a command, refused without
attention where the command needs it), ``guard`` (every expected failure one line, ``main_guard``) and
``memory`` (what an out-of-memory error says). The programs import them from here."""

from experiments.cli.arguments import (
    ArgumentParser,
    output_file,
    output_folder,
    positive_float,
    positive_int,
    seed_int,
)
from experiments.cli.config_flags import add_config_flags, flag
from experiments.cli.data import (
    DEFAULT_DATA_DIR,
    check_data_dir,
    data_flags,
    data_note,
    datamodule_from_flags,
    datamodule_of_checkpoint,
)
from experiments.cli.guard import UserError, computing, main_guard
from experiments.cli.memory import MemoryUse, is_out_of_memory
from experiments.cli.trained import trained_model

__all__ = [
    "DEFAULT_DATA_DIR",
    "ArgumentParser",
    "MemoryUse",
    "UserError",
    "add_config_flags",
    "check_data_dir",
    "computing",
    "data_flags",
    "data_note",
    "datamodule_from_flags",
    "datamodule_of_checkpoint",
    "flag",
    "is_out_of_memory",
    "main_guard",
    "output_file",
    "output_folder",
    "positive_float",
    "positive_int",
    "seed_int",
    "trained_model",
]
