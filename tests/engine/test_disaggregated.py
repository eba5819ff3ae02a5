"""Disaggregated prefill and decode: KV bytes conserved across the link, TTFT in exact parts,
transfer-time bounds, no decode slowdown with a free link, Little's law per pool, determinism,
what crosses per architecture, and bad input (exit 2, nothing written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.analytic.kv_transfer import TOKEN_ID_BYTES, wire_end_s
from simulator.cli import main
from simulator.config.fleet import KVLinkSpec
from simulator.plan.resolve import resolve
from simulator.records.store import KVTransferRecords, LevelMonitor
from simulator.runner import RunResult
from tests.engine.conftest import CATALOG, run, scenario

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
IB = {"bandwidth": "50 GB/s", "links": 1, "latency": "5 us", "per_transfer": "1 ms"}
FREE = {"bandwidth": "1 EB/s", "streaming": "whole"}  # the fastest a link may be: no latency, overhead or wire time
CHAT = {"input_tokens": {"dist": "lognormal", "median": 800, "sigma": 0.6},
        "output_tokens": {"dist": "lognormal", "median": 80, "sigma": 0.5}}  # fmt: skip


def _open(rate: float) -> dict[str, Any]:
    return {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}}


def _split(link: dict[str, Any], prefill: int = 1, decode: int = 1, decode_on: dict[str, Any] = H100_8B,
           **parts: Any) -> RunResult:  # fmt: skip
    backends = [
        {"name": "p", "deployment": H100_8B, "replicas": prefill, "decode_on": "d", "kv_link": link},
        {"name": "d", "deployment": decode_on, "replicas": decode},
    ]
    kwargs: dict[str, Any] = {"load": _open(6.0), "requests": CHAT, "run": {"seed": 3, "max_requests": 150}}
    return run(backends=backends, **(kwargs | parts))


def _kv(result: RunResult) -> KVTransferRecords:
    (kv,) = result.records.kv_transfers
    return kv


def test_every_prefilled_request_s_kv_crosses_once_and_every_byte_is_accounted() -> None:
    """Conservation: each completed request's KV crosses exactly once, ``prompt x KV bytes/token``
    of the decode deployment; the prefill pool emits no output token, the decode pool all of them."""
    result = _split(IB, prefill=1, decode=2)
    r, kv, rec = result.records.requests, _kv(result), result.records
    assert (r["dropped"] == 0).all() and np.isfinite(r["done_s"]).all()
    assert sorted(kv.columns["request"].tolist()) == sorted(r["id"].tolist())
    per_token = resolve(scenario(backends=[{"name": "x", "deployment": H100_8B}]), CATALOG).backends[0]
    order = np.searchsorted(r["id"], kv.columns["request"])
    expected = r["input_tokens"][order] * per_token.deployment.kv_bytes_per_token
    np.testing.assert_allclose(kv.columns["bytes"], expected, rtol=1e-12)
    assert result.summary.kv_transfers is not None
    assert result.summary.kv_transfers["p"].bytes_moved == pytest.approx(expected.sum(), rel=1e-12)
    prefill, decode = (b.replicas for b in rec.backends)
    assert rec.tokens_in_window(0.0, rec.end_s, prefill)[0] == 0.0
    assert rec.tokens_in_window(0.0, rec.end_s, decode)[0] == pytest.approx(r["output_tokens"].sum(), rel=1e-12)
    assert set(r["replica"].astype(int)) <= set(decode)
    np.testing.assert_array_equal(kv.columns["decode_replica"], r["replica"][order])


@pytest.mark.parametrize("streaming", ["whole", "layer"])
def test_ttft_is_prefill_plus_transfer_plus_first_decode_exactly_without_contention(streaming: str) -> None:
    """One user at a time: TTFT = prefill pass + link time + one decode pass over the last prompt
    token, each from the cost model and the link formula; the summary's parts add up to TTFT."""
    prompt, link = 512, IB | {"streaming": streaming}
    lengths = {"input_tokens": {"dist": "constant", "value": prompt}, "output_tokens": {"dist": "constant", "value": 8}}
    result = _split(link, load={"kind": "closed", "users": 1}, requests=lengths, run={"seed": 1, "max_requests": 5})
    plan = resolve(scenario(backends=[{"name": "x", "deployment": H100_8B}]), CATALOG).backends[0]
    prefill_s = plan.cost.iteration_times(_batch([prompt], [0.0])).total_s[0]
    first_decode_s = plan.cost.iteration_times(_batch([1], [prompt - 1.0])).total_s[0]
    spec = KVLinkSpec.model_validate(link)
    nbytes = prompt * plan.deployment.kv_bytes_per_token
    wire_s = wire_end_s(spec, nbytes, plan.deployment.model.num_layers, 0.0, prefill_s, 0.0) - prefill_s
    transfer_s = wire_s + spec.latency + spec.per_transfer
    r = result.records.requests
    np.testing.assert_allclose(r["first_token_s"] - r["arrival_s"], prefill_s + transfer_s + first_decode_s, rtol=1e-9)
    parts = result.summary.kv_transfers["p"]  # type: ignore[index]
    total = parts.prefill_s.mean + parts.transfer_s.mean + parts.decode_first_s.mean
    assert total == pytest.approx(result.summary.ttft_s.mean, rel=1e-9)


