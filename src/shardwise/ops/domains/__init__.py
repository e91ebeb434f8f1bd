"""The corpus's label distribution: the estimate, its report from a run, its lines and picture."""
