"""Transform nodes: advantages, composed rewards, DAPO."""
