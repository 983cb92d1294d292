"""Reference sets: prompts and answers computed on trusted hardware, one set per fingerprint."""
