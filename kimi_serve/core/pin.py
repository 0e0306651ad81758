"""The SGLang release kimi-serve pins, and the patch set made for it: the one home of both names.

The engine lock (engine/locks.py), SGLang's flag table (profile/flags.py), the default patch set (patches/names.py)
and every hint that tells the user which version or set to use read them from here.
"""

SGLANG_VERSION = "0.5.23"
PATCH_SET = f"sglang-{SGLANG_VERSION}-sm120"  # the SM120 patch set (patches/sglang-0.5.23/)
