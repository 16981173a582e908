"""Run storage (file and S3) and the run lock."""