def _batch(new_tokens: list[float], context: list[float]) -> Any:
    from simulator.analytic.step_time import BatchAggregates

    return BatchAggregates.of(np.array(new_tokens, dtype=float), np.array(context), None)


def test_transfer_time_bounds() -> None:
    """Layer streaming never ends later than a whole transfer, never before the last layer's share
    after the prefill; a whole transfer takes ``B / b`` after the prefill (or the link) frees;
    more bandwidth never takes longer."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        nbytes, layers = float(rng.uniform(1e6, 1e10)), int(rng.integers(1, 128))
        start, prefill = float(rng.uniform(0, 5)), float(rng.uniform(1e-3, 5))
        free = float(rng.uniform(0, 10))
        bw = float(rng.uniform(1e9, 1e12))
        whole = KVLinkSpec.model_validate({"bandwidth": bw, "streaming": "whole"}, context={"si_numbers": True})
        layer = whole.model_copy(update={"streaming": "layer"})
        end = start + prefill
        w, s = (wire_end_s(x, nbytes, layers, start, end, free) for x in (whole, layer))
        assert w == pytest.approx(max(free, end) + nbytes / bw, rel=1e-12)
        assert end + nbytes / (layers * bw) * (1 - 1e-12) <= s <= w * (1 + 1e-12)
        faster = layer.model_copy(update={"bandwidth": 2 * bw})
        assert wire_end_s(faster, nbytes, layers, start, end, free) <= s * (1 + 1e-12)


def test_a_free_link_never_slows_decode_compared_with_co_location() -> None:
    """Same hardware, a zero-latency link of unbounded bandwidth: the decode replica never runs a
    prefill chunk of any size, so TPOT and ITL are no worse than when a replica does both (and
    the link adds nothing to TTFT)."""
    common: dict[str, Any] = {"load": _open(8.0), "requests": CHAT, "run": {"seed": 5, "max_requests": 250}}
    split = _split(FREE, **common).summary
    together = run(backends=[{"name": "p", "deployment": H100_8B}], **common).summary
    assert split.kv_transfers is not None and split.kv_transfers["p"].transfer_s.p99 < 1e-9
    assert split.tpot_s.mean <= together.tpot_s.mean
    assert split.itl_s.p50 <= together.itl_s.p50 and split.itl_s.p99 <= together.itl_s.p99


def _integral_equals_sojourns(level: LevelMonitor, entered: np.ndarray, left: np.ndarray, end_s: float) -> None:
    assert level.integral(0.0, end_s) == pytest.approx(float((left - entered).sum()), rel=1e-9)


def test_littles_law_holds_exactly_in_the_prefill_pool_and_on_the_link() -> None:
    """Sample-path Little: the time-integral of the number prefilling (on the link) equals the sum
    of the requests' prefill (transfer) sojourns, every request having left both by the end."""
    result = _split(IB | {"bandwidth": "2 GB/s", "streaming": "whole"}, prefill=2, decode=1)
    kv, end = _kv(result), result.records.end_s
    assert kv.prefilling == 0 and kv.crossing == 0
    c = kv.columns
    _integral_equals_sojourns(kv.in_prefill, c["routed_s"], c["prefill_end_s"], end)
    _integral_equals_sojourns(kv.in_transfer, c["prefill_end_s"], c["arrival_s"], end)
    assert (c["arrival_s"] - c["prefill_end_s"]).max() > 0.1  # the slow link queued transfers


