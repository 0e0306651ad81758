"""The contract check's suite names: the one home of them (verify runs them; the profile schema, `verify --suite`
and the monitor timer offer them)."""

QUICK = "quick"
FULL = "full"  # quick + the raw /generate probes + the lossless check
RAW = "raw"  # /generate only (verify/raw.py)
SUITES = (QUICK, FULL, RAW)
MONITOR_SUITES = (QUICK, FULL)  # what the verify timer may run on a serving box
