"""Where operators run: in-process and Ray pools, worker actors, placement, dispatch, process
setup."""
