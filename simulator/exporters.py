"""A simulated run's summary in a peer's field names, so dashboards built for measured runs read it.

``vllm-bench``: vLLM's serving-benchmark result JSON (the fields
:mod:`simulator.importers.vllm_bench` reads), from a run folder's ``requests.csv`` and
``summary.json``. Measured requests are those ``summary.json`` counts: completed, not dropped,
arrived at or after the warm-up. Per request (vLLM's definitions, as infersim's):
``ttft = first token - arrival``, ``e2el = done - arrival``, ``tpot = (done - first) / (n - 1)``
for n > 1; statistics with numpy (``std`` with ddof 0, percentiles linear), times in ms.
``duration`` is the span from the first measured arrival to the last completion, the
throughputs the measured tokens over it. ITL is every gap pooled: infersim keeps it as a
histogram, so its mean and percentiles come from ``summary.json`` (``std`` is left out).
The load fields say what the scenario sent: ``request_rate`` (``"inf"`` for a closed loop or
a trace), ``burstiness`` (vLLM's gamma shape, 1 / CV^2) and ``max_concurrency`` (the closed
loop's users).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.importers.common import MS_PER_S, FloatArray

#: Percentiles written (vLLM's ``--metric-percentiles`` names).
PERCENTILES = (90.0, 95.0, 99.0, 99.9)


def _stats(name: str, values_s: FloatArray) -> dict[str, float]:
    values_ms = values_s[np.isfinite(values_s)] * MS_PER_S
    if values_ms.size == 0:
        return {}
    out = {f"mean_{name}_ms": float(values_ms.mean()), f"median_{name}_ms": float(np.median(values_ms)),
           f"std_{name}_ms": float(values_ms.std())}  # fmt: skip
    for q in PERCENTILES:
        out[f"p{q:g}_{name}_ms"] = float(np.percentile(values_ms, q))
    return out


def _load_fields(load: dict[str, Any]) -> dict[str, Any]:
    arrivals = load.get("arrivals") if load.get("kind") == "open" else None
    if isinstance(arrivals, dict) and "rate_per_s" in arrivals:
        cv2 = {"poisson": 1.0, "gamma": arrivals.get("burstiness", 1.0)}.get(str(arrivals.get("process")))
        return {"request_rate": arrivals["rate_per_s"], "burstiness": None if not cv2 else 1.0 / cv2,
                "max_concurrency": None}  # fmt: skip
    users = load.get("users") if load.get("kind") == "closed" else None
    return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": users}


def vllm_bench(
    requests: dict[str, FloatArray], summary: dict[str, Any], scenario: dict[str, Any], version: str
) -> dict[str, Any]:
    """vLLM's result fields of a run (module docstring); ``requests`` are requests.csv's columns."""
    warmup = float((scenario.get("run") or {}).get("warmup") or 0.0)
    done, arrival, first = requests["done_s"], requests["arrival_s"], requests["first_token_s"]
    measured = (requests["dropped"] == 0) & np.isfinite(done) & (arrival >= warmup)
    done, arrival, first = done[measured], arrival[measured], first[measured]
    n_in, n_out = requests["input_tokens"][measured], requests["output_tokens"][measured]
    duration = float(done.max() - arrival.min()) if done.size else math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n_out > 1, (done - first) / (n_out - 1), math.nan)
    deployment = scenario.get("deployment") or {}
    model = deployment.get("model")
    model_id = (model.get("hf_repo") or model.get("id")) if isinstance(model, dict) else model
    itl = summary.get("itl_s") or {}
    out: dict[str, Any] = {
        "backend": "infersim", "infersim_version": version, "model_id": model_id, "tokenizer_id": model_id,
        "num_prompts": int(measured.sum()), **_load_fields(scenario.get("load") or {}),
        "duration": duration, "completed": int(measured.sum()),
        "total_input_tokens": int(n_in.sum()), "total_output_tokens": int(n_out.sum()),
        "request_throughput": measured.sum() / duration, "request_goodput": None,
        "output_throughput": float(n_out.sum()) / duration,
        "total_token_throughput": float(n_in.sum() + n_out.sum()) / duration,
    }  # fmt: skip
    out |= _stats("ttft", first - arrival) | _stats("tpot", tpot)
    names = {"mean": "mean", "p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
    out |= {f"{names[k]}_itl_ms": float(v) * MS_PER_S for k, v in itl.items() if k in names and v is not None}
    return out | _stats("e2el", done - arrival)
