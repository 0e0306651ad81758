"""A server as a child process: started in its own session (child.py), its SGLang start-up log read as it streams
(startup_log.py), waited on until ``/health`` answers (ready.py), stopped as SGLang wants it."""
