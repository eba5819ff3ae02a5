"""Steady-state latency and throughput of one deployment at a given concurrency.

A closed-form companion to the engine (which replaces it for loaded runs). Assumptions:

- ``C`` users in a closed loop with no think time, every request ``I`` prompt tokens and
  ``O`` output tokens; decoding sequences hold on average ``I + O/2`` tokens of context.
- Prefill is chunked by the replica's token budget (the stack's ``max_batched_tokens`` per
  attention rank, times the data-parallel ranks) less the decodes riding along; a stack that
  does not chunk runs the whole prompt in one iteration however many decodes ride along.
  The chunks run in successive iterations (a pipelined machine streams each chunk's tokens
  through its stages, :meth:`StepCostModel.iteration_times`).
- TTFT at ``C`` is ``W_step + P + P_shared + W_prompt``: ``P`` the prefill with the other
  ``C - 1`` users' decodes riding in its iterations, after the waits and beside the prompts
  below (all 0 at ``C = 1``, where the replica is idle when the request arrives), plus, on a
  hosted API, the request's time outside the replica (``Deployment.api_s``: network round trip
  and the provider's front end), which E2E carries too and the gaps between tokens do not.
  Requests reach the replica at the rate ``lambda = C / (E2E + api_s)`` (response-time law,
  the API's time acting as think time; ``E2E`` here without ``P_shared`` and ``W_prompt``).

  - **The iteration in progress** (``W_step``). A request arriving at phase ``u`` of an
    iteration of length ``S`` waits ``(1 - u) S`` for it to end. At a random time that is
    ``E[S^2] / (2 E[S])`` on average (the inspection paradox: ``S / 2`` for equal steps); but a
    closed-loop arrival is not random: it comes as its user's previous request completes, at
    the end of an iteration, when the next one has just been formed without it (the engine
    forms it at that instant; a server's overlap scheduler forms it ahead). So it waits that
    iteration whole, ``u = 0``: ``W_step = S(C - 1)``, the decode step of the other users
    (with the prompts riding in it, as every decode step has: interference below).
  - **Prompts that share its iteration** (``P_shared``). The prompts that arrive during that
    wait are admitted with it, into the same iteration. They arrive as the request does, at an
    iteration's end, as their users' previous requests complete: each of the other ``C - 1``
    users' completes in a given iteration independently (answers vary in length) with
    probability ``p = lambda W_step / (C - 1)``, so ``K ~ Binomial(C - 1, p)`` prompts come
    with it (``lambda W_step`` on average, about Poisson for many users). The iteration takes
    as many as the token budget ``B`` holds beside it, ``h = floor((B - I) / I)`` (0 for a
    prompt longer than ``B``): it runs ``j = 1 + min(K, h)`` prompts beside ``C - j``
    decodes, and ``P_shared = E[iter(j)] - P``, the expectation taken over whole iterations
    (``k`` up to ``lambda W_step + 12 sd + 24``, past which Bernstein's bound leaves below 1e-15;
    ``P(K = k)`` below ``1e-9`` left out, the rest renormalised). A step is not linear in its
    prompts (an MoE expert kernel's tile grows with the rows per expert), so neither the mean
    ``K`` nor each prompt's marginal time alone gives it: gpt-oss-120b on one H100 at 358
    users has ``lambda W_step = 2.8`` and an iteration of 1, 2, 3, 4 prompts beside the decodes
    of 56, 88, 107, 165 ms. The prompts that do not fit wait for a later iteration, which
    ``W_prompt`` below counts.
  - **Prompts ahead** (``W_prompt``). Prompts share each iteration's token budget ``B`` (the
    stack's, less the decodes riding along): a prompt of ``I <= B`` tokens takes ``I / B`` of
    its iteration's budget (prompts arriving together share one iteration); a longer one
    fills every iteration it spans (chunked prefill splits it into ``ceil(I / B)``; a stack
    that does not split it runs it alone). Its service time is ``s = P min(1, I / B)``.
    The budget is busy ``rho = lambda s`` and a prompt waits for those ahead of it as in an
    M/D/1 queue, ``W_prompt = rho s / (2 (1 - rho))``, at most ``(C - 1) s`` (every other
    user's prompt ahead; the bound is the closed loop's when ``rho >= 1``).
- **Prefill interference** as the engine batches it: while one user decodes its ``O - 1``
  tokens, the other ``C - 1`` users each prefill one prompt of ``n`` chunks. A
  decode-first stack puts a chunk into a decode iteration (the iteration then costs
  ``pass(decodes + chunk)``); a prefill-first stack runs it alone while decodes wait
  (``pass(chunk)``). Either adds ``r = (C - 1) n / (O - 1)`` chunks to each decode step on
  average, computed on whole iterations, never as fractional tokens inside the batch (which
  would inflate an MoE layer's distinct experts). A decode-first iteration carries ``K``
  chunks of a given position in their prompts: each other user's lands in it independently,
  as its prompt arrived (``P_shared`` above), so ``K ~ Binomial(C - 1, r_i / (C - 1))``, ``r_i
  = (C - 1) / (O - 1)`` the chunks of that position per step; at most ``b``, what the token
  budget holds, and ``K > b`` fill ``K / b`` iterations of ``b``. Each iteration is costed with
  all it carries and weighted by its count's probability (the same truncation as
  ``P_shared``), since a step is not linear in its tokens (an MoE expert kernel's tile grows
  with the rows per expert): at 358 users on gpt-oss-120b (``r = 2.8``) the step is 110 ms,
  where the two whole counts around ``r`` alone would give 103 ms (the engine's steps: 109 ms).
- Speculative decoding (:mod:`simulator.analytic.speculation`): a step is ``gamma`` draft
  passes plus one verify pass of ``gamma + 1`` tokens per sequence, and emits
  ``1 + sum_i prod_{j<=i} a_i`` tokens (``(1 - a^(gamma+1)) / (1 - a)`` at constant ``a``).
- Per-user output tok/s is the decode rate ``1 / ITL`` (vLLM's 1/TPOT; Artificial
  Analysis's "output speed" after the first token); a 1-token answer has none. Aggregate
  output tok/s is ``C * O / (TTFT + (O - 1) * ITL)``.
- **Capacity.** At most ``M`` = :func:`saturation_concurrency` sequences run at once (the KV
  of ``M`` requests at full context ``I + O`` fits, and the batch cap). Above it, ``C - M``
  users wait: the replica serves ``M`` at a time, so its throughput is ``X = M / E2E(M)`` and,
  by the interactive response-time law with no think time, a request's response time is
  ``R = C / X = (C / M) E2E(M)``; the difference ``R - E2E(M)`` is queueing, added to TTFT.
  A hosted API's time ``A`` is spent outside the replica, the law's think time: with
  ``S = E2E(M) - A`` at the replica, ``X = M / S`` and the queueing is
  ``max(0, (C / M - 1) S - A)`` (``A = 0`` without an API).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import BatchAggregates, FloatArray, StepCostModel, StepTime
from simulator.config.base import Spec
from simulator.errors import InfersimError

#: Most users the closed form is asked about (above the maximum it is queueing arithmetic).
MAX_QUERY_CONCURRENCY = 10**9
#: Longest request the closed form is asked about, in tokens (beyond any model's context).
MAX_QUERY_TOKENS = 10**8
#: Probability below which a number of prompts arriving or riding together is left out.
CO_ARRIVAL_NEGLIGIBLE = 1e-9
#: The statistics of a batch, in :class:`BatchAggregates`' order.
FIELDS = tuple(BatchAggregates.__dataclass_fields__)


class EstimateError(InfersimError):
    """A request the deployment cannot serve at all (longer than the context or the KV budget)."""


class EstimateQuery(Spec):
    """What ``estimate`` is asked: request lengths and a concurrency (or ``max``)."""

    input_tokens: Annotated[int, Field(ge=1, le=MAX_QUERY_TOKENS)]
    output_tokens: Annotated[int, Field(ge=1, le=MAX_QUERY_TOKENS)]
    concurrency: Annotated[int, Field(ge=1, le=MAX_QUERY_CONCURRENCY)] | Literal["max"] = 1


_WHY = {
    "weights_memory": "memory-bound: every step streams the weights from {tier}",
    "kv_memory": "memory-bound on the KV cache: attention reads every cached token from {tier}",
    "compute": "compute-bound: the matmuls saturate the achievable FLOP/s",
    "communication": "communication-bound: tensor-parallel all-reduces / all-to-alls between chips",
    "torus_hops": "latency-bound on torus hops: each collective crosses its slice chip by chip",
    "fabric": "latency-bound on the on-chip fabric: each token crosses the cores holding its layer",
    "pipeline_hops": "latency-bound on chip-to-chip hops between pipeline stages",
    "fixed_latency": "latency-bound on fixed per-layer and per-step overheads (launches, syncs, schedule)",
}


@dataclass(frozen=True)
class Estimate:
    """Closed-loop steady state; ``ttft_s`` includes ``queueing_s`` when capacity-limited."""

    deployment: Deployment
    input_tokens: int
    output_tokens: int
    concurrency: int
    ttft_s: float
    itl_s: float | None  # None for a 1-token answer: no inter-token interval exists
    decode_step: StepTime
    prefill_s: float
    max_concurrency: int
    queueing_s: float = 0.0

    @property
    def capacity_limited(self) -> bool:
        return self.concurrency > self.max_concurrency

    @property
    def running(self) -> int:
        """Sequences in the batch: the users, at most the maximum."""
        return min(self.concurrency, self.max_concurrency)

    @property
    def per_user_output_tok_s(self) -> float | None:
        return None if self.itl_s is None else 1.0 / self.itl_s

    @property
    def e2e_s(self) -> float:
        return self.ttft_s + (self.output_tokens - 1) * (self.itl_s or 0.0)

    @property
    def aggregate_output_tok_s(self) -> float:
        return self.concurrency * self.output_tokens / self.e2e_s

    def capacity_note(self) -> str:
        """Why the users above the maximum wait, in words ('' when none do)."""
        if not self.capacity_limited:
            return ""
        return (
            f"concurrency {self.concurrency} exceeds the {self.max_concurrency} sequences whose KV fits at "
            f"{self.input_tokens}+{self.output_tokens} tokens: {self.max_concurrency} run at once and the other "
            f"{self.concurrency - self.max_concurrency} wait, adding {self.queueing_s:.3g} s of queueing to TTFT "
            f"(response-time law R = N / X); speeds are those of {self.max_concurrency} running"
        )

    @property
    def bottleneck(self) -> str:
        return self.decode_step.bottleneck

    def explanation(self) -> str:
        parts = self.decode_step.components_s
        total = self.decode_step.total_s
        key = self.bottleneck
        share = parts[key] / total
        why = _WHY[key].format(tier=self.deployment.weights_tier.name)
        return f"decode is {why} ({share:.0%} of a {total * 1e3:.3g} ms pass)"


def prefill_chunks(cost: StepCostModel, input_tokens: int, riding_decodes: int) -> list[tuple[float, float]]:
    """(new tokens, cached tokens) of each chunk a prompt is prefilled in, beside ``riding_decodes``:
    chunks of the token budget the decodes leave, or (unchunked) the whole prompt in one
    iteration, as the engine's scheduler runs it however many decodes ride along."""
    if not cost.deployment.stack.chunked_prefill:
        return [(float(input_tokens), 0.0)]
    chunk = prefill_budget(cost, riding_decodes)
    return [(float(min(chunk, input_tokens - start)), float(start)) for start in range(0, input_tokens, chunk)]


