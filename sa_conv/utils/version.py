"""The suite's version: written into every checkpoint and weights file, checked when one is read."""

__all__ = ["__version__"]

__version__ = "0.1.0"
