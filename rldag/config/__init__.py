"""pipeline.yaml to a validated PipelineSpec: the spec, overrides, model paths and the error
types."""
