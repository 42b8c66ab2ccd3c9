"""The study (``python -m experiments.study``): every model of a scale on the same data and budget. One
module a part: ``entries`` (which models each scale trains), ``runs`` (a run read back, resumed or
trained), ``tables`` (the results files and their rows), ``weights`` (finished runs shipped, unfinished
ones carried), ``figures`` and ``report`` (the figures; where unfinished runs stand), ``command`` (the
command line, ``main``)."""

from experiments.study.command import build_parser, main
from experiments.study.entries import PAPER_TABLE, STUDIES, Entry, entry_config

__all__ = ["PAPER_TABLE", "STUDIES", "Entry", "build_parser", "entry_config", "main"]
