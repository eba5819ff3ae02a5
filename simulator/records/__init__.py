"""The engine -> results contract: what a run leaves behind (:mod:`~simulator.records.store`) and how
levels and counters are bucketed (:mod:`~simulator.records.series`)."""
