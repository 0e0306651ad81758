"""Stand-in for the `soundfile` package (audio I/O), which SGLang imports at start-up but a text model never uses.

Only for the CPU test server (tests/sglang_cpu/README.md): the real package needs libsndfile, absent from the CPU venv.
"""
