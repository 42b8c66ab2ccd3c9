"""Training runs: the LightningModule, the run (config in, run folder out), its callbacks, checkpoints
that load without running code, exact resume, signals, the precision contract, evaluation."""
