"""The contract between a replica and its batching policy: the replica keeps time, the policy
owns the waiting queue, the running slots, the KV blocks and admission.

A policy is a :class:`~simulator.engine.batching.paged.PagedBatching` (a new one subclasses it:
the compiled replica calls its methods directly, not through a protocol's attribute lookups, ~4 %
of a run's CPU). The replica reads a few load views of it (for routing and the recorder) and runs
one cycle per iteration, ``plan`` -> (the replica waits the step time) -> ``apply``. A
:class:`Plan` is the iteration the policy formed: its slots, their new tokens, and the KV blocks
it moved to or from a slower tier (the replica charges their transfer, at the time the tier's law
gives: :mod:`simulator.engine.kv.tiers`). KV never crosses the contract.

Plain Python lists: a batch holds a few to a few hundred sequences, where one pass of Python
over a list costs less than the fixed overhead of the numpy calls it would replace.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simulator.analytic.step_time import ShapeFloats, batch_shape
from simulator.engine.request import Request

FloatArray = npt.NDArray[np.float64]


class Slot:
    """One batch slot: the request in it and its token counts (plain floats, held in the object)."""

    def __init__(self) -> None:
        self.request: Request | None = None
        self.context = 0.0  # tokens whose KV is cached
        self.prompt_left = 0.0  # prefill tokens still to process
        self.out_left = 0.0  # tokens still to emit
        self.blocks = 0.0  # KV blocks it holds
        self.order = 0  # admission sequence number


class Plan:
    """One iteration as a policy formed it: the slots it schedules (ascending) and their new tokens.

    The policy's slots do not change until it applies the plan, so the views below describe the
    planned iteration whenever they are read before it is applied
    (:meth:`~simulator.engine.batching.paged.PagedBatching.apply`).
    """

    def __init__(
        self,
        new_tokens: dict[int, float],
        table: Sequence[Slot],
        running: int,
        window: int | None,
        budget_left: int,
        swapped_blocks: float,
    ) -> None:
        ids = self.ids = sorted(new_tokens)  # the scheduled slots, ascending
        self.new = [new_tokens[slot] for slot in ids]  # their new tokens (each > 0)
        states = self.states = [table[slot] for slot in ids]  # their slots (apply changes them)
        self.context = [state.context for state in states]  # tokens each holds in KV before the iteration
        self.decoding = [state.prompt_left == 0.0 for state in states]  # which of them decode
        self.sequences = len(self.ids)
        self.decodes = self.decoding.count(True)
        self.running = running  # sequences holding a slot (scheduled or not)
        self.budget_left = budget_left  # tokens of the iteration's budget left unused
        self.swapped_blocks = swapped_blocks  # KV blocks moved to or from a slower tier, charged to this iteration
        self.window = window

    @property
    def empty(self) -> bool:
        return self.sequences == 0

    @property
    def all_decoding(self) -> bool:
        """Every scheduled sequence decodes (no prefill chunk in the iteration)."""
        return self.decodes == self.sequences

    @property
    def decode_context(self) -> FloatArray:
        """Tokens in the KV cache of each decoding sequence."""
        return np.array([c for c, decoding in zip(self.context, self.decoding) if decoding])

    @property
    def shape(self) -> ShapeFloats:
        """What the step-time model needs of this iteration (:func:`~simulator.analytic.step_time.batch_shape`)."""
        return batch_shape(self.new, self.context, self.window)

    @property
    def prefill_tokens(self) -> float:
        return float(sum(new for new, decoding in zip(self.new, self.decoding) if not decoding))

    @property
    def first_tokens(self) -> float:
        """Sequences whose prompt this iteration completes (each emits its first token)."""
        return float(sum(1 for state, new, decoding in zip(self.states, self.new, self.decoding)
                         if not decoding and state.prompt_left <= new))  # fmt: skip


class Applied:
    """What an applied iteration (or run of decode steps) produced (a compiled class: one is made
    every iteration, where a NamedTuple is built by Python code)."""

    def __init__(self, decode_tokens: list[float], tokens: float, completed: list[Request]) -> None:
        self.decode_tokens = decode_tokens  # tokens each decoding sequence emitted, in slot order
        self.tokens = tokens  # every token emitted, first tokens of finished prefills included
        self.completed = completed  # requests that emitted their last token, their slots freed
