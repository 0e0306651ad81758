"""`up`: the supervised foreground start, its console, the SGLang startup-log reader and the process supervisor."""
