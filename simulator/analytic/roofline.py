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

from simulator.analytic.architecture import FLOPS_PER_MAC, active_group_params, active_params
from simulator.analytic.placement import Deployment
from simulator.analytic.precision import matmul_precision


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

    A pass reads at least the active weights once, spread over ``tp`` chips that work in
    parallel, and does ``2 * active params * B`` FLOPs over them:
    ``t >= active bytes / (tp * bw * eff)`` and ``t >= 2 P_active B / (tp * peak * eff)``.
    """
    hw, tp = deployment.hardware, deployment.tensor_parallel
    tier = deployment.weights_tier
    bandwidth = tier.bandwidth.value * tier.efficiency.value
    precision = matmul_precision(hw, deployment.weights, deployment.activations)
    flops = hw.compute.peak[precision].value * hw.compute.efficiency.value
    memory_s = active_weight_bytes(deployment) / (tp * bandwidth)
    compute_s = FLOPS_PER_MAC * active_params(deployment.model) * batch_size / (tp * flops)
    return memory_s, compute_s
