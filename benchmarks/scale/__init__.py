"""How the cost grows with the rows and the workers: the Ray engine's driver, streaming and Ray against
scoring in memory, and the diversity rules up to a million rows."""
