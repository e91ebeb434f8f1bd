"""The run's SLURM jobs: what became of each, the keeper that acts on it, adoption, retry arrays."""