def prefill_budget(cost: StepCostModel, riding_decodes: int) -> int:
    """Prompt tokens an iteration takes beside ``riding_decodes``: the replica's budget less the decodes."""
    return max(1, cost.deployment.max_batched_tokens - riding_decodes)


def _prefill_s(cost: StepCostModel, input_tokens: int, riding_decodes: int, context: float) -> float:
    """Seconds of a prompt's prefill: its chunks' iterations, one after another, each with
    ``riding_decodes`` decodes of ``context`` cached tokens in it (as the engine runs them)."""
    window = cost.deployment.model.attention.window
    total = 0.0
    for q, start in prefill_chunks(cost, input_tokens, riding_decodes):
        new = np.concatenate([[q], np.ones(riding_decodes)])
        cached = np.concatenate([[start], np.full(riding_decodes, context)])
        total += cost.iteration_times(BatchAggregates.of(new, cached, window)).step().total_s
    return total


def loaded_decode_step(cost: StepCostModel, users: int, input_tokens: int, output_tokens: int) -> StepTime:
    """Average decode step of one user among ``users`` (module docstring: interference, speculation)."""
    window = cost.deployment.model.attention.window
    context = input_tokens + output_tokens / 2.0
    decode_new = np.full(users, len(cost.accepted) + 1.0)
    decode_ctx = np.full(users, context)
    step = cost.iteration_times(BatchAggregates.of(decode_new, decode_ctx, window)).step()
    if cost.draft is not None:
        step = step.plus(cost.draft_times(decode_ctx).step())
    if users > 1 and output_tokens > 1:
        per_step = (users - 1) / (output_tokens - 1)
        prefill_first = cost.deployment.stack.priority == "prefill-first"
        for q, start in prefill_chunks(cost, input_tokens, users):
            if prefill_first:  # the chunk runs alone; the decodes wait for it
                extra = cost.pass_time([q], [start])
                step = step.plus(extra.scaled(per_step))
            else:  # the chunk rides in decode iterations, a Binomial count of them in each
                step = step.plus(_riding_chunks_s(cost, decode_new, decode_ctx, q, start, per_step))
    return step


