"""``python -m experiments.benchmark``: the benchmark's command (``experiments.benchmark.command``)."""

import sys

from experiments.benchmark.command import main
from experiments.cli import main_guard

sys.exit(main_guard(main)())
