"""Where operators run: pools, placement, dispatch, workers' logs."""
