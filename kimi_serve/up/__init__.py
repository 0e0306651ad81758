"""`up`: the supervised foreground start (run.py, watch.py), its console, a replicated deployment, its logs."""
