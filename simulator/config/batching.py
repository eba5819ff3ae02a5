"""Batching policies a replica's scheduler runs (iteration-level or static)."""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Spec
from simulator.units import MAX_LATENCY_S, Bytes, BytesPerSecond, Seconds

PositiveInt = Annotated[int, Field(ge=1)]


class KVTierSpec(Spec):
    """A memory tier below the serving tier that holds evicted prefix KV (per replica).

    Named after a tier of the hardware profile (``host``, ``ddr``), it takes that tier's
    capacity and bandwidth times the replica's chips unless given; any other name (``ssd``,
    ``remote``) must give both (figures in :mod:`simulator.engine.kv.tiers`, whose ``kv_tier`` registry
    builds a tier of the kind its config class registered).
    """

    name: str = Field(description="a memory tier of the hardware profile, or a name of your own (ssd, remote)")
    capacity: Annotated[Bytes, Field(gt=0.0)] | None = Field(None, description="per replica; empty: the profile's")
    bandwidth: Annotated[BytesPerSecond, Field(gt=0.0)] | None = Field(
        None, description="per replica, to the serving tier; empty: the profile's x chips x efficiency"
    )
    latency: Annotated[Seconds, Field(ge=0.0, le=MAX_LATENCY_S)] = Field(
        0.0, description="fixed time of one load from the tier"
    )


class KVTiersSpec(Spec):
    """Prefix KV that outlives the serving tier: evicted blocks go down a tier instead of vanishing,
    and a prefix found below is loaded up when that is faster than computing it again."""

    tiers: list[KVTierSpec] = Field(min_length=1, description="fastest first")

    @model_validator(mode="after")
    def _distinct_and_ordered(self) -> KVTiersSpec:
        """Each tier named once; tiers that state their bandwidth fastest first (non-increasing),
        as evicted blocks go down the list and a load from a later tier is assumed no faster."""
        names = [tier.name for tier in self.tiers]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ValueError(f"tiers.{index}.name: {name!r} is also tier {names.index(name)}; each tier once")
        stated = [(i, t.bandwidth) for i, t in enumerate(self.tiers) if t.bandwidth is not None]
        for (before, faster), (index, slower) in itertools.pairwise(stated):
            if slower > faster:
                raise ValueError(
                    f"tiers.{index}.bandwidth: {slower:.4g} B/s is faster than tier {before} ({faster:.4g} B/s); "
                    "list the tiers fastest first"
                )
        return self


class BatchingSpec(Spec):
    """What every batching policy is given: caps per iteration and the KV block size.

    A policy is tagged by ``policy``; the engine builds it from its config class
    (``simulator.engine.batching.registry.batch_policy``, one registered builder per policy). Every cap
    left empty takes the deployment's serving stack's value (``stack_profiles/``).
    """

    policy: str
    max_batch_size: PositiveInt | None = Field(None, description="empty: the stack's")
    max_batched_tokens: PositiveInt | None = Field(None, description="empty: the stack's")
    kv_block_tokens: PositiveInt = 16
    kv_tiers: KVTiersSpec | None = Field(None, description="tiers below the serving tier for evicted prefix KV")

    @property
    def swaps(self) -> bool:
        """Whether preemption moves KV to a slower memory tier (which the scenario must have)."""
        return False


class ContinuousBatching(BatchingSpec):
    """Iteration-level batching (Orca, vLLM): sequences join and leave between iterations."""

    policy: Literal["continuous"] = "continuous"
    priority: Literal["decode-first", "prefill-first"] | None = Field(
        None,
        description="decode-first: running decodes go first, prefill chunks fill the token budget "
        "(Sarathi, vLLM V1); prefill-first: any pending prefill runs alone and decodes wait (vLLM V0); "
        "empty: the stack's",
    )
    chunked_prefill: bool | None = Field(None, description="split prompts across iterations; empty: the stack's")
    admission: Literal["on-demand", "reserve-full"] | None = Field(
        None,
        description="on-demand: KV allocated as it grows, preempt when it runs out; reserve-full: admit only "
        "when the whole prompt + output KV fits (never preempts); empty: the stack's",
    )
    preemption: Literal["recompute", "swap"] = Field(
        "recompute",
        description="when KV runs out the latest-admitted sequence is evicted: recompute re-prefills it later; "
        "swap moves its KV to the first of kv_tiers (else the next slower memory tier) and back, at that tier's "
        "bandwidth and latency",
    )

    @property
    def swaps(self) -> bool:
        return self.preemption == "swap"


class StaticBatching(BatchingSpec):
    """A batch forms when the replica is idle and runs to completion; arrivals wait for the next."""

    policy: Literal["static"] = "static"


Scheduler = Annotated[ContinuousBatching | StaticBatching, Field(discriminator="policy")]
