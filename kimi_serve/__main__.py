"""`python -m kimi_serve` runs the CLI."""

from kimi_serve.cli import entry

entry()
