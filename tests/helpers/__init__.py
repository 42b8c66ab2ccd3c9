"""What the tests share (``from helpers import ...``; pytest puts ``tests/`` on the path): commands called
through their error guard and their one-line failures (``commands``), the tiny runs' flags and training
(``runs``) and the runs trained once per session (``fixtures``, a plugin of ``conftest.py``), image trees
(``images``), callbacks put into a run (``callbacks``), what a resumed run is held to (``resume``), a
run's metrics.json (``summaries``), the checkout (``paths``)."""

from helpers.callbacks import StepCounter, with_callback
from helpers.commands import call, one_line_error, one_line_stop, run_cli
from helpers.images import jpeg_tree, write_tree
from helpers.paths import REPO
from helpers.resume import assert_resumed_exactly, weights
from helpers.runs import BATCHES_OF_41, QUICK, QUIET, TEN_STEPS, TINY, tiny, train

__all__ = [
    "BATCHES_OF_41",
    "QUICK",
    "QUIET",
    "REPO",
    "TEN_STEPS",
    "TINY",
    "StepCounter",
    "assert_resumed_exactly",
    "call",
    "jpeg_tree",
    "one_line_error",
    "one_line_stop",
    "run_cli",
    "tiny",
    "train",
    "weights",
    "with_callback",
    "write_tree",
]
