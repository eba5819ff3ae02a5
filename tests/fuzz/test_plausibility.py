"""Plausibility at the door: every number read from a profile, a scenario, an imported result file or a
Hugging Face ``config.json`` lies in its documented physical range, or is refused naming the file and field.

Two kinds of test:

- **named cases**, driven through the real command line in a sandbox: each asserts exit 2, the texts
  the one error message holds (the file, the field, the range) and that every file the user had is
  byte-identical afterwards (:func:`tests.fuzz.conftest.assert_rejected`); rows whose figures break a
  physical floor are kept, flagged and warned about;
- **properties** (hypothesis): a hostile value (negative, zero, NaN, infinity, 1e-300, 1e300, a huge
  integer, a wrong type) put into any numeric field of a config model, an importer's file or a
  ``config.json`` is either accepted, and then lies in its documented range, or refused with a
  ConfigError naming the file and the field; never any other exception, never a hang.
"""

from __future__ import annotations

import copy
import json
import math
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from simulator.config.base import MAX_INTEGER
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import bundled_dir, validate_data
from simulator.config.model import ModelSpec
from simulator.config.scenario import Scenario
from simulator.config.stack import StackProfile
from simulator.config.workload import WorkloadSpec
from simulator.errors import ConfigError
from simulator.io.hf_config import profile_from_config
from simulator.io.importers import read_file
from simulator.io.importers.checks import PLAUSIBLE
from simulator.units import RANGES, Dimension, parse_quantity
from tests.fuzz.conftest import (
    BASE_CHANGED,
    H100,
    LLAMA_8B,
    POISSON,
    SCENARIO,
    WARNING,
    Sandbox,
    _deadline,
    assert_no_crash,
    assert_rejected,
    bundled_edit,
    edit,
)

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures"
MEASURED = FIXTURES / "measured"
HF_CONFIGS = FIXTURES / "hf_configs"

