"""Which batching policy a replica runs, chosen by the class of its scheduler's config.

A new policy is a config class (:class:`~simulator.config.batching.BatchingSpec`), a subclass of
:class:`~simulator.engine.batching.paged.PagedBatching` and one builder registered with
``@batch_policy.register``, in the policy's own module; the bundled ones register
when :mod:`simulator.engine.batching` is imported.
"""

from __future__ import annotations

import functools

from simulator.engine.batching.paged import PagedBatching
from simulator.engine.kv.blocks import BlockManager
from simulator.plan.resolve import BackendPlan


@functools.singledispatch
def batch_policy(spec: object, backend: BackendPlan, blocks: BlockManager) -> PagedBatching:
    """The batching policy one replica of ``backend`` runs over its KV ``blocks``."""
    raise TypeError(f"no batching policy is registered for {type(spec).__name__} (@batch_policy.register one)")
