"""The SGLang release kimi-serve pins, and the patch set made for it: the one home of both names.

The engine lock (engine/locks.py), SGLang's flag table (profile/flags.py), the default patch set (patches/names.py)
and every hint that tells the user which version or set to use read them from here.
"""

SGLANG_VERSION = "0.5.23"
PATCH_SET = f"sglang-{SGLANG_VERSION}-sm120"  # the SM120 patch set (patches/sglang-0.5.23/)
KIMI_PATCH_SET = f"sglang-{SGLANG_VERSION}-kimi"  # SGLang's kimi_k2 parser faults (patches/sglang-0.5.23-kimi/)


def patches_apply(target: str) -> str:
    """The one spelling of every fix that applies patch sets: ``kimi-serve patches apply TARGET``, ``TARGET`` being
    ``--profile P [--set K=V ...]`` as typed (every set of the profile, into the SGLang `up` serves it from) or
    ``--patch-set NAME`` (one set, into the SGLang of $KIMI_SERVE_SGLANG_PYTHON, else of kimi-serve's own Python),
    after ``--site-packages DIR`` or ``--python PY`` where the user named one."""
    return f"kimi-serve patches apply {target}"


def patch_set_args(name: str) -> str:
    """``--patch-set NAME``: the target of :func:`patches_apply` for one set."""
    return f"--patch-set {name}"
