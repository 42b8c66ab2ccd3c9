"""Reading trained attention: maps, locality and motion metrics, figures (tensors in, Figure out),
curves, statistics, FLOP counts and the offline attention explorer."""
