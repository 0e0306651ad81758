"""kimi-serve: serve Kimi-K2.5 with SGLang on SM120, and prove the server speaks its model's language."""

__version__ = "0.1.0"
