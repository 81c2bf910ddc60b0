"""kvcalc: exact KV-cache memory and attention cost calculator."""
