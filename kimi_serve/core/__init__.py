"""The base every other package stands on: errors and exit codes, findings, settings, the subprocess chokepoint,
shipped resources. Imports nothing else from kimi_serve."""