def _riding_chunks_s(
    cost: StepCostModel, decode_new: FloatArray, decode_ctx: FloatArray, q: float, start: float, per_step: float
) -> StepTime:
    """What chunks of ``q`` tokens (from ``start``), ``per_step`` on average, add to a decode iteration:
    ``E[d(K)]`` with ``K ~ Binomial(C - 1, per_step / (C - 1))`` and ``d(j)`` the iteration with ``j`` such
    chunks less the iteration without, ``d(j) = (j / b) d(b)`` beyond the ``b`` the budget holds (module docstring)."""
    window = cost.deployment.model.attention.window
    most = max(1, prefill_budget(cost, decode_new.size) // max(1, math.ceil(q)))  # chunks the budget holds
    chance = co_arrivals(decode_new.size - 1, per_step)
    weight = chance[: most + 1].copy()
    if chance.size > most + 1:  # iterations full of chunks, as many as it takes
        weight[most] += float(chance[most + 1 :] @ np.arange(most + 1.0, chance.size)) / most
    chunks = np.flatnonzero(weight)
    decodes = BatchAggregates.of(decode_new, decode_ctx, window)
    batches = _batches((decodes, np.ones(chunks.size)), (BatchAggregates.of([q], [start], window), chunks))
    times = cost.iteration_times(decodes).components_s  # the iteration without
    with_chunks = cost.iteration_times(batches).components_s
    return StepTime({k: float(weight[chunks] @ (v - times[k][0])) for k, v in with_chunks.items()})


def _batches(*parts: tuple[BatchAggregates, npt.ArrayLike]) -> BatchAggregates:
    """Batches of ``n_i`` copies of each one-batch part ``a_i``, one entry per element of the counts:
    ``sum_i n_i a_i`` (every statistic is a sum over the batch's sequences)."""
    return BatchAggregates(*[sum(getattr(part, f) * np.asarray(n, dtype=np.float64) for part, n in parts)
                             for f in FIELDS])  # fmt: skip


def step_in_progress_s(cost: StepCostModel, users: int, input_tokens: int, output_tokens: int) -> float:
    """``W_step``: the iteration a closed-loop arrival finds just formed without it, the decode step
    of the other ``users - 1`` (module docstring)."""
    return loaded_decode_step(cost, users - 1, input_tokens, output_tokens).total_s


def prompts_sharing_s(
    cost: StepCostModel, users: int, input_tokens: int, context: float, prefill_s: float, arrivals: float
) -> float:
    """``P_shared = E[iter(1 + min(K, h))] - P``: the iteration of this prompt and the ``K ~ Binomial(users - 1,
    arrivals / (users - 1))`` that arrive with it, as many as the budget holds beside it (module docstring)."""
    others = users - 1
    beside = max(0, (prefill_budget(cost, others) - input_tokens) // input_tokens)
    chance = co_arrivals(others, arrivals)
    if chance.size > beside + 1:  # every K >= h fills the budget
        chance = np.append(chance[:beside], chance[beside:].sum())
    extra = np.flatnonzero(chance[1:]) + 1.0  # the prompts beside it, in the counts that occur
    if not extra.size:
        return 0.0
    window = cost.deployment.model.attention.window
    decode = BatchAggregates.of([1.0], [context], window)
    prompt = BatchAggregates.of([float(input_tokens)], [0.0], window)
    shared_s = cost.iteration_times(_batches((decode, others - extra), (prompt, 1.0 + extra))).total_s
    return float(chance[extra.astype(int)] @ (shared_s - prefill_s))


def co_arrivals(others: int, mean: float) -> FloatArray:
    """``P(K = k)`` for ``k = 0, 1, ...``, ``K ~ Binomial(others, mean / others)``: the prompts that reach the
    replica at the iteration end a request does, or ride in one decode iteration (module docstring).
    ``k`` runs to ``mean + 12 sd + 24`` (the tail beyond is below 1e-15); probabilities below
    :data:`CO_ARRIVAL_NEGLIGIBLE` are set to 0 (the trailing ones dropped) and the rest renormalised."""
    share = min(1.0, mean / others) if others > 0 else 0.0
    if share == 0.0:  # nobody else
        return np.ones(1)
    if share == 1.0:  # all of them
        return np.append(np.zeros(others), 1.0)
    top = min(others, math.ceil(mean + 12.0 * math.sqrt(mean) + 24.0))
    k = np.arange(top + 1, dtype=np.float64)
    choose = [math.lgamma(others + 1.0) - math.lgamma(j + 1.0) - math.lgamma(others - j + 1.0) for j in k.tolist()]
    pmf = np.exp(np.array(choose) + k * math.log(share) + (others - k) * math.log1p(-share))
    pmf[pmf < CO_ARRIVAL_NEGLIGIBLE] = 0.0
    normalised: FloatArray = np.trim_zeros(pmf / pmf.sum(), "b")
    return normalised


def prompts_ahead_s(cost: StepCostModel, users: int, input_tokens: int, prefill_s: float, rate: float) -> float:
    """``W_prompt``: waiting for the prompts ahead in the token budget, M/D/1 with service
    ``s = P min(1, I / B)`` at load ``rho = rate s``, at most ``(users - 1) s`` (module docstring)."""
    service_s = prefill_s * min(1.0, input_tokens / prefill_budget(cost, users - 1))
    busy = rate * service_s
    most = (users - 1) * service_s
    return most if busy >= 1.0 else min(busy * service_s / (2.0 * (1.0 - busy)), most)


def check_request(deployment: Deployment, input_tokens: int, output_tokens: int) -> None:
    """Refuse a request longer than the model's context or than one replica's whole KV budget."""
    if input_tokens < 1 or output_tokens < 1:
        raise EstimateError(f"a request needs at least 1 prompt and 1 output token, got {input_tokens} + "
                            f"{output_tokens}")  # fmt: skip
    tokens = input_tokens + output_tokens
    model = deployment.model
    if tokens > model.max_context_tokens:
        raise EstimateError(
            f"a request of {input_tokens:,} + {output_tokens:,} tokens exceeds {model.id}'s context window of "
            f"{model.max_context_tokens:,} tokens"
        )
    need = deployment.kv_bytes_for_context(tokens)
    if need > deployment.kv_budget_bytes:
        raise EstimateError(
            f"one request of {tokens:,} tokens needs {need / 1e9:.3g} GB of KV but {deployment.chips} x "
            f"{deployment.hardware.id} has {deployment.kv_budget_bytes / 1e9:.3g} GB for KV "
            f"({deployment.max_kv_tokens:,} tokens); use more chips or shorter requests"
        )


def estimate(
    deployment: Deployment, input_tokens: int, output_tokens: int, concurrency: int = 1, strict: bool = True
) -> Estimate:
    """TTFT, ITL and throughputs of ``deployment`` at ``concurrency`` (closed loop).

    Raises
    ------
    EstimateError
        If ``strict`` and one request does not fit the context window or the KV budget
        (predictors inside a run pass ``strict=False``: they rank, they do not admit).
    """
    if strict:
        check_request(deployment, input_tokens, output_tokens)
    most = saturation_concurrency(deployment, input_tokens, output_tokens)
    if concurrency > most:
        at_most = estimate(deployment, input_tokens, output_tokens, most, strict=False)
        service_s = at_most.e2e_s - deployment.api_s  # at the replica (module docstring)
        queueing = max(0.0, (concurrency / most - 1.0) * service_s - deployment.api_s)
        return replace(at_most, concurrency=concurrency, ttft_s=at_most.ttft_s + queueing, queueing_s=queueing)
    cost = StepCostModel(deployment)
    users = max(1, concurrency)
    context = input_tokens + output_tokens / 2.0
    prefill_s = _prefill_s(cost, input_tokens, users - 1, context)
    step = loaded_decode_step(cost, users, input_tokens, output_tokens)
    tokens_per_step = cost.tokens_per_step
    itl_s = step.total_s / tokens_per_step if output_tokens > 1 else None
    ttft_s = prefill_s
    if users > 1:
        wait_s = step_in_progress_s(cost, users, input_tokens, output_tokens)
        ttft_s += wait_s
        # requests per second reaching the replica; a hosted API's time is the users' think time
        rate = users / (ttft_s + (output_tokens - 1) * (itl_s or 0.0) + deployment.api_s)
        ttft_s += prompts_sharing_s(cost, users, input_tokens, context, prefill_s, rate * wait_s)
        ttft_s += prompts_ahead_s(cost, users, input_tokens, prefill_s, rate)
    return Estimate(
        deployment=deployment,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=users,
        ttft_s=ttft_s + deployment.api_s,
        itl_s=itl_s,
        decode_step=step,
        prefill_s=prefill_s,
        max_concurrency=most,
    )


def saturation_concurrency(deployment: Deployment, input_tokens: int, output_tokens: int) -> int:
    """Largest concurrency the KV budget and batch cap allow at full context ``I + O``."""
    return max(1, deployment.max_sequences(input_tokens + output_tokens))
