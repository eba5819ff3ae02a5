"""Under load, in the engine: SRAM pipelines hold per-user speed, GPUs trade it for throughput;
static batching waits, continuous batching does not."""

from __future__ import annotations

from simulator.results.summary import RunSummary
from tests.engine.conftest import run

LENGTHS = {"input_tokens": {"dist": "constant", "value": 256}, "output_tokens": {"dist": "constant", "value": 256}}


def _closed(deployment: dict, users: int) -> RunSummary:
    return run(
        deployment=deployment,
        load={"kind": "closed", "users": users, "start_spread": "0.5 s"},
        requests=LENGTHS,
        run={"seed": 1, "duration": "20 s", "warmup": "5 s", "drain": False},
    ).summary


def test_wafer_scale_per_user_speed_holds_as_users_grow() -> None:
    wafer = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
    one, many = _closed(wafer, 1), _closed(wafer, 16)
    assert many.per_user_output_tok_s.p50 >= 0.85 * one.per_user_output_tok_s.p50
    assert many.output_tok_s >= 12 * one.output_tok_s


def test_gpu_per_user_speed_falls_while_aggregate_rises() -> None:
    gpu = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
    one, many = _closed(gpu, 1), _closed(gpu, 128)
    assert many.per_user_output_tok_s.p50 < 0.8 * one.per_user_output_tok_s.p50
    assert many.output_tok_s > 20 * one.output_tok_s


def test_continuous_batching_beats_static_on_ttft_at_the_same_load() -> None:
    def ttft(policy: dict) -> float:
        return run(
            scheduler=policy,
            load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 8.0}},
            requests=LENGTHS,
            run={"seed": 2, "max_requests": 400},
        ).summary.ttft_s.mean

    assert ttft({"policy": "continuous"}) < 0.5 * ttft({"policy": "static", "max_batch_size": 32})


def test_a_tpu_serves_llama_70b_under_load_no_faster_than_its_torus_pass() -> None:
    """TP8 on a v6e slice: every decode step pays the weight stream and the torus all-reduces, so no
    user's inter-token time beats one batch-1 decode pass (to the ITL histogram's 0.5 % bins);
    aggregate throughput grows with users."""
    from simulator.analytic.step_time import StepCostModel
    from simulator.records.store import ITL_BIN_EDGES_S
    from tests.conftest import deploy
    from tests.engine.conftest import CATALOG

    tpu = {"hardware": "google-tpu-v6e", "model": "llama-3.1-70b"}
    floor_s = StepCostModel(deploy(CATALOG, **tpu)).pass_time([1.0], [256.0]).total_s
    bin_ratio = ITL_BIN_EDGES_S[1] / ITL_BIN_EDGES_S[0]
    one, many = _closed(tpu, 1), _closed(tpu, 16)
    assert one.itl_s.p50 * bin_ratio >= floor_s
    assert many.itl_s.p50 >= one.itl_s.p50
    assert many.output_tok_s > 8 * one.output_tok_s
