"""pipeline.yaml to a validated spec: keys, overrides, model paths, pools."""
