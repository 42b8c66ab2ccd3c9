"""Finished investigations, kept runnable to repeat what docs/performance.md reports; not maintained
commands (``python -m experiments.investigations.NAME``)."""
