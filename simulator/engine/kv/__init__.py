"""A replica's KV: the paged serving tier with its prefix cache (:mod:`~simulator.engine.kv.blocks`)
and the tiers below it, which own the time of every move between them
(:mod:`~simulator.engine.kv.tiers`)."""
