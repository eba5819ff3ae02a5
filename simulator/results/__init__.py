"""Downstream of the engine: the metrics derived from a run's records (:mod:`simulator.records.store`)
and the typed run summary they fill; nothing here imports the engine."""
