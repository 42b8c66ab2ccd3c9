"""Command-line programs over sa_conv: ``python -m experiments.<name>``."""
