"""`up`: the supervised foreground start of a deployment (run.py, supervisor.py, watch.py), its console, its logs."""
