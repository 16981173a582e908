"""Train nodes: the trainer, critics, LoRA, the speed paths."""
