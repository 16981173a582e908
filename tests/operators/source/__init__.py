"""Source nodes: datasets, their cursor and their checks."""
