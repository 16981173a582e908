"""Rich terminal output: `plan`, `plan --auto`, progress, `inspect`."""
