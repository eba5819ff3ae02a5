"""The closed form and the engine describe the same machine: at a steady closed-loop load of N
users with no think time they must agree on throughput, on the time between tokens and on the
time to the first token.

Both see the same batch: N sequences decoding, prompts prefilled beside them (every E2E / N
seconds a user's next request arrives, at the end of the iteration its last one ended in). The
closed form takes that composition in one representative decode pass plus the prefill passes;
the engine runs it pass by pass. The
response-time law ties them: X = N / E2E, so agreement on X is agreement on the mean request.
A request's TTFT is its prefill after the iteration in progress when it arrives, in one iteration
with the prompts that arrived with it, and the prompts ahead of it
(:mod:`simulator.analytic.estimate`); the engine lives through all three. Deployments: two dense,
three MoE, one of them with sliding-window layers (gpt-oss) whose KV both count per layer kind,
also run at 358 users (about 2.8 prompts arriving at each iteration's end, several of them
prefilled together in an iteration far from linear in its prompts) and beyond the sequences whose
KV fits (768 users on one H100, where about 550-600 fit).
"""

from __future__ import annotations

import pytest

from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from tests.engine.conftest import CATALOG, run

INPUT, OUTPUT = 512, 128
#: Answers of 96-160 tokens (mean 128): with equal lengths a closed loop locks its users' arrivals
#: into one pattern repeated forever (two users always a step apart, say), which no mean describes.
LENGTHS = {
    "input_tokens": {"dist": "constant", "value": INPUT},
    "output_tokens": {"dist": "uniform", "low": OUTPUT - 32, "high": OUTPUT + 32},
}
DEPLOYMENTS = {
    "dense-8b": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1},
    "dense-70b-tp4": {"hardware": "nvidia-h200", "model": "llama-3.1-70b", "chips": 4},
    "moe-qwen3-30b": {"hardware": "nvidia-h100-sxm", "model": "qwen3-30b-a3b", "weights": "fp8", "chips": 1},
    "moe-mixtral-tp2": {"hardware": "nvidia-h200", "model": "mixtral-8x7b", "chips": 2},
    "moe-gpt-oss-120b": {"hardware": "nvidia-h100-sxm", "model": "gpt-oss-120b", "chips": 1},
}
CASES = [(name, users) for name in DEPLOYMENTS for users in (1, 4, 16, 64)]
CASES += [("moe-gpt-oss-120b", 358), ("moe-gpt-oss-120b", 768)]


@pytest.mark.parametrize(("name", "users"), CASES, ids=[f"{name}-{users}" for name, users in CASES])
def test_estimate_and_engine_agree(name: str, users: int) -> None:
    deployment = DEPLOYMENTS[name]
    closed_form = estimate(deploy(CATALOG, DeploymentSpec(**deployment)), INPUT, OUTPUT, users)
    request_s = closed_form.e2e_s
    summary = run(
        deployment=deployment,
        load={"kind": "closed", "users": users, "start_spread": f"{request_s} s"},
        requests=LENGTHS,
        run={"seed": 1, "duration": f"{8 * request_s} s", "warmup": f"{3 * request_s} s", "drain": False},
    ).summary
    assert closed_form.aggregate_output_tok_s == pytest.approx(summary.output_tok_s, rel=0.10)
    assert closed_form.itl_s == pytest.approx(summary.tpot_s.mean, rel=0.10)
    assert closed_form.per_user_output_tok_s == pytest.approx(summary.per_user_output_tok_s.mean, rel=0.10)
    assert closed_form.ttft_s == pytest.approx(summary.ttft_s.mean, rel=0.15)


def test_sliding_window_layers_hold_their_window_only() -> None:
    """gpt-oss keeps half its layers' KV at the 128-token window: at 512 + 128 tokens the closed
    form fits 1.7 times the sequences a full-context count would, and the engine holds as many
    (its KV occupancy, run past the maximum, reaches the closed form's at most one window off)."""
    spec = DeploymentSpec(**DEPLOYMENTS["moe-gpt-oss-120b"])
    d = deploy(CATALOG, spec)
    most = estimate(d, INPUT, OUTPUT, 1).max_concurrency
    model = d.model
    windowed = model.attention.sliding_window_layers
    full_count = int(d.kv_budget_bytes // (d.kv_bytes_per_token * (INPUT + OUTPUT)))
    per_layer = d.kv_bytes_per_token / model.num_layers
    held = (model.num_layers - windowed) * (INPUT + OUTPUT) + windowed * model.attention.sliding_window
    assert most == min(int(d.kv_budget_bytes // (per_layer * held)), d.max_batch_size)
    assert most > 1.5 * full_count
    closed_form = estimate(d, INPUT, OUTPUT, 2 * most)
    result = run(
        deployment=DEPLOYMENTS["moe-gpt-oss-120b"],
        load={"kind": "closed", "users": 2 * most, "start_spread": f"{closed_form.e2e_s} s"},
        requests=LENGTHS,
        run={"seed": 1, "duration": f"{3 * closed_form.e2e_s} s", "warmup": f"{closed_form.e2e_s} s", "drain": False},
    )
    assert result.summary.mean_batch_size == pytest.approx(most, rel=0.10)
