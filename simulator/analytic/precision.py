"""Bytes per stored element, the precision each tensor group is stored in, and how it is computed.

- ``mxfp4`` (OCP microscaling): 4-bit E2M1 elements plus one shared 8-bit scale per block of
  32, i.e. 4 + 8/32 = 4.25 bits per element.
- **Groups.** A checkpoint stores each tensor group (attention, dense FFN, experts, router,
  embedding, LM head) in its own precision: ``ModelSpec.precision_by_group`` over
  ``native_precision`` (gpt-oss: MXFP4 experts, everything else BF16). A deployment that asks
  for another weight precision quantises the matrix-multiply groups (attention, dense FFN,
  experts) and keeps the embedding, LM head and router as the checkpoint has them, as NVIDIA
  ModelOpt exports and the serving stacks do (``exclude_modules: [lm_head]``), unless the model
  profile documents a published variant of that precision (``quantized_checkpoints``), which is
  taken as published; explicit per-group overrides come last.
- **Compute path.** A weight precision the chip has a peak for runs natively. Otherwise it is
  dequantised on the fly (weight-only quantisation: W4A16 MXFP4 on Hopper via Triton, Marlin on
  Ampere): the matmul runs in the precision of the profile's ``weight_only`` path for it, or in
  the activations' precision, never faster than that precision's peak. Memory traffic shrinks
  with the storage format; FLOP/s do not rise.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.hardware import HardwareProfile
from simulator.config.model import LINEAR_GROUPS, TENSOR_GROUPS, ModelSpec, TensorGroup

MXFP4_BLOCK_ELEMENTS = 32  # OCP Microscaling Formats spec v1.0: block size 32
MXFP4_BITS = 4 + 8 / MXFP4_BLOCK_ELEMENTS

BYTES_PER_ELEMENT: dict[Precision, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "mxfp4": MXFP4_BITS / 8,
}


def group_precisions(model: ModelSpec, spec: DeploymentSpec) -> dict[TensorGroup, Precision]:
    """The precision every tensor group is stored in on this deployment (module docstring)."""
    chosen = {group: model.checkpoint_precision(group) for group in TENSOR_GROUPS}
    if spec.weights in model.quantized_checkpoints:  # a published variant: as it stores each group
        chosen |= model.quantized_checkpoints[spec.weights]
    elif spec.weights is not None and spec.weights != model.native_precision:
        chosen |= dict.fromkeys(LINEAR_GROUPS, spec.weights)
    return chosen | spec.weights_by_group


@dataclass(frozen=True)
class ComputePath:
    """How a weight precision is multiplied on a chip: in ``precision`` at ``efficiency`` of its peak."""

    precision: Precision
    efficiency: float
    native: bool

    def flops(self, hardware: HardwareProfile) -> float:
        """Achievable FLOP/s per chip on this path."""
        return hardware.compute.peak[self.precision].value * self.efficiency


def compute_path(hardware: HardwareProfile, weights: Precision, activations: Precision) -> ComputePath:
    """The matmul path of ``weights`` on ``hardware`` (module docstring).

    Examples
    --------
    On a chip with bf16 and fp8 engines, fp8 weights run natively and mxfp4 weights are
    dequantised to the activations' bf16 (weight-only), never to a faster format.
    """
    compute = hardware.compute
    if weights in compute.peak:
        return ComputePath(weights, compute.efficiency.value, native=True)
    if weights in compute.weight_only:
        path = compute.weight_only[weights]
        return ComputePath(path.compute, path.efficiency.value, native=False)
    fallback = activations if activations in compute.peak else max(compute.peak, key=lambda p: compute.peak[p].value)
    return ComputePath(fallback, compute.efficiency.value, native=False)


def matmul_precision(hardware: HardwareProfile, weights: Precision, activations: Precision) -> Precision:
    """Precision the matrix engine runs ``weights`` in (see :func:`compute_path`)."""
    return compute_path(hardware, weights, activations).precision
