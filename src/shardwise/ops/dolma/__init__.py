"""Labels into ``dolma mix``: the mix config, and the exact copy of what it reads."""
