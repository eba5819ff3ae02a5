"""The closed form and the engine describe the same machine: at a steady closed-loop load of N
users with no think time they must agree on throughput and on the time between tokens.

Both see the same batch: N sequences decoding, one prompt at a time prefilled beside them
(every E2E / N seconds a user's next request arrives). The closed form takes that composition
in one representative decode pass plus the prefill passes; the engine runs it pass by pass. The
response-time law ties them: X = N / E2E, so agreement on X is agreement on the mean request.
"""

from __future__ import annotations

import pytest

from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from tests.engine.conftest import CATALOG, run

INPUT, OUTPUT = 512, 128
DENSE = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
LENGTHS = {"input_tokens": {"dist": "constant", "value": INPUT}, "output_tokens": {"dist": "constant", "value": OUTPUT}}
MOE = {"hardware": "nvidia-h100-sxm", "model": "qwen3-30b-a3b", "weights": "fp8", "chips": 1}


@pytest.mark.parametrize("users", [1, 4, 16, 64])
@pytest.mark.parametrize("deployment", [DENSE, MOE], ids=["dense", "moe"])
def test_estimate_and_engine_agree_within_ten_percent(deployment: dict, users: int) -> None:
    closed_form = estimate(deploy(CATALOG, DeploymentSpec(**deployment)), INPUT, OUTPUT, users)
    request_s = closed_form.e2e_s
    summary = run(
        deployment=deployment,
        load={"kind": "closed", "users": users, "start_spread": f"{request_s} s"},
        requests=LENGTHS,
        run={"seed": 1, "duration": f"{8 * request_s} s", "warmup": f"{3 * request_s} s", "drain": False},
    ).summary
    assert summary.output_tok_s == pytest.approx(closed_form.aggregate_output_tok_s, rel=0.10)
    assert summary.tpot_s.mean == pytest.approx(closed_form.itl_s, rel=0.10)
