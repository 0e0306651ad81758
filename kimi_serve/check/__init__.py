"""Validation of a profile, fast to slow: deployment rules, the host layer (facts from :mod:`kimi_serve.host`),
SGLang's own parser tier, the patch layer, the contract dry run, launch resolution, and the report `check` prints."""
