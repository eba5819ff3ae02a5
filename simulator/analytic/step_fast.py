"""The step-time model of :mod:`simulator.analytic.step_time`, evaluated the fast way for the engine.

No physics of its own: every number comes from the reference model's methods. Of a pass
(:meth:`~simulator.analytic.step_time.StepCostModel.pass_terms`), only the attention core (full
and windowed layers, :meth:`~simulator.analytic.step_time.StepCostModel.core_row`) depends on
the tokens a batch *holds*; every other term
(:meth:`~simulator.analytic.step_time.StepCostModel.shape_terms`: weights, projections, FFN and
MoE rows, LM head, all-reduces, all-to-alls, pipeline hops, fabric, fixed latency) and the
micro-batch count ``m = clip(tokens, 1, stages)`` depend on the batch's ``tokens`` and
``sequences`` alone. So for one iteration

    total(batch) = shape_terms(tokens / m, sequences / m) + core rows(held / m, pairs / m)

where the first part is computed once per ``(tokens, sequences)`` and cached (a bounded cache: a
decode batch of ``n`` sequences is one key for every step it runs), and the core rows are a
handful of float operations per step. The reference model's shape terms depend on its deployment
alone, so the cache outlives a run: the reference models of equal deployments share it
(:func:`shape_cache`), and a plan's candidates that hold the same backend compute each prefill
shape once, not once a candidate (on ``scenarios/plan-coding-agents.yaml``, a candidate's CPU
fell ~12 %: a prefill chunk beside decodes is a new shape almost every iteration).

The engine costs one iteration in plain floats (:meth:`FastStepCost.iteration` of a
:class:`~simulator.analytic.step_time.BatchShape`), and a decode jump straight from its sequences'
contexts (:meth:`FastStepCost.decode_steps`, each step costed when the replica first asks for it:
:class:`DecodeSteps`): its steps share one shape, so their shape terms are one lookup, and each step
adds its core rows in plain floats (the tokens it holds:
:func:`~simulator.analytic.step_time.decode_held_full` and
:func:`~simulator.analytic.step_time.decode_held_window`, no list for what every step holds alike),
the same operations as its iteration's, so every step's seconds equal its iteration's to the last
bit. On one micro-batch whose windowed layers hold the same at every step (a GPU's decode), the
steps after the first are costed in one loop of the reference model's
(:meth:`~simulator.analytic.step_time.StepCostModel.decode_seconds`: the core row's terms, no
tuple, FLOPs or bytes a step; on ``scenarios/plan-coding-agents.yaml`` a jump-bound candidate's
CPU fell ~10 %). Where the windowed layers hold the same at every step (every sequence already
fills its window), their row is costed once for the jump
(:meth:`~simulator.analytic.step_time.StepCostModel.core_window`), and the jump's FLOPs and bytes
are affine in the step (:class:`JumpWork`): no list of them, their sum up to rounding. Each float a
jump keeps per step is an object to allocate, which is most of what a step costs once compiled
(on ``scenarios/plan-coding-agents.yaml``, one candidate's CPU fell 8 % without the lists of tokens
held and 9 % more without those of FLOPs and bytes). Plain floats, not arrays over the steps: a
jump runs ~100 steps, where numpy's set-up per call costs more than its loops save (measured with
the compiled engine on ``scenarios/plan-coding-agents.yaml``: a B300 jump of 108 steps of six
sequences 30 us as arrays, 17 us in floats; ``benchmarks/`` times whole runs). A subclass of the
reference model that overrides a mechanism (an operator, the MoE row, a collective, the core row,
:meth:`shape_terms`) is seen here, since these are its methods; one that overrides how a pass is
put together (:data:`ASSEMBLY`: :meth:`pass_terms`, :meth:`plus_core`, :meth:`core_beside`, ...)
is run through its array interface instead (:class:`ArrayCost`), with a warning. A cost model
that is not the reference one (a test double, another execution style) is used through its array
interface too.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from simulator.analytic.kept import Kept
from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import (
    SHARED_DEPLOYMENTS,
    BatchAggregates,
    BatchShape,
    CostModel,
    IterationCost,
    ShapeFloats,
    StepCostModel,
    decode_held_full,
    decode_held_window,
    deployment_cache,
)

FloatArray = npt.NDArray[np.float64]

#: Distinct (tokens, sequences) shapes kept; the cache is cleared when it fills (memory stays flat).
BASE_CACHE_SIZE = 1 << 16
ShapeCache = dict[tuple[float, float], tuple[float, float, float]]
_shared: Kept[Deployment, ShapeCache] = Kept(SHARED_DEPLOYMENTS)


def shape_cache(reference: StepCostModel) -> ShapeCache:
    """Where :class:`FastStepCost` keeps the shape terms of ``reference``
    (:func:`~simulator.analytic.step_time.deployment_cache`: shared by equal deployments; at most
    :data:`~simulator.analytic.step_time.SHARED_DEPLOYMENTS` full caches, ~18 MB each, are held)."""
    return deployment_cache(_shared, reference)


#: Methods that put a pass together: a subclass overriding one is not evaluated by :class:`FastStepCost`.
ASSEMBLY = (
    "pass_terms",
    "pass_times",
    "iteration_times",
    "plus_core",
    "micro_batches",
    "core_window",
    "core_beside",
)


class JumpWork:
    """The FLOPs and bytes of a decode jump's steps, summed over its first ``done`` (:meth:`totals`).

    Step by step (``flops``, ``bytes_moved``: one entry a step), each total correctly rounded
    (:func:`math.fsum`). Or *affine*, where the work grows by the same ``delta`` every step (the
    reference core rows' FLOPs and bytes are affine in the tokens a step holds, and a decode batch
    holds ``n`` more every step): the first ``d`` steps did ``d w_0 + delta d (d - 1) / 2``, which is
    their sum up to rounding, and the jump keeps no list of them (``flops`` and ``bytes_moved`` hold
    the first step's, the deltas the change a step)."""

    def __init__(
        self, flops: list[float], bytes_moved: list[float], affine: bool = False, delta_flops: float = 0.0,
        delta_bytes: float = 0.0,
    ) -> None:  # fmt: skip
        self.flops, self.bytes_moved, self.affine = flops, bytes_moved, affine
        self.delta_flops, self.delta_bytes = delta_flops, delta_bytes

    @classmethod
    def between(cls, steps: int, first: tuple[float, float], last: tuple[float, float]) -> JumpWork:
        """Affine work over ``steps`` steps from the first step's (FLOPs, bytes) and the last's."""
        per_step = 1.0 / float(steps - 1) if steps > 1 else 0.0
        return cls([first[0]], [first[1]], True, (last[0] - first[0]) * per_step, (last[1] - first[1]) * per_step)

    def totals(self, done: int) -> tuple[float, float]:
        """(FLOPs, bytes) of the first ``done`` steps."""
        if not self.affine:
            return math.fsum(self.flops[:done]), math.fsum(self.bytes_moved[:done])
        steps, pairs = float(done), float(done * (done - 1) // 2)
        return steps * self.flops[0] + pairs * self.delta_flops, steps * self.bytes_moved[0] + pairs * self.delta_bytes


class JumpTimes(NamedTuple):
    """The seconds of each step of a decode jump (a list, one float per step), its work, and the
    seconds of all its steps (:func:`running_sum` of ``total_s``)."""

    total_s: list[float]
    work: JumpWork
    elapsed_s: float


def running_sum(seconds: list[float]) -> float:
    """``seconds`` added left to right, as a clock that waits for each in turn reads (not :func:`math.fsum`)."""
    elapsed = 0.0
    for step_s in seconds:
        elapsed += step_s
    return elapsed


class IterationTimes(NamedTuple):
    """Seconds between iterations, and the FLOPs and bytes all chips did, one entry per iteration."""

    total_s: FloatArray
    flops: FloatArray
    bytes_moved: FloatArray


@mypyc_attr(allow_interpreted_subclasses=True)  # a power cap's CappedCost (simulator.analytic.power) builds on it
class EngineCost:
    """What a replica asks of its step-time model: :class:`~simulator.analytic.step_time.CostModel`,
    plus one iteration in plain floats and a decode jump costed as far as asked (:class:`JumpSteps`).
    A base class, not a protocol: the compiled replica calls its methods directly."""

    accepted: tuple[float, ...]

    def iteration(self, shape: ShapeFloats) -> tuple[float, float, float]:  # pragma: no cover - abstract
        """(seconds, FLOPs, bytes) of one iteration of this shape (a :class:`BatchShape` or its floats)."""
        raise NotImplementedError

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:  # pragma: no cover - abstract
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes."""
        raise NotImplementedError

    def decode_steps(
        self, context_tokens: Sequence[float], steps: int, window: int | None
    ) -> JumpSteps:  # pragma: no cover - abstract
        """The ``steps`` decode steps of sequences holding ``context_tokens``, costed as far as asked."""
        raise NotImplementedError

    def draft_s(self, context_tokens: FloatArray) -> float:  # pragma: no cover - abstract
        """Seconds the draft takes to propose for decoding sequences holding ``context_tokens``."""
        raise NotImplementedError


class FastStepCost(EngineCost):
    """:class:`StepCostModel`'s ``iteration_times`` and ``draft_s``, evaluated as described above."""

    def __init__(self, reference: StepCostModel) -> None:
        self.reference = reference
        self.accepted = reference.accepted
        self.draft = FastStepCost(reference.draft) if reference.draft is not None else None
        self.draft_window = reference.draft.deployment.model.attention.window if reference.draft else None
        self._base = shape_cache(reference)
        #: whether the core row is the reference's, whose FLOPs and bytes are affine in the tokens held
        self.affine_core = not (overrides(reference, "core_row") or overrides(reference, "core_terms"))

    def _base_of(self, tokens: float, sequences: float, m: float) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of the reference's :meth:`shape_terms` of one micro-batch of this shape (cached)."""
        key = (tokens, sequences)
        hit = self._base.get(key)
        if hit is not None:
            return hit
        if m != 1.0:
            tokens, sequences = tokens * (1.0 / m), sequences * (1.0 / m)
        terms = self.reference.shape_terms(tokens, sequences)
        base = (terms.total_s, terms.flops, terms.moved)
        if len(self._base) >= BASE_CACHE_SIZE:
            self._base.clear()
        self._base[key] = base
        return base

    def iteration_times(self, batch: BatchAggregates) -> IterationTimes:
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes (see module)."""
        statistics = zip(*[getattr(batch, name).tolist() for name in BatchShape._fields], strict=True)
        columns = zip(*[self.iteration(BatchShape(*shape)) for shape in statistics], strict=True)
        return IterationTimes(*[np.array(column, dtype=np.float64) for column in columns])

    def decode_steps(self, context_tokens: Sequence[float], steps: int, window: int | None) -> DecodeSteps:
        """``steps`` decode steps of a fixed batch (tokens held: :func:`decode_held_full`,
        :func:`decode_held_window`), costed as far as the replica asks (:class:`DecodeSteps`)."""
        return DecodeSteps(self, context_tokens, steps, window)

    def iteration(self, shape: ShapeFloats) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one iteration, in plain floats."""
        tokens, sequences, held_full, held_window, pairs_full, pairs_window = shape
        return self._iteration(tokens, sequences, held_full, pairs_full, held_window, pairs_window)

    def _iteration(
        self, tokens: float, sequences: float, held_full: float, pairs_full: float, held_window: float,
        pairs_window: float,
    ) -> tuple[float, float, float]:  # fmt: skip
        """(seconds, FLOPs, bytes) of one iteration: the cached shape terms of its micro-batch plus
        the attention core, every micro-batch's work counted (see module)."""
        m = self.reference.micro_batches(tokens)
        return self._plus_core(m, self._base_of(tokens, sequences, m), tokens, held_full, pairs_full,
                               self._window(m, tokens, held_window, pairs_window))  # fmt: skip

    def _window(
        self, m: float, tokens: float, held_window: float, pairs_window: float
    ) -> tuple[float, float, float] | None:  # fmt: skip
        """The windowed layers' attention core of a micro-batch's share (None without windowed layers)."""
        if m != 1.0:
            scale = 1.0 / m
            tokens, held_window, pairs_window = tokens * scale, held_window * scale, pairs_window * scale
        return self.reference.core_window(tokens, held_window, pairs_window)

    def _plus_core(
        self, m: float, base: tuple[float, float, float], tokens: float, held_full: float, pairs_full: float,
        window: tuple[float, float, float] | None,
    ) -> tuple[float, float, float]:  # fmt: skip
        """(seconds, FLOPs, bytes) of one iteration of ``m`` micro-batches whose shape terms are
        ``base`` (:meth:`_base_of`): plus the attention core of a micro-batch's share, its windowed
        layers' ``window`` (:meth:`_window`)."""
        base_s, base_flops, base_moved = base
        if m != 1.0:
            scale = 1.0 / m
            tokens, held_full, pairs_full = tokens * scale, held_full * scale, pairs_full * scale
        core_s, core_flops, core_moved = self.reference.core_beside(tokens, held_full, pairs_full, window)
        return base_s + core_s, (base_flops + core_flops) * m, (base_moved + core_moved) * m

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds of one step's ``gamma`` draft passes (0 without speculative decoding)."""
        if self.draft is None:
            return 0.0
        decode = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, self.draft_window)
        return float(self.draft.iteration_times(decode).total_s[0]) * len(self.accepted)


class JumpSteps:
    """A decode jump's ``steps`` steps, costed as far as asked (:meth:`extend`): the seconds of each
    step costed so far (``total_s``), their running sum (``elapsed_s``, :func:`running_sum`), and the
    work of the jump (:meth:`work`). This base holds steps costed before it was made."""

    def __init__(self, steps: int, total_s: list[float], elapsed_s: float, work: JumpWork | None = None) -> None:
        self.steps, self.total_s, self.elapsed_s = steps, total_s, elapsed_s
        self._work = work

    def extend(self, upto: int) -> None:
        """Cost the steps up to ``upto`` (of ``steps``) in all; the rest stays uncosted."""

    def work(self) -> JumpWork:
        """The FLOPs and bytes of the jump (:class:`JumpWork`; its first ``done`` steps need only be costed)."""
        assert self._work is not None
        return self._work

    def times(self) -> JumpTimes:
        """Every step, costed."""
        self.extend(self.steps)
        return JumpTimes(self.total_s, self.work(), self.elapsed_s)


class DecodeSteps(JumpSteps):
    """:meth:`FastStepCost.decode_steps`: the shape terms once, the core rows step by step (module
    docstring), each step costed when first asked for. The work is affine (:class:`JumpWork`)
    where the windowed layers hold the same at every step and the core row is the reference's: from
    the first step's and the last's, the last costed on its own when the jump ends before it."""

    def __init__(self, cost: FastStepCost, context_tokens: Sequence[float], steps: int, window: int | None) -> None:
        super().__init__(steps, [], 0.0)
        self.cost = cost
        n = self.n = float(len(context_tokens))
        m = self.m = cost.reference.micro_batches(n)  # every step of the jump has the same shape
        self.base = cost._base_of(n, n, m)
        self.total = float(sum(context_tokens))
        windowed = decode_held_window(context_tokens, steps, window)
        self.varying = windowed if isinstance(windowed, list) else None
        self.alike = isinstance(windowed, float)  # every step's windowed layers hold the same: cost them once
        self.same_window = cost._window(m, n, windowed, windowed) if isinstance(windowed, float) else None
        self.affine = self.varying is None and cost.affine_core
        #: whether the steps after the first are costed in one loop (:meth:`StepCostModel.decode_seconds`):
        #: affine work, one micro-batch, windowed layers alike at every step (or none)
        self.fused = self.affine and m == 1.0 and (self.alike or cost.reference.core_counts[1] == 0.0)
        self.window_s = self.same_window[0] if self.same_window is not None else None
        self.flops: list[float] = []
        self.moved: list[float] = []
        self.first = (0.0, 0.0)

    def _step(self, j: int) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of step ``j``."""
        cost, m, n = self.cost, self.m, self.n
        full = decode_held_full(self.total, n, j)
        if self.alike:
            core_window = self.same_window
        else:
            held_window = full if self.varying is None else self.varying[j]
            core_window = cost._window(m, n, held_window, held_window)
        return cost._plus_core(m, self.base, n, full, full, core_window)

    def extend(self, upto: int) -> None:
        total_s, elapsed, affine = self.total_s, self.elapsed_s, self.affine
        start, stop = len(total_s), min(upto, self.steps)
        alone = min(stop, 1) if self.fused else stop  # fused, the first step alone: its work starts the affine sum
        for j in range(start, alone):
            seconds, step_flops, step_moved = self._step(j)
            total_s.append(seconds)
            elapsed += seconds
            if not affine:
                self.flops.append(step_flops)
                self.moved.append(step_moved)
            elif j == 0:
                self.first = (step_flops, step_moved)
        if alone < stop:
            elapsed = self.cost.reference.decode_seconds(self.base[0], self.n, self.total, self.window_s,
                                                         (max(start, alone), stop), total_s, elapsed)  # fmt: skip
        self.elapsed_s = elapsed

    def work(self) -> JumpWork:
        if not self.affine:
            return JumpWork(self.flops, self.moved)
        _, last_flops, last_moved = self._step(self.steps - 1)
        return JumpWork.between(self.steps, self.first, (last_flops, last_moved))


class StretchedSteps(JumpSteps):
    """A jump's steps each ``stretch`` times as long (a power cap, a straggler), costed as ``steps`` is."""

    def __init__(self, steps: JumpSteps, stretch: float) -> None:
        super().__init__(steps.steps, [], 0.0)
        self.inner, self.stretch = steps, stretch

    def extend(self, upto: int) -> None:
        self.inner.extend(upto)
        total_s, elapsed, stretch = self.total_s, self.elapsed_s, self.stretch
        for seconds in self.inner.total_s[len(total_s) :]:
            stretched = seconds * stretch
            total_s.append(stretched)
            elapsed += stretched
        self.elapsed_s = elapsed

    def work(self) -> JumpWork:
        return self.inner.work()


class ArrayCost(EngineCost):
    """Any :class:`~simulator.analytic.step_time.CostModel` as an :class:`EngineCost`: one iteration
    is a batch of one entry."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.accepted = cost.accepted

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        return self.cost.iteration_times(batch)

    def draft_s(self, context_tokens: FloatArray) -> float:
        return self.cost.draft_s(context_tokens)

    def decode_steps(self, context_tokens: Sequence[float], steps: int, window: int | None) -> JumpSteps:
        times = self.cost.iteration_times(BatchAggregates.decode_steps(context_tokens, steps, window))
        total_s = times.total_s.tolist()
        return JumpSteps(
            steps, total_s, running_sum(total_s), JumpWork(times.flops.tolist(), times.bytes_moved.tolist())
        )

    def iteration(self, shape: ShapeFloats) -> tuple[float, float, float]:
        times = self.cost.iteration_times(BatchAggregates(*np.array(shape, dtype=np.float64)[:, None]))
        return float(times.total_s[0]), float(times.flops[0]), float(times.bytes_moved[0])


def reassembled(cost: StepCostModel) -> list[str]:
    """The methods of :data:`ASSEMBLY` a subclass of the reference model overrides."""
    return [name for name in ASSEMBLY if overrides(cost, name)]


def overrides(cost: StepCostModel, method: str) -> bool:
    """Whether ``cost`` is of a subclass of the reference model with its own ``method``."""
    return getattr(type(cost), method) is not getattr(StepCostModel, method)


def engine_cost(cost: CostModel) -> EngineCost:
    """The reference model (or a subclass changing only mechanisms) through :class:`FastStepCost`;
    any other cost model as it is, with a warning for a subclass that reassembles a pass."""
    if isinstance(cost, StepCostModel):
        overridden = reassembled(cost)
        if not overridden:
            return FastStepCost(cost)
        warnings.warn(
            f"{type(cost).__name__} overrides {', '.join(overridden)}: the engine runs it through its array "
            "interface (slower), not the fast path",
            stacklevel=2,
        )
    return ArrayCost(cost)
