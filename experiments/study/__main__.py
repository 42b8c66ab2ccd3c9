"""``python -m experiments.study``: the study's command (``experiments.study.command``)."""

import sys

from experiments.cli import main_guard
from experiments.study.command import main

sys.exit(main_guard(main)())
