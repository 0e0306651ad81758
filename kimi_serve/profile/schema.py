"""The profile schema: every key a profile may hold, its type, range and meaning.

This table is the single source of truth: the loader validates against it, and docs/profiles.md is checked against it
by the test suite (every key documented, nothing documented that does not exist).
"""

from __future__ import annotations

from typing import Any

from kimi_serve.profile.key import Key, value_problem
from kimi_serve.profile.keys_operations import OPERATIONS
from kimi_serve.profile.keys_serving import SERVING

__all__ = ["SECTIONS", "TOP_LEVEL_ONLY", "Key", "default_of", "value_problem"]

# every section in the order docs/profiles.md and the generated types list them: what is served, then how it is run
SECTIONS: dict[str, dict[str, Key]] = {**SERVING, **OPERATIONS}

TOP_LEVEL_ONLY = {"extends"}


def default_of(key_path: str) -> Any:
    """The schema's default of ``section.key`` (or a top-level key): the one place a default is written down."""
    section, _, key = key_path.rpartition(".")
    return SECTIONS[section][key].default
