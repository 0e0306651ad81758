"""`kimi-serve capture` (docs/capture.md): the served model's exact tokens, one pre-tokenized record per prompt.

prompts.py reads the prompts file (pure), record.py turns one chat answer into a record or a reject (pure, the lossless
check through verify's reassembly), store.py owns the output files (append-only, fsync per record, resumable), run.py
sends the requests and keeps the books.
"""
