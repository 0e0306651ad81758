"""SGLang's router (PyPI ``sglang-router``) at run time: the key shim it is started through (shim.py, run in the
engine interpreter) and a small client for its health view (client.py: /readiness and /workers)."""
