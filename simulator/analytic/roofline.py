"""Roofline bounds a student can check by hand: ridge point, ceilings, lower bounds.

Decode is memory-bound below the ridge point: at batch B with bf16 weights and no KV, a
step does ``2 P B`` FLOPs over ``2 P`` bytes, an arithmetic intensity of ``B`` FLOP/byte; it
turns compute-bound at ``B* = peak FLOP/s / bandwidth`` (about 295 for an H100's 989 TFLOP/s
over 3.35 TB/s).

Examples
--------
>>> round(ridge_point(989.4e12, 3.35e12))
295
>>> round(single_stream_ceiling(3.35e12, 8e9 * 2.0))
209
"""

from __future__ import annotations

from simulator.analytic.architecture import FLOPS_PER_MAC, active_group_params
from simulator.analytic.placement import Deployment
from simulator.analytic.precision import compute_path, matmul_precision


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Arithmetic intensity (FLOP/byte) where memory and compute time are equal."""
    return peak_flops / bandwidth


def single_stream_ceiling(bandwidth: float, bytes_per_token: float) -> float:
    """Tokens/s a batch-1 decode can reach at most: bandwidth / bytes moved per token."""
    return bandwidth / bytes_per_token


def active_weight_bytes(deployment: Deployment) -> float:
    """Weight bytes one token reads (all chips together): each group's active parameters at its precision."""
    active = active_group_params(deployment.model)
    return sum(params * deployment.bytes_per_param(group) for group, params in active.items())


def deployment_ceiling_tok_s(deployment: Deployment) -> float:
    """Single-stream ceiling of a deployment at *peak* bandwidth of all its chips."""
    return single_stream_ceiling(
        deployment.chips * deployment.weights_tier.bandwidth.value, active_weight_bytes(deployment)
    )


def deployment_ridge_point(deployment: Deployment) -> float:
    """Ridge point of the tier and matmul precision this deployment runs at (FLOP/byte)."""
    hw = deployment.hardware
    precision = matmul_precision(hw, deployment.weights, deployment.activations)
    return ridge_point(hw.compute.peak[precision].value, deployment.weights_tier.bandwidth.value)


def decode_lower_bound_s(deployment: Deployment, batch_size: int) -> tuple[float, float]:
    """(memory, compute) lower bounds of one decode pass, without KV, at achievable rates.

    A pass reads at least the active weights once, spread at best evenly over the ``n`` chips of
    a pipeline stage (``tp`` x attention ranks) working in parallel, and does ``2 * active
    params * B`` FLOPs over them, each group at its own matmul rate:
    ``t >= active bytes / (n * bw * eff)`` and ``t >= sum_g 2 P_g B / (n * rate_g)``.
    """
    hw, d = deployment.hardware, deployment
    chips = d.tensor_parallel * d.attention_dp
    tier = d.weights_tier
    bandwidth = tier.bandwidth.value * tier.efficiency.value
    memory_s = active_weight_bytes(d) / (chips * bandwidth)
    compute_s = sum(
        FLOPS_PER_MAC * params * batch_size / (chips * compute_path(hw, d.precision[group], d.activations).flops(hw))
        for group, params in active_group_params(d.model).items()
    )
    return memory_s, compute_s
