"""The default patch set's name, in a module of its own: `patches --help` shows it without loading the patch
machinery (:mod:`kimi_serve.patches.manifest` re-exports it)."""

from kimi_serve.core.pin import PATCH_SET as DEFAULT_SET

__all__ = ["DEFAULT_SET"]
