"""The cost model, the simulator, `plan --auto` and `plan --profile`."""