# -- named cases through the command line -----------------------------------------------------------------
ESTIMATE = ("--hardware-dir", "hw", "estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
HW = "hw/nvidia-h100-sxm.yaml"
RUN = ("run", "s.yaml", "-o", "out")


def hardware(old: str, new: str) -> dict[str, str | bytes]:
    """The bundled H100 profile with one edit (a case whose line the profile no longer holds is skipped)."""
    return bundled_edit(H100, HW, old, new)


#: A scenario whose replicas keep evicted prefix KV in lower tiers (``@TIERS@``: the list).
TIERED = edit(SCENARIO, "load:", "scheduler: {policy: continuous, kv_tiers: {tiers: @TIERS@}}\nload:")


def tiers(text: str) -> dict[str, str]:
    return {"s.yaml": TIERED.replace("@TIERS@", text)}


HARDWARE_CASES = [
    pytest.param(hardware("value: 3.35 TB/s", "value: 1e-300 TB/s"), "memory.1.bandwidth.value",
                 "physical range of a bandwidth", id="bandwidth-1e-300"),
    pytest.param(hardware("value: 3.35 TB/s", "value: 1e10 TB/s"), "memory.1.bandwidth.value", "1e+18 B/s",
                 id="bandwidth-1e22"),
    pytest.param(hardware("value: 81559 MiB,", "value: 1e10 GB,"), "memory.1.capacity.value",
                 "physical range of a size", id="capacity-1e19"),
    pytest.param(hardware("value: 81559 MiB,", "value: 1e-300 GB,"), "memory.1.capacity.value", "1 B",
                 id="capacity-1e-300"),
    pytest.param(hardware("bf16: {value: 989.4 TFLOP/s", "bf16: {value: 1e-300 TFLOP/s"), "compute.peak.bf16.value",
                 "physical range of a FLOP rate", id="flops-1e-300"),
    pytest.param(hardware("value: 700 W", "value: 1e300 W"), "power.chip.value", "physical range of a power",
                 id="power-1e300"),
    pytest.param(hardware("value: 0.85, source: assumed", "value: 1.0e-300, source: assumed"),
                 "memory.1.efficiency.value", "0.01",
                 id="efficiency-1e-300"),
    pytest.param(hardware("value: 2.5, source: codesota", "value: 1.0e+300, source: codesota"),
                 "price.rental_usd_per_chip_hour.value", "1000000000",
                 id="price-1e300"),
    pytest.param(hardware("value: 2.5, source: codesota", "value: 1.0e-300, source: codesota"),
                 "price.rental_usd_per_chip_hour.value", "0.000001",
                 id="price-1e-300"),
    pytest.param(hardware("value: 3.0,", "value: 1.0e+300,"), "compute.roofline_exponent.value", "16",
                 id="roofline-exponent-1e300"),
    pytest.param(hardware("value: 9.73 us", "value: 48 h"), "interconnect.latency.value", "86400",
                 id="latency-two-days"),
    pytest.param(hardware("value: 9.73 us", "value: -3 us"), "interconnect.latency.value", "no time is negative",
                 id="latency-negative"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "field", "range_text"), HARDWARE_CASES)
def test_a_hardware_number_outside_its_physical_range_is_refused(
    sandbox: Sandbox, files: dict[str, str | bytes], field: str, range_text: str
) -> None:
    """A hardware number outside its documented range: exit 2 naming the file, the field and the range."""
    if BASE_CHANGED in files:
        pytest.skip(str(files[BASE_CHANGED]))
    sandbox.write(files)
    assert_rejected(sandbox.run(*ESTIMATE), HW, field, range_text)


SSD = "{name: ssd, capacity: 1 TB, bandwidth: 7 GB/s}"
SCENARIO_CASES = [
    pytest.param({"p.yaml": edit(POISSON, "rate_per_s: 10", "rate_per_s: 1.0e-300")}, ("run", "p.yaml", "-o", "out"),
                 ("p.yaml", "load.arrivals.rate_per_s", "0.000001"), id="rate-1e-300"),
    pytest.param({"p.yaml": edit(POISSON, "duration: 2 s", "duration: 1e-300 s")}, ("run", "p.yaml", "-o", "out"),
                 ("p.yaml", "run.duration", "0.000001"), id="duration-1e-300"),
    pytest.param({"s.yaml": edit(SCENARIO, "seed: 1", "seed: -1")}, RUN, ("s.yaml", "run.seed"), id="seed-minus-1"),
    pytest.param({"s.yaml": edit(SCENARIO, "seed: 1", f"seed: {2**63}")}, RUN, ("s.yaml", "run.seed", "2**63"),
                 id="seed-2-to-the-63"),
    pytest.param(tiers(f"[{SSD}, {{name: ssd, capacity: 2 TB, bandwidth: 7 GB/s}}]"), RUN,
                 ("s.yaml", "scheduler.kv_tiers", "tiers.1.name", "'ssd'"), id="kv-tier-twice"),
    pytest.param(tiers(f"[{SSD}, {{name: cxl, capacity: 1 TB, bandwidth: 63 GB/s}}]"), RUN,
                 ("s.yaml", "scheduler.kv_tiers", "tiers.1.bandwidth", "fastest first"), id="kv-tier-slower-first"),
    pytest.param(tiers("[{name: ssd, capacity: 0 TB, bandwidth: 7 GB/s}]"), RUN,
                 ("s.yaml", "scheduler.kv_tiers.tiers.0.capacity"), id="kv-tier-zero-capacity"),
    pytest.param(tiers("[{name: ssd, capacity: 1 TB, bandwidth: -7 GB/s}]"), RUN,
                 ("s.yaml", "scheduler.kv_tiers.tiers.0.bandwidth"), id="kv-tier-negative-bandwidth"),
    pytest.param(tiers(f"[{SSD}, {{name: host}}]"), RUN,
                 ("scheduler.kv_tiers", "host", "fastest first"), id="kv-tier-profile-tier-after-a-slower-one"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), SCENARIO_CASES)
def test_a_scenario_number_outside_its_range_is_refused(
    sandbox: Sandbox, files: dict[str, str], argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Rates, durations, seeds and KV tiers: exit 2 naming the file and field, nothing written."""
    sandbox.write(files)
    assert_rejected(sandbox.run(*argv), *expected)


# -- models import ---------------------------------------------------------------------------------------
LLAMA_CONFIG = json.loads((HF_CONFIGS / "llama-3.1-8b" / "config.json").read_text(encoding="utf-8"))


def hf_config(**changes: object) -> dict[str, str]:
    return {"m/config.json": json.dumps(LLAMA_CONFIG | changes)}


MODELS_IMPORT = ("models", "import", "m/config.json", "-o", "out")
HF_CASES = [
    pytest.param(hf_config(num_attention_heads=0), "num_attention_heads", id="heads-0"),
    pytest.param(hf_config(hidden_size=0), "hidden_size", id="hidden-0"),
    pytest.param(hf_config(num_hidden_layers=-4), "num_hidden_layers", id="layers-negative"),
    pytest.param(hf_config(num_hidden_layers=10**30), "num_hidden_layers", id="layers-10e30"),
    pytest.param(hf_config(intermediate_size="14336"), "intermediate_size", id="width-a-string"),
    pytest.param(hf_config(vocab_size=128256.5), "vocab_size", id="vocab-a-fraction"),
    pytest.param({"m/config.json": json.dumps(LLAMA_CONFIG).replace('"hidden_size": 4096', '"hidden_size": NaN')},
                 "hidden_size", id="hidden-nan"),
    pytest.param(hf_config(tie_word_embeddings="no"), "tie_word_embeddings", id="tie-a-string"),
    pytest.param(hf_config(architectures=[1, 2]), "", id="architectures-not-names"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "key"), HF_CASES)
def test_models_import_refuses_a_bad_config_value_naming_the_key(
    sandbox: Sandbox, files: dict[str, str], key: str
) -> None:
    """A config value of 0, negative, NaN, huge or of the wrong type: exit 2 naming the file and key
    (or, for a key infersim only copies, a profile built without it)."""
    sandbox.write(files)
    outcome = sandbox.run(*MODELS_IMPORT, timeout_s=10.0)
    if not key:
        assert_no_crash(outcome)
        assert outcome.code == 0, outcome
        return
    assert_rejected(outcome, "m/config.json", key)


# -- infersim import -------------------------------------------------------------------------------------
VLLM = json.loads((MEASURED / "vllm-llmd-h100-2replicas.json").read_text(encoding="utf-8"))
IMPORT = ("import", "r.json", "--hardware", "nvidia-h100-sxm", "--chips", "1", "-o", "out")


def vllm(**changes: object) -> dict[str, str]:
    return {"r.json": json.dumps(VLLM | changes)}


IMPORT_CASES = [
    pytest.param(vllm(p99_ttft_ms=-5.0), ("r.json", "p99_ttft_ms", ">= 0"), id="negative-percentile"),
    pytest.param(vllm(mean_ttft_ms=0.0, median_ttft_ms=0.0, p95_ttft_ms=0.0, p99_ttft_ms=0.0, std_ttft_ms=0.0),
                 ("r.json", "ttft", "plausible range"), id="zero-ttft"),
    pytest.param(vllm(mean_ttft_ms=0.2436, median_ttft_ms=0.2441, p95_ttft_ms=0.257, p99_ttft_ms=0.262),
                 ("r.json", "ttft", "1000x"), id="ttft-in-seconds-where-ms-go"),
    pytest.param(vllm(mean_itl_ms=1e-4, median_itl_ms=1e-4, p95_itl_ms=1e-4, p99_itl_ms=1e-4, std_itl_ms=0.0),
                 ("r.json", "itl", "plausible range"), id="itl-under-a-microsecond"),
    pytest.param(vllm(mean_ttft_ms=2e8, median_ttft_ms=2e8, p95_ttft_ms=2e8, p99_ttft_ms=2e8),
                 ("r.json", "ttft", "plausible range"), id="ttft-two-days"),
    pytest.param(vllm(mean_e2el_ms=100.0, median_e2el_ms=100.0), ("r.json", "ttft", "e2el", "cannot come after"),
                 id="ttft-above-e2e"),
    pytest.param(vllm(median_tpot_ms=30.0), ("r.json", "tpot", "p50", "p95"), id="percentiles-out-of-order"),
    pytest.param(vllm(total_input_tokens=10**30), ("r.json", "total_input_tokens", "2**53"), id="lengths-10e30"),
    pytest.param(vllm(request_rate=1e-300), ("r.json", "rate"), id="rate-1e-300"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), IMPORT_CASES)
def test_implausible_imported_statistics_are_refused(
    sandbox: Sandbox, files: dict[str, str], expected: tuple[str, ...]
) -> None:
    """Negative, zero, 1000x-off or self-contradicting statistics: exit 2 naming the file and field."""
    sandbox.write(files)
    assert_rejected(sandbox.run(*IMPORT), *expected)


def test_import_refuses_a_negative_seed(sandbox: Sandbox) -> None:
    sandbox.write(vllm())
    assert_rejected(sandbox.run(*IMPORT, "--seed", "-1"), "--seed", "2**63")


def _flags(sandbox: Sandbox) -> dict[str, str]:
    """Each imported row's metric -> its flag."""
    import csv

    with (sandbox.root / "out" / "measurements.csv").open(encoding="utf-8") as table:
        return {row["metric"]: row["flag"] for row in csv.DictReader(table)}


def test_a_throughput_at_odds_with_its_counts_is_kept_but_flagged(sandbox: Sandbox) -> None:
    """output_throughput 10x the file's total_output_tokens / duration: the rows are written, the
    throughput row carries the flag (the latencies stay unflagged), and a warning says so."""
    sandbox.write(vllm(output_throughput=10 * VLLM["output_throughput"]))
    outcome = sandbox.run(*IMPORT)
    assert_no_crash(outcome)
    assert outcome.code == 0, outcome
    assert WARNING in outcome.err and "total_output_tokens / duration" in outcome.err, outcome
    flags = _flags(sandbox)
    assert "disagrees with total_output_tokens / duration" in flags["aggregate_output_tok_s"], flags
    assert flags["ttft_s"] == flags["tpot_s"] == "", flags


def test_a_decode_faster_than_the_roofline_is_kept_but_flagged(sandbox: Sandbox) -> None:
    """A TPOT of 1 ms for Llama 3.1 8B in bf16 on one H100 (16 GB of weights at 3.35 TB/s take at
    least 4.5 ms a token): kept, flagged with the roofline."""
    fast = {f"{stat}_tpot_ms": 1.0 for stat in ("mean", "median", "p95", "p99")} | {"std_tpot_ms": 0.0}
    sandbox.write(vllm(**fast))
    outcome = sandbox.run(*IMPORT, "--model", "llama-3.1-8b")
    assert_no_crash(outcome)
    assert outcome.code == 0, outcome
    flags = _flags(sandbox)
    assert all("below the decode roofline" in flags[m] for m in ("tpot_s", "itl_s") if m in flags), flags
    assert "tpot_s" in flags and flags["ttft_s"] == "", flags


def test_a_plausible_file_is_not_flagged(sandbox: Sandbox) -> None:
    sandbox.write(vllm())
    outcome = sandbox.run(*IMPORT)
    assert outcome.code == 0 and WARNING not in outcome.err, outcome
    assert not any(_flags(sandbox).values())


# -- properties ------------------------------------------------------------------------------------------
HOSTILE_NUMBERS: list[Any] = [0, -1, 1e-300, -1e-300, 1e300, -1e300, math.nan, math.inf, -math.inf, 10**30,
                              2**63, 2**31, 0.5]  # fmt: skip
WRONG_TYPES: list[Any] = ["x", None, [], {}, True]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Path_ = tuple[str | int, ...]
_QUANTITY = re.compile(r"^\s*[-+]?[\d.]+(?:[eE][-+]?\d+)?\s+(\S+)\s*$")
_UNIT_DIMENSION: dict[str, Dimension] = {"B": "bytes", "B/s": "bandwidth", "FLOP/s": "flops", "s": "time", "W": "power"}


def numeric_leaves(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, str | None]]:
    """Every number (unit ``None``) and every unit-bearing string (its unit) under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from numeric_leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from numeric_leaves(value, (*path, index))
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path, None
    elif isinstance(node, str) and (match := _QUANTITY.match(node)):
        yield path, match[1]


def put(document: Any, path: Path_, value: object) -> Any:
    changed = copy.deepcopy(document)
    node = changed
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return changed


def hostile(unit: str | None) -> st.SearchStrategy[object]:
    numbers = st.sampled_from(HOSTILE_NUMBERS)
    if unit is None:
        return st.one_of(numbers, st.sampled_from(WRONG_TYPES))
    return st.one_of(numbers.map(lambda v: f"{v} {unit}"), numbers, st.sampled_from(WRONG_TYPES))


def _bundled(folder: str, name: str) -> Any:
    return yaml.safe_load((bundled_dir(folder) / name).read_text(encoding="utf-8"))


CONFIGS: dict[str, tuple[type[Any], Any]] = {
    "hardware": (HardwareProfile, yaml.safe_load(H100)),
    "model": (ModelSpec, yaml.safe_load(LLAMA_8B)),
    "model-moe": (ModelSpec, _bundled("model_profiles", "deepseek-r1.yaml")),
    "stack": (StackProfile, _bundled("stack_profiles", "vllm.yaml")),
    "workload": (WorkloadSpec, _bundled("workloads", "coding-agent.yaml")),
    "scenario": (Scenario, yaml.safe_load(SCENARIO)),
    "scenario-open": (Scenario, yaml.safe_load(POISSON)),
    "scenario-tiers": (Scenario, yaml.safe_load(TIERED.replace(
        "@TIERS@", "[{name: cxl, capacity: 1 TB, bandwidth: 63 GB/s, latency: 1 us}, "
                   "{name: ssd, capacity: 2 TB, bandwidth: 7 GB/s, latency: 100 us}]"))),
}  # fmt: skip


def _in_documented_range(value: object) -> bool:
    """A dumped value: a quantity inside its dimension's range, or a finite number within 64 bits."""
    if isinstance(value, str) and (match := _QUANTITY.match(value)) and match[1] in _UNIT_DIMENSION:
        dimension = _UNIT_DIMENSION[match[1]]
        quantity = parse_quantity(value, dimension)
        return RANGES[dimension].low <= quantity <= RANGES[dimension].high
    if isinstance(value, int | float) and not isinstance(value, bool):
        return math.isfinite(value) and abs(value) <= MAX_INTEGER
    return True


def _dumped_leaves(node: Any) -> Iterator[object]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _dumped_leaves(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _dumped_leaves(value)
    else:
        yield node


@pytest.mark.parametrize("kind", list(CONFIGS))
@PROPERTY
@given(data=st.data())
def test_a_hostile_number_in_a_config_is_in_range_or_refused_by_name(kind: str, data: st.DataObject) -> None:
    model, document = CONFIGS[kind]
    path, unit = data.draw(st.sampled_from(list(numeric_leaves(document))), label="field")
    value = data.draw(hostile(unit), label="value")
    field = ".".join(map(str, path))
    try:
        spec = validate_data(model, put(document, path, value), "f.yaml")
    except ConfigError as exc:
        message = str(exc)
        note(message)
        assert message.startswith("f.yaml: "), message
        assert field in message or str(path[0]) in message, f"{field} not named: {message}"
        return
    dumped = spec.model_dump(mode="json", by_alias=True)
    assert all(_in_documented_range(v) for v in _dumped_leaves(dumped)), dumped


#: Result files of each format (SGLang: one run a line; the first line is mutated).
IMPORTED = ["vllm-llmd-h100-2replicas.json", "vllm-inferencex-conc4.json", "sglang-llama70b-online.jsonl",
            "inference-perf-stage2.json", "aiperf-conc1-summary.json", "guidellm.json"]  # fmt: skip


def _distribution(mean: float, count: int = 100) -> dict[str, Any]:
    percentiles = {"p50": mean, "p90": mean * 1.5, "p99": mean * 1.9}
    return {"successful": {"count": count, "mean": mean, "median": mean, "std_dev": mean / 10, "min": mean / 2,
                           "max": mean * 2, "percentiles": percentiles}}  # fmt: skip


#: A GuideLLM report of one concurrent run, after its published schema (no shared real file has one).
GUIDELLM = {"benchmarks": [{
    "args": {"model": "meta-llama/Llama-3.1-8B-Instruct", "strategy": {"type_": "concurrent", "streams": 4}},
    "metrics": {"time_to_first_token_ms": _distribution(80.0), "inter_token_latency_ms": _distribution(12.0),
                "time_per_output_token_ms": _distribution(12.5), "request_latency": _distribution(1.7),
                "output_tokens_per_second": _distribution(300.0), "prompt_token_count": _distribution(512.0),
                "output_token_count": _distribution(128.0)},
}]}  # fmt: skip


def _document(name: str) -> Any:
    if name == "guidellm.json":
        return GUIDELLM
    text = (MEASURED / name).read_text(encoding="utf-8")
    return json.loads(text.splitlines()[0] if name.endswith(".jsonl") else text)


def _key_named(message: str, path: Path_) -> bool:
    """The message names the field: its key, or the metric the key holds (``p99_ttft_ms`` -> ttft)."""
    words = {str(p) for p in path} | {w for p in path for w in re.split(r"[_.]", str(p)) if len(w) > 2}
    stat_free = {w for w in words if w not in ("mean", "median", "std", "min", "max", "avg", "count", "value")}
    return any(w in message for w in stat_free) or any(str(p) in message for p in path)


@pytest.mark.parametrize("name", IMPORTED)
@PROPERTY
@given(data=st.data())
def test_a_hostile_number_in_a_result_file_is_plausible_or_refused_by_name(name: str, data: st.DataObject) -> None:
    document = _document(name)
    path, _ = data.draw(st.sampled_from([leaf for leaf in numeric_leaves(document) if leaf[1] is None]), label="key")
    value = data.draw(hostile(None), label="value")
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / name
        target.write_text(json.dumps(put(document, path, value), allow_nan=True) + "\n", encoding="utf-8")
        try:
            with _deadline(10.0):
                runs = read_file(target)
        except ConfigError as exc:
            message = str(exc)
            note(message)
            assert str(target) in message, message
            assert _key_named(message, path), f"{path} not named: {message}"
            return
    for run in runs:
        for metric, stats in run.metrics.items():
            assert all(math.isfinite(v) and v >= 0 for v in stats.values.values()), (metric, stats)
            if metric in PLAUSIBLE and {"mean", "p50"} & stats.values.keys():
                low, high, _ = PLAUSIBLE[metric]
                assert low <= stats.central[1] <= high, (metric, stats)


HF_KEYS = sorted(
    (folder.name, key)
    for folder in HF_CONFIGS.iterdir()
    for key, value in json.loads((folder / "config.json").read_text(encoding="utf-8")).items()
    if isinstance(value, int | float) and not isinstance(value, bool)
)


@PROPERTY
@given(case=st.sampled_from(HF_KEYS), value=hostile(None))
def test_a_hostile_config_json_value_is_read_or_refused_by_key(case: tuple[str, str], value: object) -> None:
    folder, key = case
    config = json.loads((HF_CONFIGS / folder / "config.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / folder / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config | {key: value}, allow_nan=True), encoding="utf-8")
        try:
            with _deadline(10.0):
                profile = profile_from_config(path)
        except ConfigError as exc:
            message = str(exc)
            note(message)
            assert message.startswith(str(path)), message
            return
    assert _in_documented_range(profile.num_layers) and profile.hidden_size >= 1
