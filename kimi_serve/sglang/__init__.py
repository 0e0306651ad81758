"""Facts about SGLang itself: where an install lives and its version (found without importing it), the SM120
platform facts, and the probe that runs inside an SGLang interpreter. Depends on core only."""
