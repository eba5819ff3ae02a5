"""Bytes per stored element for each numeric precision, and the precision a matmul runs in.

``mxfp4`` (OCP microscaling): 4-bit E2M1 elements plus one shared 8-bit scale per block of
32, i.e. 4 + 8/32 = 4.25 bits per element.
"""

from __future__ import annotations

from simulator.config.base import Precision
from simulator.config.hardware import HardwareProfile

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

# A chip without a native engine for a narrow format dequantises to the next wider one.
_WIDER: dict[Precision, Precision] = {
    "mxfp4": "fp4",
    "fp4": "fp8",
    "fp8": "bf16",
    "int8": "bf16",
    "fp16": "bf16",
    "bf16": "fp16",
}


def matmul_precision(hardware: HardwareProfile, weights: Precision, activations: Precision) -> Precision:
    """Precision the matrix engine runs in: the weights' if the chip has a peak for it,
    else the next wider format it does have, never narrower than the activations allow.

    Weight-only quantisation (e.g. mxfp4 weights on a chip with no fp4 engine) computes in
    a wider format: memory traffic shrinks, matmul FLOP/s do not rise.
    """
    peaks = hardware.compute.peak
    current: Precision | None = weights
    seen: set[Precision] = set()
    while current is not None and current not in seen:
        if current in peaks:
            return current
        seen.add(current)
        current = _WIDER.get(current)
    if activations in peaks:
        return activations
    return max(peaks, key=lambda p: peaks[p].value)
