"""Code of the example pipelines: the tiny demo tasks' builders. Not installed; run from the
repository root."""
