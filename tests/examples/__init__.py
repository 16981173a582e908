"""The example pipelines and the tiny demo tasks they run on."""
