"""The kimi-serve simulator: SGLang 0.5.23's own OpenAI serving layer in front of a scripted Kimi-K2.5 stand-in.

Run it inside an environment that has sglang (the CPU venv of scripts/build-cpu-venv.sh, or the serving host's):
``python -m kimi_serve.simulator <the same flags as python -m sglang.launch_server>``. docs/simulator.md explains it.
Only :mod:`kimi_serve.simulator.model` is importable without sglang.
"""
