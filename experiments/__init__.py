"""Command-line programs over sa_conv: ``python -m experiments.<name>``; what they share is in
``experiments.cli``, and the two larger ones (``study``, ``benchmark``) are packages of their own."""
