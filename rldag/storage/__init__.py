"""Run storage under a URI (file, s3), the run lock, Parquet reads, reading a stored run."""

from rldag.config.moved import forward

# The names of the module this package replaced, with a warning naming the new path.
__getattr__ = forward(__name__, "rldag.storage.store")
