"""What every layer of the package may use: typed config options, atomic files, the machine (its CPU,
precision support, peak rates), the allocator's settings, the learning-rate schedule."""
