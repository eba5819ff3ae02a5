"""Batch formation: which sequences run in the next iteration, and with how many tokens.

- :mod:`~simulator.engine.batching.protocol`: the contract a replica talks to (:class:`BatchPolicy`,
  :class:`Plan`, :class:`Slot`, :class:`Applied`);
- :mod:`~simulator.engine.batching.queue` and :mod:`~simulator.engine.batching.slots`: the waiting
  queue and the running set;
- :mod:`~simulator.engine.batching.paged`: the machinery the bundled policies share (paged KV,
  admission, preemption);
- one module per policy (:mod:`~simulator.engine.batching.continuous`,
  :mod:`~simulator.engine.batching.static`), each registering its builder with
  :func:`~simulator.engine.batching.registry.batch_policy` when this package is imported.
"""

# The bundled policies register their builders when imported.
from simulator.engine.batching import continuous, static  # noqa: F401
