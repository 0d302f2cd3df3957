"""An example hpcai workload plugin: a small MLP trained on synthetic data."""
