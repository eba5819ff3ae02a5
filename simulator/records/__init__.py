"""The engine -> results contract: what a run leaves behind (records) and how levels and counters are bucketed (series)."""
