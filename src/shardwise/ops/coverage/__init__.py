"""How far a run is: read the run directory (``read``), count (``compute``), say it (``render``)."""
