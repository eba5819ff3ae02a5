"""Resolve a scenario: every lookup, placement, price, fit check and estimate, once, before a run.

(Being built up: the backend plans.)
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.analytic.economics import Pricing
from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import CostModel
from simulator.config.batching import Scheduler


@dataclass(frozen=True)
class BackendPlan:
    """One backend resolved: its deployment, the shape of each replica, its network distance, its price."""

    index: int
    name: str
    deployment: Deployment
    replicas: int
    scheduler: Scheduler
    batch_cap: int  # sequences per iteration
    max_batched_tokens: int  # tokens per iteration
    kv_block_tokens: int
    kv_blocks: int  # per replica
    max_tokens: int  # prompt + output one request may hold (KV or context)
    swap_s_per_block: float  # seconds to move one KV block to the next slower tier (0: no swapping)
    one_way_s: float  # half the network round trip
    pricing: Pricing
    prefix_caching: bool
    cost: CostModel

    @property
    def window(self) -> int | None:
        """The model's sliding window (tokens), or None."""
        return self.deployment.model.attention.sliding_window

    @property
    def decode_step_tokens(self) -> float:
        """Tokens a decode pass verifies per sequence: ``gamma + 1`` with speculative decoding, else 1."""
        spec = self.deployment.speculative
        return spec.tokens_proposed + 1.0 if spec else 1.0
