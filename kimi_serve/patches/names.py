"""The default patch set's name, in a module of its own: `patches --help` shows it without loading the patch
machinery (:mod:`kimi_serve.patches.manifest` re-exports it)."""

DEFAULT_SET = "sglang-0.5.23-sm120"
