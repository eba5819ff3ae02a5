"""Laws of the SRAM machines' step model: wafer-scale (Cerebras), LPU (Groq), dataflow (SambaNova)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.architecture import FLOPS_PER_MAC, active_params
from simulator.analytic.estimate import estimate
from simulator.analytic.step_time import StepCostModel
from simulator.config.loading import Catalog
from tests.conftest import deploy

SRAM = ("cerebras-cs3", "groq-lpu", "sambanova-sn40l")
DENSE = ("llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b")


@pytest.mark.parametrize("model_id", DENSE)
def test_a_wafer_reads_each_layer_at_its_regions_share_of_the_sram_bandwidth(catalog: Catalog, model_id: str) -> None:
    """A layer owns ``1 / layers per wafer`` of its wafer, so a token crossing every layer reads each
    wafer's weights once per layer it holds: the pass's weight time >= ``num_layers * weight bytes per
    wafer / peak bandwidth`` (Llama-3.1-70B on 4 wafers: 80 x 35 GB / 21 PB/s = 134 us)."""
    d = deploy(catalog, "cerebras-cs3", model_id)
    step = StepCostModel(d).pass_time([1.0], [512.0])
    per_wafer = d.weight_bytes / d.chips
    assert step.components_s["weights_memory"] >= d.model.num_layers * per_wafer / d.weights_tier.bandwidth.value


@pytest.mark.parametrize("hardware_id", SRAM)
@pytest.mark.parametrize("model_id", ["llama-3.1-8b", "llama-3.1-70b"])
def test_a_longer_prompt_takes_at_least_its_extra_flops_at_the_chips_peak(
    catalog: Catalog, hardware_id: str, model_id: str
) -> None:
    """TTFT(4,000) - TTFT(1,000) >= 2 P x 3,000 / (chips x peak): the extra prompt tokens' matmuls run on
    the chips that hold the layers, at most at their peak, whatever the pipeline or the API adds (the
    pass latencies and API time are the same for both prompts and cancel)."""
    d = deploy(catalog, hardware_id, model_id)
    short, long = (estimate(d, prompt, 100, 1).ttft_s for prompt in (1000, 4000))
    peak = d.hardware.compute.peak["bf16"].value
    assert long - short >= FLOPS_PER_MAC * active_params(d.model) * 3000 / (d.chips * peak)


def test_the_launch_release_adds_its_per_layer_time_to_every_pass(catalog: Catalog) -> None:
    """Cerebras Inference as launched (Aug 2024) ran slower kernels than the current release: on the
    same wafers a pass takes ``layers x (launch layer time)`` more, less the step overheads' difference."""
    current = deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
    launch = deploy(catalog, "cerebras-cs3", "llama-3.1-70b", stack="cerebras-inference-2024-08")
    old, new = (StepCostModel(d).pass_time([1.0], [512.0]).total_s for d in (launch, current))
    extra = current.model.num_layers * launch.stack.layer_latency.value
    overheads = launch.stack.step_overhead.value - current.stack.step_overhead.value
    assert old - new == pytest.approx(extra + overheads, rel=1e-9)


def test_a_draft_on_its_own_wafer_is_paid_for_and_every_verify_waits_for_its_proposals(catalog: Catalog) -> None:
    """Cerebras' documented speculation for Llama-3.1-70B puts the 8B draft on a wafer of its own
    (the 70B's four wafers have no room for it): the replica pays for the draft's wafer, and a
    token costs at least (gamma draft passes + one verify pass) / tokens per verify."""
    spec = {"draft": "model", "draft_model": "llama-3.1-8b", "tokens_proposed": 4, "placement": "own-chips"}
    d = deploy(catalog, "cerebras-cs3", "llama-3.1-70b", speculative=spec)
    assert d.draft is not None and d.draft_chips >= 1 and d.replica_chips == d.chips + d.draft_chips
    cost = StepCostModel(d)
    verify_s = cost.pass_time([1.0], [1500.0]).total_s  # the least a verify takes: one token through every layer
    draft_s = cost.draft_s(np.array([1500.0]))
    per_token_s = 1.0 / estimate(d, 1000, 1000, 1).per_user_output_tok_s
    assert draft_s > 0.0 and cost.tokens_per_step > 1.0
    assert per_token_s >= (draft_s + verify_s) / cost.tokens_per_step * (1 - 0.05)  # context grows over the answer
