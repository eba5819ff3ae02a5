"""Batch formation: which sequences run in the next iteration, and with how many tokens.

- :mod:`~simulator.engine.batching.protocol`: what a policy and its replica hand each other
  (:class:`Plan`, :class:`Slot`, :class:`Applied`);
- :mod:`~simulator.engine.batching.queue` and :mod:`~simulator.engine.batching.slots`: the waiting
  queue and the running set;
- :mod:`~simulator.engine.batching.paged`: the policy a replica runs, the machinery every policy
  shares (paged KV, admission, preemption) and subclasses;
- one module per policy (:mod:`~simulator.engine.batching.continuous`,
  :mod:`~simulator.engine.batching.static`), each registering its builder with
  :func:`~simulator.engine.batching.registry.batch_policy` when this package is imported.
"""

# The bundled policies register their builders when imported.
from simulator.engine.batching import continuous, static  # noqa: F401
