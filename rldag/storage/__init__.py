"""Run storage under a URI (file, s3), the run lock, Parquet reads, reading a stored run."""
