"""``call`` and ``one_line_error`` under their former name, for ``test_gallery.py`` (a file kept as it
is); every other test imports them from ``helpers``."""

from helpers.commands import call, one_line_error

__all__ = ["call", "one_line_error"]