def test_disaggregated_runs_are_deterministic_per_seed() -> None:
    a, b = (_kv(_split(IB)).columns for _ in range(2))
    c = _kv(_split(IB, run={"seed": 4, "max_requests": 150})).columns
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["prefill_end_s"], c["prefill_end_s"])


def test_a_wafer_decode_pool_gets_the_prompt_and_prefills_it_again() -> None:
    """No KV import path on SRAM machines: token ids cross (4 bytes each) and the wafer prefills."""
    result = _split(IB, decode_on=CS3_8B)
    kv, r, rec = _kv(result), result.records.requests, result.records
    assert kv.kind == "prompt"
    order = np.searchsorted(r["id"], kv.columns["request"])
    np.testing.assert_allclose(kv.columns["bytes"], r["input_tokens"][order] * TOKEN_ID_BYTES, rtol=1e-12)
    decode = rec.backends[1].replicas
    assert rec.tokens_in_window(0.0, rec.end_s, decode)[1] >= r["input_tokens"].sum() - r["cached_tokens"].sum()


def test_a_decode_pool_without_replicas_leaves_the_prefill_backend_serving_whole_requests() -> None:
    result = _split(IB, prefill=1, decode=0)
    assert result.records.kv_transfers == () and result.summary.kv_transfers is None
    assert result.summary.requests_completed == 150


def test_a_request_the_decode_pool_cannot_hold_is_dropped_as_too_long() -> None:
    """A request must fit both pools (else it would wait at the decode pool forever)."""
    short = H100_8B | {"context_tokens": 1000}
    lengths = {"input_tokens": {"dist": "lognormal", "median": 600, "sigma": 0.8},
               "output_tokens": {"dist": "constant", "value": 8}}  # fmt: skip
    result = _split(IB, decode_on=short, requests=lengths, run={"seed": 1, "max_requests": 60})
    r = result.records.requests
    too_long = r["input_tokens"] + r["output_tokens"] > 1000
    assert too_long.any() and (~too_long).any()
    assert (r["dropped"][too_long] == 1).all() and np.isfinite(r["done_s"][~too_long]).all()


BAD = [
    ({"kv_link": None}, "decode_on: d needs kv_link"),
    ({"kv_link": {"latency": "5 us"}}, "kv_link.bandwidth"),
    ({"decode_on": "nowhere"}, "no backend named 'nowhere'"),
    ({"decode_on": "p"}, "cannot decode for itself"),
]


@pytest.mark.parametrize(("change", "expected"), [*BAD, ("model", "KV is only meaningful to the model that made it")])
def test_bad_disaggregation_exits_2_naming_the_field_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any] | str, expected: str
) -> None:
    prefill: dict[str, Any] = {"name": "p", "deployment": H100_8B, "decode_on": "d", "kv_link": IB}
    decode: dict[str, Any] = {"name": "d", "deployment": H100_8B}
    if change == "model":
        decode["deployment"] = H100_8B | {"model": "llama-2-7b"}
    else:
        assert isinstance(change, dict)
        prefill = {k: v for k, v in (prefill | change).items() if v is not None}
    data = {"name": "bad", "backends": [prefill, decode], "load": _open(1.0), "requests": CHAT,
            "run": {"max_requests": 10}}  # fmt: skip
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("infersim: error:") and expected in err and "Traceback" not in err
    assert not out.exists()
