"""Training with sentence-transformers' trainer: the run, its data, hooks and checkpoints."""
