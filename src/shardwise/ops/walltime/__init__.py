"""Walltimes that start: measured rows of SLURM's answers, the probe, SLURM's own plan."""
