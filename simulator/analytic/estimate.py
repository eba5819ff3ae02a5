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
  Analysis's "output speed" after the first token). Aggregate output tok/s is
  ``C * O / (TTFT + (O - 1) * ITL)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import BatchAggregates, StepCostModel, StepTime

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


@dataclass(frozen=True)
class Estimate:
    deployment: Deployment
    input_tokens: int
    output_tokens: int
    concurrency: int
    ttft_s: float
    itl_s: float
    decode_step: StepTime
    prefill_s: float

    @property
    def per_user_output_tok_s(self) -> float:
        return 1.0 / self.itl_s

    @property
    def e2e_s(self) -> float:
        return self.ttft_s + (self.output_tokens - 1) * self.itl_s

    @property
    def aggregate_output_tok_s(self) -> float:
        return self.concurrency * self.output_tokens / self.e2e_s

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


def estimate(deployment: Deployment, input_tokens: int, output_tokens: int, concurrency: int = 1) -> Estimate:
    """TTFT, ITL and throughputs of ``deployment`` at ``concurrency`` (closed loop)."""
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
        itl_s=step.total_s / tokens_per_step,
        decode_step=step,
        prefill_s=prefill_s,
    )


def saturation_concurrency(deployment: Deployment, input_tokens: int, output_tokens: int) -> int:
    """Largest concurrency the KV budget and batch cap allow at full context ``I + O``."""
    return max(1, deployment.max_sequences(input_tokens + output_tokens))
