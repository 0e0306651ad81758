"""``python -m kimi_serve.simulator <sglang.launch_server flags...>``: the simulated Kimi-K2.5 SGLang server."""

from __future__ import annotations

import logging
import os
import sys

from kimi_serve.simulator.server import main

if __name__ == "__main__":
    code = main()
    # Once the server has stopped there is nothing left to clean up, and tearing down the imported SGLang/torch
    # interpreter takes seconds on a busy machine (every `check --contract` waits for it): flush and leave.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
