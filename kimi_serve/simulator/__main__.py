"""``python -m kimi_serve.simulator <sglang.launch_server flags...>``: the simulated Kimi-K2.5 SGLang server."""

from __future__ import annotations

from kimi_serve.simulator.server import main

if __name__ == "__main__":
    raise SystemExit(main())
