"""Validation of a profile, fast to slow: deployment rules, host facts, SGLang's own parser tier, the patch layer,
the contract dry run, doctor, and the report `check` prints."""
