"""The cost model, the simulator, `plan --auto`."""
