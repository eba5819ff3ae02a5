"""Steady-state latency and throughput of one deployment at a given concurrency.

A closed-form companion to the engine (which replaces it for loaded runs). Assumptions:

- ``C`` users in a closed loop with no think time, every request ``I`` prompt tokens and
  ``O`` output tokens; decoding sequences hold on average ``I + O/2`` tokens of context.
- Prefill is chunked by ``max_batched_tokens``; chunks of one prompt follow each other
  through the pipeline: ``prefill = pass(last) + sum(pass(others)) / stages``.
- TTFT at ``C`` is the prefill with the other users' decodes riding in the same passes.
- Each decode step also carries the other users' new prompts: ``(C - 1) * I / O`` prefill
  tokens per step (each of them starts one request per ``O`` of my tokens).
- Speculative decoding (gamma proposals, acceptance alpha) yields
  ``tau = (1 - alpha**(gamma+1)) / (1 - alpha)`` tokens per verify pass (Leviathan et al.
  2023, eq. 1); a step costs ``gamma * draft_step_fraction * decode pass + verify pass``.
- Per-user output tok/s is the decode rate ``1 / ITL`` (vLLM's 1/TPOT; Artificial
  Analysis's "output speed" after the first token); a 1-token answer has none. Aggregate
  output tok/s is ``C * O / (TTFT + (O - 1) * ITL)``.
- **Capacity.** At most ``M`` = :func:`saturation_concurrency` sequences run at once (the KV
  of ``M`` requests at full context ``I + O`` fits, and the batch cap). Above it, ``C - M``
  users wait: the replica serves ``M`` at a time, so its throughput is ``X = M / E2E(M)`` and,
  by the interactive response-time law with no think time, a request's response time is
  ``R = C / X = (C / M) E2E(M)``; the difference ``R - E2E(M)`` is queueing, added to TTFT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import BatchAggregates, CostModel, FloatArray, StepCostModel, StepTime
from simulator.config.base import Spec
from simulator.config.deployment import SpeculativeSpec
from simulator.errors import InfersimError

#: Most users the closed form is asked about (above the maximum it is queueing arithmetic).
MAX_QUERY_CONCURRENCY = 10**9
#: Longest request the closed form is asked about, in tokens (beyond any model's context).
MAX_QUERY_TOKENS = 10**8


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
    "fabric": "latency-bound on the on-chip fabric: each token crosses the cores holding its layer",
    "pipeline_hops": "latency-bound on chip-to-chip hops between pipeline stages",
    "fixed_latency": "latency-bound on fixed per-layer and per-step overheads (launches, syncs, schedule)",
}


def speculative_tokens_per_step(tokens_proposed: int, acceptance_rate: float) -> float:
    """Expected tokens emitted per verify pass.

    Examples
    --------
    >>> speculative_tokens_per_step(4, 0.0)
    1.0
    >>> round(speculative_tokens_per_step(3, 0.8), 4)
    2.952
    """
    alpha, gamma = acceptance_rate, tokens_proposed
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def draft_pass_s(cost: CostModel, context_tokens: FloatArray, window: int | None, spec: SpeculativeSpec) -> float:
    """Seconds the draft model takes to propose for every sequence of one verify pass.

    Parameters
    ----------
    cost
        The target's step-time model.
    context_tokens
        Tokens in the KV cache of each decoding sequence, shape (B,).
    window
        The model's sliding window (tokens), or None.
    spec
        Speculative decoding: ``gamma`` proposals, each draft step ``draft_step_fraction`` of a target step.

    Notes
    -----
    ``gamma * draft_step_fraction * t(decode pass of the B sequences)``: the draft runs
    ``gamma`` sequential decode steps, each a fixed fraction of the target's.
    """
    batch = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, window)
    return spec.tokens_proposed * spec.draft_step_fraction * float(cost.iteration_times(batch).total_s[0])


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


def _prefill_s(cost: StepCostModel, input_tokens: int, riding_decodes: int, context: float) -> float:
    """Makespan of a chunked prefill, with ``riding_decodes`` decodes in each pass."""
    chunk = cost.deployment.hardware.execution.max_batched_tokens.value
    chunk = max(1, chunk - riding_decodes)
    starts = np.arange(0, input_tokens, chunk)
    passes = []
    for start in starts:
        q = np.concatenate([[min(chunk, input_tokens - start)], np.ones(riding_decodes)])
        c = np.concatenate([[start], np.full(riding_decodes, context)])
        passes.append(cost.pass_time(q, c).total_s)
    return passes[-1] + sum(passes[:-1]) / max(1, min(cost.pipeline_stages, len(passes)))


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
        queueing = (concurrency / most - 1.0) * at_most.e2e_s
        return replace(at_most, concurrency=concurrency, ttft_s=at_most.ttft_s + queueing, queueing_s=queueing)
    cost = StepCostModel(deployment)
    window = deployment.model.attention.sliding_window
    users = max(1, concurrency)
    context = input_tokens + output_tokens / 2.0
    micro_batches = max(1, min(users, cost.pipeline_stages))
    riding = math.ceil((users - 1) / micro_batches)
    prefill_s = _prefill_s(cost, input_tokens, riding, context)

    spec = deployment.speculative
    new_tokens = np.full(users, spec.tokens_proposed + 1.0 if spec else 1.0)
    cached = np.full(users, context)
    interfering = (users - 1) * input_tokens / output_tokens if output_tokens else 0.0
    if interfering:
        new_tokens, cached = np.append(new_tokens, interfering), np.append(cached, input_tokens / 2.0)
    step = cost.iteration_times(BatchAggregates.of(new_tokens, cached, window)).step()
    tokens_per_step = 1.0
    if spec:
        _, draft = cost.cycle_time(users, context, 1.0)
        step = step.plus(draft.scaled(spec.tokens_proposed * spec.draft_step_fraction))
        tokens_per_step = speculative_tokens_per_step(spec.tokens_proposed, spec.acceptance_rate)
    return Estimate(
        deployment=deployment,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        concurrency=users,
        ttft_s=prefill_s,
        itl_s=step.total_s / tokens_per_step if output_tokens > 1 else None,
        decode_step=step,
        prefill_s=prefill_s,
        max_concurrency=most,
    )


def saturation_concurrency(deployment: Deployment, input_tokens: int, output_tokens: int) -> int:
    """Largest concurrency the KV budget and batch cap allow at full context ``I + O``."""
    return max(1, deployment.max_sequences(input_tokens + output_tokens))
