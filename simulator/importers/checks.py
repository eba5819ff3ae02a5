"""Laws an imported run must obey, checked before its numbers are trusted.

*Prefill floor.* Every request's first token needs its prompt prefilled: at least
``2 * active parameters`` FLOP per uncached prompt token (one multiply-add per weight; attention
adds more). When all requests are sent at once (``offline``), the last first token therefore
comes no sooner than ``sum(prompt tokens) * 2 * active params / (chips * peak)``, with ``peak`` the
chip's highest dense peak at any precision (so the floor is a lower bound whatever precision the
server used). A run whose slowest first token beats it served prompts from a prefix cache (for
example one warmed by an earlier run with the same prompts): its TTFTs are not those of a cold
server, and a simulation of a cold cache will not match them.
"""

from __future__ import annotations

from simulator.analytic.architecture import FLOPS_PER_MAC, active_params
from simulator.config.hardware import HardwareProfile
from simulator.config.model import ModelSpec
from simulator.importers.common import ImportedRun


def prefill_floor_s(model: ModelSpec, hardware: HardwareProfile, chips: int, prompt_tokens: float) -> float:
    """Seconds the prompts' matmuls need at least on ``chips`` chips at their highest peak (docstring)."""
    peak_flops = max(p.value for p in hardware.compute.peak.values())
    return prompt_tokens * FLOPS_PER_MAC * active_params(model) / (chips * peak_flops)


def cache_warning(run: ImportedRun, model: ModelSpec, hardware: HardwareProfile, chips: int | None) -> str:
    """Why an offline run's TTFTs beat the prefill floor ('' when they do not, or it cannot be checked)."""
    per = run.per_request
    if per is None or run.load is None or run.load.kind != "offline" or chips is None:
        return ""
    floor_s = prefill_floor_s(model, hardware, chips, float(per.input_tokens.sum()))
    slowest_s = float(per.ttft_s.max())
    if slowest_s >= floor_s:
        return ""
    return (f"{run.source}: every first token came within {slowest_s:.3g} s, but prefilling its "
            f"{int(per.input_tokens.sum()):,} prompt tokens on {chips} x {hardware.id} takes at least {floor_s:.3g} s "
            "at peak: the prompts were served from a prefix cache (an earlier run with the same prompts?), so "
            "its TTFTs are not a cold server's")  # fmt: skip
