"""Named bad inputs, per command and file kind: each is rejected cleanly and writes nothing.

The contract (issue "Never lose a user's data, and reject every bad input cleanly"): every bad
input exits 2 with ONE ``infersim: error:`` message naming the file (and the line or field path)
and what was expected, no traceback, and nothing written anywhere; Ctrl-C exits 130 with one line.
Each case is one edit of a small valid input (``tests/fuzz/conftest.py``) and gives the texts the
message must hold. A case that fails because of a bug in ``simulator/`` is a strict xfail whose
reason starts with ``BUG:``; each is listed, with a reproduction, in ``notes/fuzz-findings.md``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from simulator.results.marker import MARKER
from tests.conftest import interruptible
from tests.fuzz.conftest import (
    BASE_CHANGED,
    EMPIRICAL,
    ERROR,
    H100,
    LENGTHS_CSV,
    LENGTHS_TXT,
    LLAMA_8B,
    PLAN,
    POISSON,
    SCENARIO,
    SWEEP,
    TABLE,
    TABLE_HEADER,
    TRACE_FILES,
    TRACE_TEXT,
    TRACEBACK,
    WARNING,
    Sandbox,
    assert_no_crash,
    assert_rejected,
    assert_writes_only_inside,
    bundled_edit,
    edit,
    edit_bytes,
    trace_scenario,
)

Files = Mapping[str, str | bytes]


def case(
    name: str, argv: tuple[str, ...], *expected: str, files: Files | None = None, bug: str = ""
) -> pytest.ParameterSet:
    """One named bad input: the files to write, the command, the texts its message must hold."""
    marks = [pytest.mark.xfail(strict=True, reason=f"BUG: {bug}")] if bug else []
    return pytest.param(dict(files or {}), argv, expected, id=name, marks=marks)


def check(sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]) -> None:
    if BASE_CHANGED in files:
        pytest.skip(str(files[BASE_CHANGED]))
    sandbox.write(
        {
            name: text.replace("@ROOT@", str(sandbox.root)) if isinstance(text, str) else text
            for name, text in files.items()
        }
    )
    assert_rejected(sandbox.run(*argv), *expected)


# -- scenario files (run) -------------------------------------------------------------------------------
RUN = ("run", "s.yaml", "-o", "out")
RUN_POISSON = ("run", "p.yaml", "-o", "out")


def scenario(old: str, new: str) -> Files:
    return {"s.yaml": edit(SCENARIO, old, new)}


def poisson(old: str, new: str) -> Files:
    return {"p.yaml": edit(POISSON, old, new)}


#: A 401-digit integer: YAML and JSON read it as a Python int, which no float holds.
BIG_INT = "1" + "0" * 400

SCENARIO_CASES = [
    case("not-utf8", RUN, "s.yaml", "byte 8", "UTF-8",
         files={"s.yaml": edit_bytes(SCENARIO, "name: tiny", b"name: ti\xffny")}),
    case("utf16-bom", RUN, "s.yaml", "UTF-8", files={"s.yaml": SCENARIO.encode("utf-16")}),
    case("nul-byte", RUN, "s.yaml", files={"s.yaml": edit_bytes(SCENARIO, "name: tiny", b"name: ti\x00ny")}),
    case("duplicate-key", RUN, "s.yaml:9", "duplicate key 'users'", "line 8",
         files=scenario("  users: 2\n", "  users: 2\n  users: 3\n")),
    case("duplicate-top-level-key", RUN, "s.yaml:15", "duplicate key 'name'",
         files={"s.yaml": SCENARIO + "name: other\n"}),
    case("nan-users", RUN, "s.yaml", "load.users", "finite", files=scenario("users: 2", "users: .nan")),
    case("inf-users", RUN, "s.yaml", "load.users", "finite", files=scenario("users: 2", "users: .inf")),
    case("overflow-max-requests", RUN, "s.yaml", "run.max_requests", "finite",
         files=scenario("max_requests: 20", "max_requests: 1.0e+400")),
    case("string-1e400-max-requests", RUN, "s.yaml", "run.max_requests", "integer",
         files=scenario("max_requests: 20", "max_requests: 1e400")),
    case("negative-max-requests", RUN, "s.yaml", "run.max_requests", "greater than or equal to 1",
         files=scenario("max_requests: 20", "max_requests: -1")),
    case("negative-seed", RUN, "s.yaml", "run.seed", "greater than or equal to 0",
         files=scenario("seed: 1", "seed: -1")),
    case("bare-duration", RUN, "s.yaml", "run.duration", "no unit", files=scenario("max_requests: 20", "duration: 10")),
    case("nan-duration", RUN, "s.yaml", "run.duration", "with a unit",
         files=scenario("max_requests: 20", "duration: .nan s")),
    case("overflowing-duration", RUN, "s.yaml", "run.duration", "too large",
         files=scenario("max_requests: 20", "duration: 1e400 s")),
    case("negative-duration", RUN, "s.yaml", "run.duration", "no time is negative",
         files=scenario("max_requests: 20", "duration: -5 s")),
    case("duration-wrong-dimension", RUN, "s.yaml", "run.duration", "time unit",
         files=scenario("max_requests: 20", "duration: 10 GB")),
    case("unknown-key", RUN, "s.yaml", "run.turbo", "unknown key",
         files=scenario("  seed: 1\n", "  seed: 1\n  turbo: true\n")),
    case("misspelled-top-level-key", RUN, "s.yaml", "nmae", "unknown key",
         files=scenario("name: tiny", "name: tiny\nnmae: x")),
    case("users-a-word", RUN, "s.yaml", "load.users", "valid integer", files=scenario("users: 2", "users: two")),
    case("users-fractional", RUN, "s.yaml", "load.users", "fractional", files=scenario("users: 2", "users: 2.5")),
    case("users-a-list", RUN, "s.yaml", "load.users", "valid integer", files=scenario("users: 2", "users: [2]")),
    case("users-null", RUN, "s.yaml", "load.users", files=scenario("users: 2", "users:")),
    case("users-zero", RUN, "s.yaml", "load.users", "greater than or equal to 1",
         files=scenario("users: 2", "users: 0")),
    case("users-boolean", RUN, "s.yaml", "load.users", "boolean", files=scenario("users: 2", "users: true")),
    case("chips-zero", RUN, "s.yaml", "deployment.chips", "greater than or equal to 1",
         files=scenario("chips: 1", "chips: 0")),
    case("chips-a-mapping", RUN, "s.yaml", "deployment.chips", files=scenario("chips: 1", "chips: {n: 1}")),
    case("empty-file", RUN, "s.yaml", "mapping", files={"s.yaml": ""}),
    case("only-a-comment", RUN, "s.yaml", "mapping", files={"s.yaml": "# nothing here\n"}),
    case("a-list", RUN, "s.yaml", "mapping", files={"s.yaml": "- name: tiny\n"}),
    case("a-bare-string", RUN, "s.yaml", "mapping", files={"s.yaml": "tiny\n"}),
    case("truncated-before-run", RUN, "s.yaml", "run", "Field required",
         files={"s.yaml": SCENARIO[: SCENARIO.index("run:")]}),
    case("truncated-flow-mapping", RUN, "s.yaml", "not valid YAML", files={"s.yaml": "{name: tiny, run: {seed: 1"}),
    case("tab-indentation", RUN, "s.yaml", "not valid YAML", files=scenario("  users: 2", "\tusers: 2")),
    case("python-object-tag", RUN, "s.yaml", "not valid YAML",
         files=scenario("name: tiny", "name: !!python/object/apply:os.getcwd []")),
    case("alias-bomb", RUN, "s.yaml", "unknown key",
         files={"s.yaml": SCENARIO + "x: &a [1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"x{i}: &a{i} [{', '.join(['*a' if i == 0 else f'*a{i - 1}'] * 8)}]\n" for i in range(8))}),
    case("unknown-distribution", RUN, "s.yaml", "requests.input_tokens", "'zipf'",
         files=scenario("{dist: constant, value: 64}", "{dist: zipf, a: 2}")),
    case("lognormal-sigma-1000", RUN, "s.yaml", "requests.input_tokens.sigma", "less than or equal to 10",
         files=scenario("{dist: constant, value: 64}", "{dist: lognormal, median: 64, sigma: 1000}")),
    case("uniform-reversed", RUN, "s.yaml", "requests.input_tokens", "high must be >= low",
         files=scenario("{dist: constant, value: 64}", "{dist: uniform, low: 64, high: 1}")),
    case("negative-length", RUN, "s.yaml", "requests.input_tokens.value", "greater than or equal to 0",
         files=scenario("value: 64", "value: -64")),
    case("zero-mean-length", RUN, "s.yaml", "input_tokens", "at least 1 token",
         files=scenario("value: 64", "value: 0")),
    case("nan-length", RUN, "s.yaml", "requests.input_tokens.value", "finite",
         files=scenario("value: 64", "value: .nan")),
    case("geometric-mean-below-one", RUN, "s.yaml", "requests.output_tokens.mean",
         files=scenario("{dist: constant, value: 8}", "{dist: geometric, mean: 0.5}")),
    case("no-duration-nor-max-requests", RUN, "s.yaml", "run.duration or run.max_requests",
         files=scenario("  max_requests: 20\n", "")),
    case("schema-version-2", RUN, "s.yaml", "schema_version", files={"s.yaml": "schema_version: 2\n" + SCENARIO}),
    case("unknown-load-kind", RUN, "s.yaml", "load", "'burst'", files=scenario("kind: closed", "kind: burst")),
    case("slo-bound-without-unit", RUN, "s.yaml", "slo.targets.0.max", "unit",
         files={"s.yaml": SCENARIO + "slo: {targets: [{metric: ttft_s, max: 1}]}\n"}),
    case("slo-two-bounds", RUN, "s.yaml", "slo.targets.0", "one bound",
         files={"s.yaml": SCENARIO + "slo: {targets: [{metric: ttft_s, max: 1 s, min: 0 s}]}\n"}),
    case("empty-classes", RUN, "s.yaml", "classes", files={"s.yaml": SCENARIO + "classes: []\n"}),
    case("warmup-longer-than-run", RUN_POISSON, "p.yaml", "warmup", "run.duration",
         files=poisson("duration: 2 s}", "duration: 2 s, warmup: 5 s}")),
    case("warmup-negative", RUN_POISSON, "p.yaml", "run.warmup",
         files=poisson("duration: 2 s}", "duration: 2 s, warmup: -1 s}")),
    case("rate-nan", RUN_POISSON, "p.yaml", "load.arrivals.rate_per_s", "finite",
         files=poisson("rate_per_s: 10", "rate_per_s: .nan")),
    case("rate-zero", RUN_POISSON, "p.yaml", "load.arrivals.rate_per_s", "greater than or equal to 0.000001",
         files=poisson("rate_per_s: 10", "rate_per_s: 0")),
    case("rate-steps-out-of-order", RUN_POISSON, "p.yaml", "load.arrivals", "time order",
         files=poisson("{process: poisson, rate_per_s: 10}",
                       "{process: steps, steps: [{at: 1 s, rate_per_s: 1}, {at: 0 s, rate_per_s: 2}]}")),
    case("gamma-burstiness-zero", RUN_POISSON, "p.yaml", "load.arrivals.burstiness", "greater than 0",
         files=poisson("{process: poisson, rate_per_s: 10}", "{process: gamma, rate_per_s: 10, burstiness: 0}")),
    case("set-nan", (*RUN, "--set", "load.users=.nan"), "load.users", "finite", files={"s.yaml": SCENARIO}),
    case("set-without-equals", (*RUN, "--set", "nonsense"), "--set 'nonsense'", "path=value",
         files={"s.yaml": SCENARIO}),
    case("set-through-a-value", (*RUN, "--set", "load.users.x=1"), "s.yaml", "--set load.users.x",
         files={"s.yaml": SCENARIO}),
    case("set-bad-yaml", (*RUN, "--set", "load.users=[1"), "--set", "not valid YAML", files={"s.yaml": SCENARIO}),
    case("set-list-index-out-of-range", (*RUN, "--set", "classes.5.name=x"), "s.yaml", files={"s.yaml": SCENARIO}),
    case("missing-file", ("run", "nosuch.yaml", "-o", "out"), "nosuch.yaml", "no such file"),
    case("a-folder", ("run", "sub", "-o", "out"), "sub", "is a folder", files={"sub/x.txt": "x"}),
    case("debug-flag-still-clean", ("--debug", *RUN), "s.yaml", "load.users",
         files=scenario("users: 2", "users: .nan")),
    case("users-10e400", RUN, "s.yaml", "load.users", files=scenario("users: 2", f"users: {BIG_INT}")),
    case("users-5000-digits", RUN, "s.yaml:8", "too long", files=scenario("users: 2", f"users: 1{'0' * 5000}")),
    case("max-requests-10e400", RUN, "s.yaml", "run.max_requests",
         files=scenario("max_requests: 20", f"max_requests: {BIG_INT}")),
    case("chips-10e400", RUN, "s.yaml", "deployment.chips", files=scenario("chips: 1", f"chips: {BIG_INT}")),
    # run-size limits: refused up front (within seconds), naming the limit and the way past it
    case("duration-1e308-poisson", RUN_POISSON, "limit", "--allow-large-runs",
         files=poisson("duration: 2 s", "duration: 3e7 s")),
    case("users-a-billion", RUN, "limit", "--allow-large-runs", files=scenario("users: 2", "users: 1000000000")),
    case("users-a-billion-set", (*RUN, "--set", "load.users=1000000000"), "limit", "--allow-large-runs",
         files={"s.yaml": SCENARIO}),
    case("duration-set-1e308", (*RUN_POISSON, "--set", "run.duration=3e7 s"), "limit", "--allow-large-runs",
         files={"p.yaml": POISSON}),
    case("replicas-a-million", RUN, "limit", "--allow-large-runs",
         files=scenario("chips: 1\n", "chips: 1\nreplicas: 1000000\n")),
    case("run-size-error-names-the-file", RUN_POISSON, "p.yaml", "run.duration", "--allow-large-runs",
         files=poisson("duration: 2 s", "duration: 3e7 s")),
    # profiles a scenario names
    case("unknown-hardware", RUN, "unknown hardware profile 'nvidia-h900'",
         files=scenario("hardware: nvidia-h100-sxm", "hardware: nvidia-h900")),
    case("unknown-model", RUN, "unknown model profile 'llama-9'",
         files=scenario("model: llama-3.1-8b", "model: llama-9")),
    case("model-does-not-fit", RUN, "does not fit", "needs at least",
         files=scenario("model: llama-3.1-8b", "model: llama-3.1-405b")),
    case("unknown-hardware-names-the-file-and-field", RUN, "s.yaml", "deployment.hardware",
         files=scenario("hardware: nvidia-h100-sxm", "hardware: nvidia-h900")),
    case("model-does-not-fit-names-the-file", RUN, "s.yaml",
         files=scenario("model: llama-3.1-8b", "model: llama-3.1-405b")),
    case("chips-two-billion", RUN, "more than the model's 32 layers", "at most 256 chips",
         files=scenario("chips: 1", "chips: 2147483648")),
    case("placement-error-names-the-file-and-field", RUN, "s.yaml", "deployment.chips",
         files=scenario("chips: 1", "chips: 2147483648")),
    case("request-longer-than-a-replica", RUN, "holds at most 131072 tokens",
         files=scenario("value: 8}", "value: 200000}")),
    case("request-longer-than-a-replica-names-the-file", RUN, "s.yaml",
         files=scenario("value: 8}", "value: 200000}")),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), SCENARIO_CASES)
def test_bad_scenario_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Scenario files: exit 2, one message naming the file and the field path, nothing written."""
    check(sandbox, files, argv, expected)


def test_run_size_limits_are_checked_within_seconds(sandbox: Sandbox) -> None:
    """A run far over the limits (a year of Poisson arrivals) is refused up front, not simulated."""
    sandbox.write({"p.yaml": edit(POISSON, "duration: 2 s", "duration: 3e7 s")})
    started = time.monotonic()
    outcome = sandbox.run(*RUN_POISSON)
    assert time.monotonic() - started < 5.0
    assert_rejected(outcome, "limit", "--allow-large-runs")


LENGTHS = "{dist: constant, value: 64}"
#: The tiny scenario on a GPU whose serving stack chunks prefill (vLLM on MI300X), where the estimate
#: behind the run-size check makes one entry per prefill chunk.
CHUNKED = edit(SCENARIO, "hardware: nvidia-h100-sxm", "hardware: amd-mi300x")


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param("{dist: constant, value: 1.0e+15}", id="constant-1e15"),
        pytest.param("{dist: exponential, mean: 1.0e+300}", id="exponential-mean-1e300"),
        pytest.param("{dist: lognormal, median: 64, sigma: 9.9}", id="lognormal-sigma-9.9"),
        pytest.param("{dist: constant, value: 1.0e+9}", id="constant-1e9-slow"),
        pytest.param("{dist: normal, mean: 64, std: 1.0e+300}", id="normal-std-1e300-hangs"),
        pytest.param("{dist: constant, value: 9223372036854775808}", id="constant-2-pow-63"),
        pytest.param("{dist: constant, value: 1.0e+6}", id="constant-1e6"),
        pytest.param("{dist: constant, value: 16777217}", id="constant-one-over-2-pow-24"),
    ],
)
def test_absurd_request_lengths_are_refused_within_seconds(sandbox: Sandbox, spec: str) -> None:
    """Lengths no model holds (a mean of 1e15 tokens, a spread of 1e300): exit 2 within 2 s, naming them."""
    sandbox.write({"s.yaml": edit(CHUNKED, LENGTHS, spec)})
    assert_rejected(sandbox.run(*RUN, timeout_s=2.0), "tokens")


# -- hardware and model profiles ------------------------------------------------------------------------
ESTIMATE_HW = ("--hardware-dir", "hw", "estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
ESTIMATE_MD = ("--model-dir", "md", "estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
HW = "hw/nvidia-h100-sxm.yaml"
MD = "md/llama-3.1-8b.yaml"


def hardware(old: str, new: str | bytes) -> Files:
    return bundled_edit(H100, HW, old, new)


def model(old: str, new: str | bytes) -> Files:
    return bundled_edit(LLAMA_8B, MD, old, new)


_TRUNCATED_H100 = H100[: H100.find("bandwidth: {value: 3.35") + len("bandwidth: {value: 3.35")]

HARDWARE_CASES = [
    case("not-utf8", ESTIMATE_HW, HW, "UTF-8", files=hardware("family: gpu", b"family: g\xe9u")),
    case("duplicate-key", ESTIMATE_HW, f"{HW}:6", "duplicate key 'family'",
         files=hardware("family: gpu", "family: gpu\nfamily: tpu")),
    case("duplicate-key-in-flow-mapping", ESTIMATE_HW, HW, "duplicate key 'value'",
         files=hardware("bandwidth: {value: 450 GB/s", "bandwidth: {value: 450 GB/s, value: 3 GB/s")),
    case("bare-bandwidth", ESTIMATE_HW, HW, "memory.1.bandwidth.value", "no unit",
         files=hardware("value: 3.35 TB/s", "value: 3.35")),
    case("nan-bandwidth", ESTIMATE_HW, HW, "memory.1.bandwidth.value",
         files=hardware("value: 3.35 TB/s", "value: .nan TB/s")),
    case("inf-bandwidth", ESTIMATE_HW, HW, "memory.1.bandwidth.value",
         files=hardware("value: 3.35 TB/s", "value: .inf")),
    case("overflowing-bandwidth", ESTIMATE_HW, HW, "memory.1.bandwidth.value", "too large",
         files=hardware("value: 3.35 TB/s", "value: 1e400 TB/s")),
    case("negative-bandwidth", ESTIMATE_HW, HW, "memory.1.bandwidth.value", "physical range of a bandwidth",
         files=hardware("value: 3.35 TB/s", "value: -3.35 TB/s")),
    case("bandwidth-in-bytes", ESTIMATE_HW, HW, "memory.1.bandwidth.value", "not a bandwidth unit",
         files=hardware("value: 3.35 TB/s", "value: 3.35 TB")),
    case("capacity-as-bandwidth", ESTIMATE_HW, HW, "memory.1.capacity.value", "not a bytes unit",
         files=hardware("value: 80 GB,", "value: 80 GB/s,")),
    case("nan-efficiency", ESTIMATE_HW, HW, "memory.1.efficiency.value", "finite",
         files=hardware("value: 0.85,", "value: .nan,")),
    case("overflowing-efficiency", ESTIMATE_HW, HW, "memory.1.efficiency.value", "finite",
         files=hardware("value: 0.85,", "value: 1.0e+400,")),
    case("negative-efficiency", ESTIMATE_HW, HW, "memory.1.efficiency.value", "greater than or equal to 0.01",
         files=hardware("value: 0.85,", "value: -1,")),
    case("efficiency-above-one", ESTIMATE_HW, HW, "memory.1.efficiency.value", "less than or equal to 1",
         files=hardware("value: 0.85,", "value: 1.5,")),
    case("efficiency-a-string", ESTIMATE_HW, HW, "memory.1.efficiency.value",
         files=hardware("value: 0.85,", "value: high,")),
    case("zero-max-batch", ESTIMATE_HW, HW, "execution.max_batch_size.value",
         files=hardware("value: 512,", "value: 0,")),
    case("fractional-cores", ESTIMATE_HW, HW, "compute.cores.value", "fractional",
         files=hardware("value: 132,", "value: 1.5,")),
    case("bare-power", ESTIMATE_HW, HW, "power.chip.value", "no unit", files=hardware("value: 700 W", "value: 700")),
    case("nan-price", ESTIMATE_HW, HW, "price.rental_usd_per_chip_hour.value", "finite",
         files=hardware("value: 2.5,", "value: .nan,")),
    case("unknown-key", ESTIMATE_HW, HW, "execution.turbo", "unknown key",
         files=hardware("  layer_pipelined: false", "  layer_pipelined: false\n  turbo: true")),
    case("misspelled-key", ESTIMATE_HW, HW, "family", files=hardware("family: gpu", "famly: gpu")),
    case("family-a-list", ESTIMATE_HW, HW, "family", files=hardware("family: gpu", "family: [gpu]")),
    case("id-mismatch", ESTIMATE_HW, HW, "id: is 'other'", files=hardware("id: nvidia-h100-sxm", "id: other")),
    case("boolean-a-number", ESTIMATE_HW, HW, "execution.layer_pipelined", "boolean",
         files=hardware("layer_pipelined: false", "layer_pipelined: 3")),
    case("undefined-source", ESTIMATE_HW, HW, "'nowhere'",
         files=hardware("source: pcie, confidence: derived", "source: nowhere, confidence: derived")),
    case("bad-confidence", ESTIMATE_HW, HW, "confidence",
         files=hardware("700 W, source: datasheet, confidence: datasheet", "700 W, source: datasheet, confidence: ok")),
    case("empty-file", ESTIMATE_HW, HW, "mapping", files={HW: ""}),
    case("a-list", ESTIMATE_HW, HW, "mapping", files={HW: "- 1\n- 2\n"}),
    case("truncated", ESTIMATE_HW, HW, "not valid YAML", files={HW: _TRUNCATED_H100}),
    case("profile-is-a-folder", ESTIMATE_HW, HW, "is a folder", files={f"{HW}/x.txt": "x"}),
    case("profiles-lists-a-bad-profile", ("--hardware-dir", "hw", "profiles"), HW, "memory.1.bandwidth.value",
         files=hardware("value: 3.35 TB/s", "value: 3.35")),
    case("profiles-json-lists-a-bad-profile", ("--hardware-dir", "hw", "profiles", "--json"), HW, "family",
         files=hardware("family: gpu", "family: 3")),
    case("hardware-dir-missing", ("--hardware-dir", "nosuchdir", "profiles"), "nosuchdir", "no such folder"),
    case("hardware-dir-a-file", ("--hardware-dir", "afile", "profiles"), "afile", files={"afile": "x"}),
    case("hardware-dir-missing-for-demo", ("--hardware-dir", "nosuchdir", "demo", "--no-agents", "-o", "d"),
         "nosuchdir", "no such folder"),
]  # fmt: skip

MODEL_CASES = [
    case("not-utf8", ESTIMATE_MD, MD, "UTF-8",
         files=model("num_layers: 32", b"num_layers: 3\x932")),
    case("duplicate-key", ESTIMATE_MD, MD, "duplicate key 'num_layers'",
         files=model("num_layers: 32", "num_layers: 32\nnum_layers: 40")),
    case("nan-layers", ESTIMATE_MD, MD, "num_layers", files=model("num_layers: 32", "num_layers: .nan")),
    case("zero-layers", ESTIMATE_MD, MD, "num_layers", files=model("num_layers: 32", "num_layers: 0")),
    case("negative-hidden-size", ESTIMATE_MD, MD, "hidden_size",
         files=model("hidden_size: 4096", "hidden_size: -4096")),
    case("overflowing-context", ESTIMATE_MD, MD, "max_context_tokens",
         files=model("max_context_tokens: 131072", "max_context_tokens: 1.0e+400")),
    case("heads-a-string", ESTIMATE_MD, MD, "attention.num_heads", files=model("num_heads: 32", "num_heads: many")),
    case("unknown-attention", ESTIMATE_MD, MD, "attention", files=model("kind: gqa", "kind: linear")),
    case("unknown-key", ESTIMATE_MD, MD, "moe_experts", "unknown key",
         files=model("num_layers: 32", "num_layers: 32\nmoe_experts: 8")),
    case("nan-params", ESTIMATE_MD, MD, "published.params_total.value", "finite",
         files=model("{value: 8.03e9, source: config, confidence: datasheet}\n  params_active",
                     "{value: .nan, source: config, confidence: datasheet}\n  params_active")),
    case("id-mismatch", ESTIMATE_MD, MD, "id: is 'llama'", files=model("id: llama-3.1-8b", "id: llama")),
    case("empty-file", ESTIMATE_MD, MD, "mapping", files={MD: ""}),
    case("vocab-10e400", ESTIMATE_MD, MD, "vocab_size", files=model("vocab_size: 128256", f"vocab_size: {BIG_INT}")),
    case("model-dir-missing", ("--model-dir", "nosuch", "profiles"), "nosuch", "no such folder"),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), HARDWARE_CASES)
def test_bad_hardware_profile_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Hardware profiles (``--hardware-dir``): exit 2 naming the profile file and the field path."""
    check(sandbox, files, argv, expected)


@pytest.mark.parametrize(("files", "argv", "expected"), MODEL_CASES)
def test_bad_model_profile_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Model profiles (``--model-dir``): exit 2 naming the profile file and the field path."""
    check(sandbox, files, argv, expected)


# -- workloads (the CLI reads only bundled ones; an absolute id reaches a user's file the same way) ------
def agents_scenario(workload: str) -> str:
    """The tiny scenario with one agent running tasks of ``workload`` (a bundled id, or an absolute path)."""
    requests = SCENARIO[SCENARIO.index("load:") : SCENARIO.index("run:")]
    return edit(SCENARIO, requests, f"load: {{kind: agents, workload: {workload}, agents: 1}}\n")


WORKLOAD_CASES = [
    case("unknown-workload", RUN, "unknown workload profile 'chit-chat'",
         files={"s.yaml": agents_scenario("chit-chat")}),
    case("not-utf8", RUN, "wl/w.yaml", "UTF-8",
         files={"s.yaml": agents_scenario("@ROOT@/wl/w"), "wl/w.yaml": b"id: w\nname: \xff\n"}),
    case("duplicate-key", RUN, "wl/w.yaml", "duplicate key 'id'",
         files={"s.yaml": agents_scenario("@ROOT@/wl/w"), "wl/w.yaml": "id: w\nid: w\n"}),
    case("agents-and-rate", RUN, "s.yaml", "exactly one of agents",
         files={"s.yaml": edit(agents_scenario("chat"), "agents: 1", "agents: 1, tasks_per_s: 2")}),
    case("agents-zero", RUN, "s.yaml", "load.agents",
         files={"s.yaml": edit(agents_scenario("chat"), "agents: 1", "agents: 0")}),
    case("ramp-open-loop", RUN, "s.yaml", "ramp_s spreads the starts of closed-loop agents",
         files={"s.yaml": edit(agents_scenario("chat"), "agents: 1", "tasks_per_s: 2, ramp_s: 10 s")}),
    case("ramp-past-duration", RUN, "s.yaml", "load.ramp_s: 900 s is past run.duration (600 s)",
         files={"s.yaml": edit(edit(agents_scenario("chat"), "agents: 1", "agents: 1, ramp_s: 900 s"),
                               "max_requests: 20", "duration: 600 s")}),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), WORKLOAD_CASES)
def test_bad_workload_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Workloads an agent load names: exit 2 naming the workload file (or the scenario field)."""
    check(sandbox, files, argv, expected)


# -- traces ---------------------------------------------------------------------------------------------
RUN_TRACE = ("run", "t.yaml", "-o", "out")


def trace(kind: str, text: str | bytes, extra: str = "") -> Files:
    """A scenario replaying ``text`` as a trace of ``kind``."""
    return {"t.yaml": trace_scenario(kind, extra), TRACE_FILES[kind]: text}


def mooncake(old: str, new: str) -> Files:
    return trace("mooncake", edit(TRACE_TEXT["mooncake"], old, new))


def azure(old: str, new: str) -> Files:
    return trace("azure", edit(TRACE_TEXT["azure"], old, new))


def weka(old: str, new: str) -> Files:
    return trace("weka", edit(TRACE_TEXT["weka"], old, new))


def graph(old: str, new: str) -> Files:
    return trace("taskgraph", edit(TRACE_TEXT["taskgraph"], old, new))


MC, AZ, WK, TG = "trace.jsonl", "trace.csv", "trace.json", "graphs.jsonl"

TRACE_CASES = [
    case("mooncake-nan", RUN_TRACE, f"{MC}:2", "NaN", files=mooncake('"timestamp": 500', '"timestamp": NaN')),
    case("mooncake-infinity", RUN_TRACE, f"{MC}:2", "Infinity",
         files=mooncake('"timestamp": 500', '"timestamp": Infinity')),
    case("mooncake-overflow", RUN_TRACE, f"{MC}:2", "1e400", files=mooncake('"timestamp": 500', '"timestamp": 1e400')),
    case("mooncake-string-length", RUN_TRACE, f"{MC}:2", "input_length", "number",
         files=mooncake('"input_length": 120', '"input_length": "many"')),
    case("mooncake-null-length", RUN_TRACE, f"{MC}:2", "input_length",
         files=mooncake('"input_length": 120', '"input_length": null')),
    case("mooncake-zero-output", RUN_TRACE, f"{MC}:2", "output_length", "positive",
         files=mooncake('"output_length": 12', '"output_length": 0')),
    case("mooncake-negative-timestamp", RUN_TRACE, f"{MC}:2", "timestamp", "non-negative",
         files=mooncake('"timestamp": 500', '"timestamp": -500')),
    case("mooncake-missing-hashes", RUN_TRACE, f"{MC}:1", "hash_ids", "missing",
         files=mooncake(', "hash_ids": [1]}', "}")),
    case("mooncake-fractional-hash", RUN_TRACE, f"{MC}:1", "hash_ids",
         files=mooncake('"hash_ids": [1]}', '"hash_ids": [1.5]}')),
    case("mooncake-duplicate-key", RUN_TRACE, f"{MC}:1", "duplicate key 'timestamp'",
         files=mooncake('{"timestamp": 0,', '{"timestamp": 0, "timestamp": 1,')),
    case("mooncake-array-line", RUN_TRACE, f"{MC}:1", "JSON object", files=trace("mooncake", "[1, 2]\n")),
    case("mooncake-truncated", RUN_TRACE, f"{MC}:2", "not valid JSON",
         files=trace("mooncake", TRACE_TEXT["mooncake"][:100])),
    case("mooncake-not-utf8", RUN_TRACE, MC, "UTF-8",
         files=trace("mooncake", TRACE_TEXT["mooncake"].encode() + b"\xff\n")),
    case("mooncake-empty", RUN_TRACE, MC, "no requests", files=trace("mooncake", "")),
    case("mooncake-blank-lines", RUN_TRACE, MC, "no requests", files=trace("mooncake", "\n\n  \n")),
    case("mooncake-missing-file", RUN_TRACE, "t.yaml", "load.path", "does not exist",
         files={"t.yaml": trace_scenario("mooncake")}),
    case("mooncake-a-folder", RUN_TRACE, MC, "is a folder",
         files={"t.yaml": trace_scenario("mooncake"), f"{MC}/x": "x"}),
    case("window-holds-nothing", RUN_TRACE, "window", "holds no request",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", window: [100 s, 200 s]")),
    case("window-holds-nothing-names-the-file", RUN_TRACE, MC, "load.window",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", window: [100 s, 200 s]")),
    case("window-reversed", RUN_TRACE, "t.yaml", "window", "before end",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", window: [2 s, 1 s]")),
    case("window-bare-numbers", RUN_TRACE, "t.yaml", "load.window", "no unit",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", window: [0, 1]")),
    case("window-one-bound", RUN_TRACE, "t.yaml", "load.window",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", window: [0 s]")),
    case("rate-scale-zero", RUN_TRACE, "t.yaml", "load.rate_scale",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", rate_scale: 0")),
    case("rate-scale-nan", RUN_TRACE, "t.yaml", "load.rate_scale", "finite",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", rate_scale: .nan")),
    case("sample-above-one", RUN_TRACE, "t.yaml", "load.sample",
         files=trace("mooncake", TRACE_TEXT["mooncake"], ", sample: 1.5")),
    case("unknown-format", RUN_TRACE, "t.yaml", "load.format",
         files={"t.yaml": edit(trace_scenario("mooncake"), "format: mooncake", "format: sharegpt"),
                MC: TRACE_TEXT["mooncake"]}),
    case("azure-bad-timestamp", RUN_TRACE, f"{AZ}:3", "TIMESTAMP",
         files=azure("2023-11-16 18:15:50.9951690", "yesterday")),
    case("azure-nan-tokens", RUN_TRACE, f"{AZ}:3", "ContextTokens", "finite", files=azure("396", "NaN")),
    case("azure-negative-tokens", RUN_TRACE, f"{AZ}:3", "GeneratedTokens", files=azure("396,109", "396,-109")),
    case("azure-missing-cell", RUN_TRACE, f"{AZ}:3", "expected 3 cells", files=azure(",396,109", ",396")),
    case("azure-wrong-header", RUN_TRACE, f"{AZ}:1", "header", files=azure("ContextTokens", "Context")),
    case("azure-header-only", RUN_TRACE, AZ, "no requests",
         files=trace("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n")),
    case("azure-empty", RUN_TRACE, AZ, "empty file", files=trace("azure", "")),
    case("azure-not-utf8", RUN_TRACE, AZ, "UTF-8",
         files=trace("azure", edit_bytes(TRACE_TEXT["azure"], "374", b"3\xc074"))),
    case("weka-negative-think-time", RUN_TRACE, WK, "requests.1", "think_time", ">= 0",
         files=weka('"think_time": 0.5', '"think_time": -0.5')),
    case("weka-nan-think-time", RUN_TRACE, WK, "NaN", files=weka('"think_time": 0.5', '"think_time": NaN')),
    case("weka-string-think-time", RUN_TRACE, WK, "think_time", "number",
         files=weka('"think_time": 0.5', '"think_time": "slow"')),
    case("weka-no-requests", RUN_TRACE, WK, "requests", "non-empty",
         files=trace("weka", '{"id": "w1", "requests": []}')),
    case("weka-only-subagents", RUN_TRACE, WK, "no model call",
         files=trace("weka", '{"id": "w1", "requests": [{"type": "subagent", "requests": [{"in": 5, "out": 5}]}]}')),
    case("weka-request-not-an-object", RUN_TRACE, WK, "requests.0",
         files=trace("weka", '{"id": "w1", "requests": [7]}')),
    case("weka-zero-block-size", RUN_TRACE, WK, "block_size", files=weka('"block_size": 64', '"block_size": 0')),
    case("weka-truncated", RUN_TRACE, WK, "not valid JSON", files=trace("weka", TRACE_TEXT["weka"][:60])),
    case("weka-a-list", RUN_TRACE, WK, "JSON object", files=trace("weka", "[]")),
    case("weka-empty-folder", RUN_TRACE, "sessions", "no *.json",
         files={"t.yaml": edit(trace_scenario("weka"), WK, "sessions"), "sessions/readme.txt": "x"}),
    case("taskgraph-negative-tool-time", RUN_TRACE, f"{TG}:1", "tool_s", files=graph('"tool_s": 0.1', '"tool_s": -1')),
    case("taskgraph-cycle", RUN_TRACE, f"{TG}:1", "cycle", files=graph('"after": ["plan"]', '"after": ["write"]')),
    case("taskgraph-unknown-step", RUN_TRACE, f"{TG}:1", "'zz'", files=graph('"after": ["plan"]', '"after": ["zz"]')),
    case("taskgraph-duplicate-step", RUN_TRACE, f"{TG}:1", "twice", files=graph('"id": "write"', '"id": "plan"')),
    case("taskgraph-nan-arrival", RUN_TRACE, f"{TG}:1", "NaN", files=graph('"arrival_s": 0.0', '"arrival_s": NaN')),
    case("taskgraph-string-arrival", RUN_TRACE, f"{TG}:1", "arrival_s",
         files=graph('"arrival_s": 0.0', '"arrival_s": "soon"')),
    case("taskgraph-overflow", RUN_TRACE, f"{TG}:1", "overflows",
         files=graph('"input_tokens": 100', '"input_tokens": 1e400')),
    case("taskgraph-empty", RUN_TRACE, TG, "no tasks", files=trace("taskgraph", "")),
    case("taskgraph-input-10e400", RUN_TRACE, f"{TG}:1", "input_tokens",
         files=graph('"input_tokens": 150', f'"input_tokens": {BIG_INT}')),
    case("mooncake-output-1e308", RUN_TRACE, f"{MC}:3", "output_length",
         files=mooncake('"output_length": 8', '"output_length": 1e+308')),
    case("mooncake-input-2-pow-63", RUN_TRACE, f"{MC}:3", "input_length",
         files=mooncake('"input_length": 90', '"input_length": 9223372036854775808')),
    case("azure-context-1e22", RUN_TRACE, f"{AZ}:2", "ContextTokens", files=azure("374", "1e22")),
    case("mooncake-input-5000-digits", RUN_TRACE, f"{MC}:3", "too long",
         files=mooncake('"input_length": 90', f'"input_length": 1{"0" * 5000}')),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), TRACE_CASES)
def test_bad_trace_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Traces (Azure CSV, Mooncake JSONL, WEKA JSON, task graphs): exit 2 naming file:line and field."""
    check(sandbox, files, argv, expected)


def test_an_out_of_order_trace_is_replayed_with_a_warning(sandbox: Sandbox) -> None:
    """Out-of-order timestamps are not an error: exit 0, one ``infersim: warning:`` naming the trace."""
    sandbox.write(mooncake('"timestamp": 500', '"timestamp": 5000'))
    outcome = sandbox.run(*RUN_TRACE)
    assert_no_crash(outcome)
    assert outcome.code == 0, outcome
    assert f"{WARNING}" in outcome.err and MC in outcome.err and ERROR not in outcome.err, outcome
    assert_writes_only_inside(outcome, "out")


# -- empirical lengths ----------------------------------------------------------------------------------
RUN_EMPIRICAL = ("run", "e.yaml", "-o", "out")


def empirical(values: str | bytes, spec: str = "{dist: empirical, path: lengths.txt}") -> Files:
    return {"e.yaml": edit(EMPIRICAL, "{dist: empirical, path: lengths.txt}", spec), "lengths.txt": values}


CSV_SPEC = "{dist: empirical, path: lengths.csv, column: prompt}"

EMPIRICAL_CASES = [
    case("missing-file", RUN_EMPIRICAL, "e.yaml", "requests.input_tokens", "nosuch.txt", "no such file",
         files=empirical(LENGTHS_TXT, "{dist: empirical, path: nosuch.txt}")),
    case("bad-number", RUN_EMPIRICAL, "lengths.txt:2", "'abc'", files=empirical("64\nabc\n")),
    case("nan", RUN_EMPIRICAL, "lengths.txt:2", "finite", files=empirical("64\nnan\n")),
    case("infinity", RUN_EMPIRICAL, "lengths.txt:1", "finite", files=empirical("inf\n")),
    case("overflow", RUN_EMPIRICAL, "lengths.txt:2", "finite", files=empirical("64\n1e400\n")),
    case("negative", RUN_EMPIRICAL, "lengths.txt:2", ">= 0", files=empirical("64\n-3\n")),
    case("no-rows", RUN_EMPIRICAL, "lengths.txt", "no values", files=empirical("\n\n")),
    case("empty-file", RUN_EMPIRICAL, "lengths.txt", "no values", files=empirical("")),
    case("not-utf8", RUN_EMPIRICAL, "lengths.txt", "UTF-8", files=empirical(b"64\n\xff\n")),
    case("a-folder", RUN_EMPIRICAL, "lengths.txt", "is a folder", files={"e.yaml": EMPIRICAL, "lengths.txt/x": "1"}),
    case("all-zero", RUN_EMPIRICAL, "e.yaml", "at least 1 token", files=empirical("0\n0\n")),
    case("value-1e22", RUN_EMPIRICAL, "lengths.txt", files=empirical("64\n128\n1e22\n")),
    case("missing-column", RUN_EMPIRICAL, "lengths.csv:1", "'tokens'",
         files={**empirical(LENGTHS_TXT, CSV_SPEC.replace("prompt", "tokens")), "lengths.csv": LENGTHS_CSV}),
    case("csv-no-rows", RUN_EMPIRICAL, "lengths.csv", "no values",
         files={**empirical(LENGTHS_TXT, CSV_SPEC), "lengths.csv": "prompt,answer\n"}),
    case("csv-missing-cell", RUN_EMPIRICAL, "lengths.csv:3", "cells",
         files={**empirical(LENGTHS_TXT, CSV_SPEC), "lengths.csv": "prompt,answer\n64,8\n128\n"}),
    case("csv-bad-cell", RUN_EMPIRICAL, "lengths.csv:2", "prompt",
         files={**empirical(LENGTHS_TXT, CSV_SPEC), "lengths.csv": "prompt,answer\nlots,8\n"}),
    case("unknown-key", RUN_EMPIRICAL, "e.yaml", "colum", "unknown key",
         files=empirical(LENGTHS_TXT, "{dist: empirical, path: lengths.txt, colum: a}")),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), EMPIRICAL_CASES)
def test_bad_empirical_lengths_are_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Empirical length files: exit 2 naming the length file (and line or column)."""
    check(sandbox, files, argv, expected)


# -- measurement tables (validate, calibrate) -----------------------------------------------------------
VALIDATE = ("validate", "m.csv")
CALIBRATE = ("calibrate", "--hardware", "nvidia-h100-sxm", "--table", "m.csv", "-o", "cal")
ROW1 = "X1,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,512,128,1,per_user_output_tok_s,150"


def table(old: str, new: str) -> Files:
    return {"m.csv": edit(TABLE, old, new)}


TABLE_CASES = [
    case("missing-cell", VALIDATE, "m.csv:2", "expected 11 cells", files=table(",150\n", "\n")),
    case("extra-cell", VALIDATE, "m.csv:2", "expected 11 cells", files=table(",150\n", ",150,9\n")),
    case("duplicate-id", VALIDATE, "m.csv:3", "id", "'X1'", "unique", files=table("X2,", "X1,")),
    case("empty-id", VALIDATE, "m.csv:2", "id", "empty", files=table("X1,", ",")),
    case("negative-concurrency", VALIDATE, "m.csv:2", "concurrency", files=table("128,1,per_user", "128,-4,per_user")),
    case("zero-concurrency", VALIDATE, "m.csv:2", "concurrency", files=table("128,1,per_user", "128,0,per_user")),
    case("word-concurrency", VALIDATE, "m.csv:2", "concurrency", files=table("128,1,per_user", "128,many,per_user")),
    case("nan-value", VALIDATE, "m.csv:2", "value", "finite", files=table(",150\n", ",NaN\n")),
    case("inf-value", VALIDATE, "m.csv:2", "value", "finite", files=table(",150\n", ",inf\n")),
    case("overflowing-value", VALIDATE, "m.csv:2", "value", "finite", files=table(",150\n", ",1e400\n")),
    case("negative-value", VALIDATE, "m.csv:2", "value", "positive", files=table(",150\n", ",-5\n")),
    case("zero-value", VALIDATE, "m.csv:2", "value", "positive", files=table(",150\n", ",0\n")),
    case("word-value", VALIDATE, "m.csv:2", "value", "'fast'", files=table(",150\n", ",fast\n")),
    case("zero-chips", VALIDATE, "m.csv:2", "chips",
         files=table("sxm,1,llama-3.1-8b,bf16,none,512,128,1,per", "sxm,0,llama-3.1-8b,bf16,none,512,128,1,per")),
    case("fractional-chips", VALIDATE, "m.csv:2", "chips", "integer",
         files=table("sxm,1,llama-3.1-8b,bf16,none,512,128,1,per", "sxm,1.5,llama-3.1-8b,bf16,none,512,128,1,per")),
    case("zero-input-tokens", VALIDATE, "m.csv:2", "input_tokens",
         files=table("none,512,128,1,per", "none,0,128,1,per")),
    case("unknown-metric", VALIDATE, "m.csv:2", "metric", files=table("per_user_output_tok_s", "tokens_per_minute")),
    case("unknown-weights", VALIDATE, "m.csv:2", "weights",
         files=table("8b,bf16,none,512,128,1,per", "8b,bf17,none,512,128,1,per")),
    case("unknown-spec-decoding", VALIDATE, "m.csv:2", "spec_decoding",
         files=table("bf16,none,512,128,1,per", "bf16,maybe,512,128,1,per")),
    case("header-only", VALIDATE, "m.csv", "no measurement rows", files={"m.csv": TABLE_HEADER}),
    case("empty-file", VALIDATE, "m.csv", "empty file", files={"m.csv": ""}),
    case("missing-columns", VALIDATE, "m.csv:1", "missing columns",
         files={"m.csv": "id,hardware\nX1,nvidia-h100-sxm\n"}),
    case("not-utf8", VALIDATE, "m.csv", "UTF-8", files={"m.csv": edit_bytes(TABLE, "X2", b"X\xfe2")}),
    case("unterminated-quote", VALIDATE, "m.csv", "not valid CSV", files=table(",150\n", ',"150\n')),
    case("missing-file", ("validate", "nosuch.csv"), "nosuch.csv", "no such file"),
    case("a-folder", ("validate", "tables"), "tables", "is a folder", files={"tables/m.csv": TABLE}),
    case("calibrate-nan-value", CALIBRATE, "m.csv:2", "value", files=table(",150\n", ",NaN\n")),
    case("calibrate-missing-table",
         ("calibrate", "--hardware", "nvidia-h100-sxm", "--table", "nosuch.csv", "-o", "cal"), "nosuch.csv",
         "no such file"),
    case("calibrate-unknown-row", (*CALIBRATE, "--rows", "NOPE1"), "--rows", "NOPE1", files={"m.csv": TABLE}),
    case("calibrate-no-rows-given", (*CALIBRATE, "--rows", ","), "--rows", files={"m.csv": TABLE}),
    case("calibrate-four-parameters-one-row", (*CALIBRATE, "--rows", "X1", "--fit", "a,b,c,d"),
         "cannot fit hardware parameter 'a'", "fittable: compute.efficiency", files={"m.csv": TABLE}),
    case("calibrate-more-parameters-than-rows",  # the two named, plus the stack's fitted ones (--shared's default)
         (*CALIBRATE, "--rows", "X1", "--fit", "compute.efficiency,interconnect.latency"),
         "cannot be identified from 1 row", "nvidia-h100-sxm.interconnect.latency", files={"m.csv": TABLE}),
    case("calibrate-unknown-tier", (*CALIBRATE, "--rows", "X1,X2", "--fit", "memory.nosuch.efficiency"),
         "memory.nosuch.efficiency", files={"m.csv": TABLE}),
    case("calibrate-fit-names-nothing", (*CALIBRATE, "--rows", "X1", "--fit", ",,"), "--fit: names no parameter",
         files={"m.csv": TABLE}),
    case("calibrate-unknown-hardware", ("calibrate", "--hardware", "tpu-v9", "-o", "cal"),
         "unknown hardware profile 'tpu-v9'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(("128,1,per_user", "128,1000000000000000000,per_user"), "outside the physical range",
                     id="concurrency-1e18"),
        pytest.param(("128,1,per_user", "128,10000000000000000000000,per_user"), "2**63", id="concurrency-1e22"),
        pytest.param(("none,512,128,1,per", "none,999999999,128,1,per"), "GB of KV", id="input-beyond-the-kv-cache"),
    ],
)  # fmt: skip
def test_a_row_that_cannot_be_predicted_is_listed_with_its_reason(
    sandbox: Sandbox, change: tuple[str, str], reason: str
) -> None:
    """``validate`` reports a row it cannot predict (exit 0, "not predicted" and why), never drops it."""
    sandbox.write(table(*change))
    outcome = sandbox.run(*VALIDATE)
    assert_no_crash(outcome)
    assert outcome.code == 0 and not outcome.added, outcome
    assert "not predicted X1" in outcome.out and reason in outcome.out, outcome


@pytest.mark.parametrize(("files", "argv", "expected"), TABLE_CASES)
def test_bad_measurement_table_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Measurement CSVs and calibrate's flags: exit 2 naming file:line and column (or the flag)."""
    check(sandbox, files, argv, expected)


# -- sweeps ---------------------------------------------------------------------------------------------
SWEEP_RUN = ("sweep", "sw.yaml", "--jobs", "1", "-o", "out")


GRID = "grid:\n  load.users: [1, 2]\n"


def sweep(old: str, new: str, base: str = SCENARIO) -> Files:
    return {"sw.yaml": edit(SWEEP, old, new), "s.yaml": base, "p.yaml": POISSON}


SWEEP_CASES = [
    case("metric-typo", SWEEP_RUN, "sw.yaml", "metrics.0", "'ttft_s.p5O'", "ttft_s.p50",
         files=sweep("metrics: [ttft_s.p50", "metrics: [ttft_s.p5O")),
    case("no-metrics", SWEEP_RUN, "sw.yaml", "metrics",
         files=sweep("metrics: [ttft_s.p50, output_tok_s]", "metrics: []")),
    case("empty-grid-values", SWEEP_RUN, "sw.yaml", "grid.load.users", "empty", files=sweep("[1, 2]", "[]")),
    case("empty-sweep", SWEEP_RUN, "sw.yaml", "empty", files=sweep("grid:\n  load.users: [1, 2]\n", "")),
    case("zero-replications", SWEEP_RUN, "sw.yaml", "replications",
         files=sweep("metrics:", "replications: 0\nmetrics:")),
    case("sample-range-reversed", SWEEP_RUN, "sw.yaml", "sample.ranges.load.users", "low < high",
         files=sweep(GRID, "sample: {points: 2, ranges: {load.users: {low: 5, high: 1}}}\n")),
    case("sample-range-infinite", SWEEP_RUN, "sw.yaml", "sample.ranges.load.users.high", "finite",
         files=sweep(GRID, "sample: {points: 2, ranges: {load.users: {low: 1, high: .inf}}}\n")),
    case("sample-zero-points", SWEEP_RUN, "sw.yaml", "sample.points",
         files=sweep(GRID, "sample: {points: 0, ranges: {load.users: {low: 1, high: 4}}}\n")),
    case("missing-scenario", SWEEP_RUN, "nosuch.yaml", "no such file",
         files=sweep("scenario: s.yaml", "scenario: nosuch.yaml")),
    case("scenario-a-folder", SWEEP_RUN, "sub", "is a folder",
         files={**sweep("scenario: s.yaml", "scenario: sub"), "sub/x": "x"}),
    case("scenario-empty-path", SWEEP_RUN, "is a folder", files=sweep("scenario: s.yaml", "scenario: ''")),
    case("scenario-path-names-the-sweep-file", SWEEP_RUN, "sw.yaml", "scenario",
         files=sweep("scenario: s.yaml", "scenario: ''")),
    case("grid-misspelled-path", SWEEP_RUN, "load.userz", "unknown key", files=sweep("load.users:", "load.userz:")),
    case("grid-nan", SWEEP_RUN, "load.users", "finite", files=sweep("[1, 2]", "[.nan]")),
    case("grid-error-names-the-sweep-file", SWEEP_RUN, "sw.yaml", "grid", files=sweep("[1, 2]", "[.nan]")),
    case("grid-users-a-billion", SWEEP_RUN, "limit", "--allow-large-runs", files=sweep("[1, 2]", "[1, 1000000000]")),
    case("grid-users-10e400", SWEEP_RUN, "load.users", files=sweep("[1, 2]", f"[1, {BIG_INT}]")),
    case("grid-duration-1e308", SWEEP_RUN, "limit", "--allow-large-runs",
         files=sweep(f"scenario: s.yaml\n{GRID}", "scenario: p.yaml\ngrid:\n  run.duration: [1 s, 3e7 s]\n")),
    case("unknown-key", SWEEP_RUN, "sw.yaml", "replicatons", "unknown key",
         files=sweep("metrics:", "replicatons: 3\nmetrics:")),
    case("duplicate-key", SWEEP_RUN, "sw.yaml:2", "duplicate key 'name'",
         files=sweep("name: grid", "name: grid\nname: again")),
    case("not-utf8", SWEEP_RUN, "sw.yaml", "UTF-8",
         files={"sw.yaml": edit_bytes(SWEEP, "name: grid", b"name: gr\xffid"), "s.yaml": SCENARIO}),
    case("empty-file", SWEEP_RUN, "sw.yaml", "mapping", files={"sw.yaml": "", "s.yaml": SCENARIO}),
    case("dask-address-without-port", ("sweep", "sw.yaml", "--executor", "dask", "--address", "10.0.0.5", "-o", "out"),
         "--address", "10.0.0.5", files=sweep("name: grid", "name: grid")),
    case("dask-host-without-port",
         ("sweep", "sw.yaml", "--executor", "dask", "--address", "tcp://scheduler", "-o", "out"),
         "--address", files=sweep("name: grid", "name: grid")),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), SWEEP_CASES)
def test_bad_sweep_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Sweep specs: exit 2 before any run, naming the sweep file and field (or the limit crossed)."""
    check(sandbox, files, argv, expected)


SEVEN_FACTORS = "".join(
    f"  {path}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    for path in (
        "run.seed",
        "load.users",
        "run.max_requests",
        "requests.input_tokens.value",
        "requests.output_tokens.value",
        "deployment.chips",
        "replicas",
    )
)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(("metrics:", "replications: 10000000\nmetrics:"), id="replications-1e7"),
        pytest.param(
            (GRID, "sample: {points: 10000000, ranges: {load.users: {low: 1, high: 4}}}\n"), id="sample-points-1e7"
        ),
        pytest.param(("  load.users: [1, 2]\n", SEVEN_FACTORS), id="grid-1e7-combinations"),
    ],
)
def test_a_sweep_too_large_to_run_is_refused_within_seconds(sandbox: Sandbox, change: tuple[str, str]) -> None:
    """A sweep of 1e7 or more runs is refused up front like a run over the limits: exit 2 within 2 s."""
    sandbox.write(sweep(*change))
    assert_rejected(sandbox.run(*SWEEP_RUN, timeout_s=2.0), "--allow-large-runs")


# -- command-line flags ---------------------------------------------------------------------------------
EST = ("estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
TWO_BACKENDS = edit(
    SCENARIO,
    "deployment:\n  hardware: nvidia-h100-sxm\n  model: llama-3.1-8b\n  chips: 1\n",
    "backends:\n  - {name: a, deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b}}\n"
    "  - {name: b, deployment: {hardware: nvidia-h200, model: llama-3.1-8b}}\n",
)

FLAG_CASES = [
    case("chips-0", (*EST, "--chips", "0"), "--chips"),
    case("chips-negative", (*EST, "--chips", "-1"), "--chips"),
    case("input-tokens-0", (*EST, "--input-tokens", "0"), "--input-tokens"),
    case("input-tokens-negative", (*EST, "--input-tokens", "-5"), "--input-tokens"),
    case("input-tokens-1e30", (*EST, "--input-tokens", "1" + "0" * 30), "--input-tokens"),
    case("output-tokens-0", (*EST, "--output-tokens", "0"), "--output-tokens"),
    case("pipeline-parallel-0", (*EST, "--pipeline-parallel", "0"), "--pipeline-parallel"),
    case("tensor-parallel-0", (*EST, "--tensor-parallel", "0"), "--tensor-parallel"),
    case("concurrency-1e22", (*EST, "--concurrency", "1" + "0" * 22), "--concurrency"),
    case("concurrency-0", (*EST, "--concurrency", "0"), "--concurrency"),
    case("concurrency-a-word", (*EST, "--concurrency", "many"), "--concurrency"),
    case("weights-unknown", (*EST, "--weights", "fp3"), "--weights"),
    case("estimate-without-model", ("estimate", "--hardware", "nvidia-h100-sxm"), "--model"),
    case("sweep-jobs-1e21", ("sweep", "sw.yaml", "--jobs", "1" + "0" * 21, "-o", "out"), "--jobs",
         files=sweep("name: grid", "name: grid")),
    case("sweep-jobs-100000", ("sweep", "sw.yaml", "--jobs", "100000", "-o", "out"), "--jobs", "at most 1,024",
         files=sweep("name: grid", "name: grid")),
    case("sweep-jobs-0", ("sweep", "sw.yaml", "--jobs", "0"), "--jobs", files=sweep("name: grid", "name: grid")),
    case("past-the-context", (*EST, "--input-tokens", "200000"), "context window"),
    case("unknown-hardware", ("estimate", "--hardware", "nvidia-h900", "--model", "llama-3.1-8b"),
         "unknown hardware profile 'nvidia-h900'"),
    case("hardware-path-traversal", ("estimate", "--hardware", "../x/nvidia-h100-sxm", "--model", "llama-3.1-8b"),
         "unknown hardware profile"),
    case("model-too-big-for-chips",
         ("estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-405b", "--chips", "2"), "needs at least"),
    case("compare-empty-hardware-list", ("compare", "s.yaml", "--hardware", ",,", "-o", "out"), "--hardware",
         files={"s.yaml": SCENARIO}),
    case("compare-unknown-hardware", ("compare", "s.yaml", "--hardware", "nvidia-h100-sxm,nope", "-o", "out"), "'nope'",
         files={"s.yaml": SCENARIO}),
    case("compare-a-fleet", ("compare", "s.yaml", "--hardware", "nvidia-h100-sxm", "-o", "out"), "backends",
         files={"s.yaml": TWO_BACKENDS}),
    case("compare-a-fleet-names-the-file", ("compare", "s.yaml", "--hardware", "nvidia-h100-sxm", "-o", "out"),
         "s.yaml", files={"s.yaml": TWO_BACKENDS}),
    case("compare-run-size",
         ("compare", "p.yaml", "--hardware", "nvidia-h100-sxm,cerebras-cs3", "--set", "run.duration=3e7 s",
          "-o", "out"),
         "limit", "--allow-large-runs", files={"p.yaml": POISSON}),
    case("plan-without-targets", ("plan", "p.yaml", "-o", "out"), "slo.targets", files={"p.yaml": POISSON}),
    case("plan-without-targets-names-the-file", ("plan", "p.yaml", "-o", "out"), "p.yaml", files={"p.yaml": POISSON}),
    case("plan-sweeping-set", ("plan", "p.yaml", "--set", "load.arrivals.rate_per_s=1,2", "-o", "out"), "--set",
         files={"p.yaml": POISSON}),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), FLAG_CASES)
def test_bad_flag_is_rejected_cleanly(
    sandbox: Sandbox, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """Flags out of range or naming nothing: exit 2 with one message naming the flag."""
    check(sandbox, files, argv, expected)


def test_a_one_token_answer_has_null_itl_with_a_reason(sandbox: Sandbox) -> None:
    """``--output-tokens 1``: no inter-token latency exists; JSON gives null and says why under "undefined"."""
    outcome = sandbox.run(*EST, "--output-tokens", "1", "--json")
    assert_no_crash(outcome)
    assert outcome.code == 0 and not outcome.added, outcome
    data = json.loads(outcome.out)
    assert data["itl_s"] is None and data["undefined"]["itl_s"], data


def test_beyond_the_kv_capacity_is_an_answer_with_a_note(sandbox: Sandbox) -> None:
    """A concurrency the KV cannot hold exits 0: the text has a capacity note, --json ``capacity_limited``."""
    text = sandbox.run(*EST, "--concurrency", "5000")
    as_json = sandbox.run(*EST, "--concurrency", "5000", "--json")
    for outcome in (text, as_json):
        assert_no_crash(outcome)
        assert outcome.code == 0 and not outcome.added, outcome
    assert "note:" in text.out and "5000" in text.out
    assert json.loads(as_json.out)["capacity_limited"] is True


# -- results folders (-o) -------------------------------------------------------------------------------
WRITERS = {
    "run": ("run", "s.yaml"),
    "compare": ("compare", "s.yaml", "--hardware", "nvidia-h100-sxm"),
    "plan": ("plan", "plan.yaml"),
    "sweep": ("sweep", "sw.yaml", "--jobs", "1"),
    "calibrate": (
        "calibrate",
        "--hardware",
        "nvidia-h100-sxm",
        "--table",
        "m.csv",
        "--rows",
        "X1,X2",
        "--fit",
        "compute.efficiency",
    ),
    "demo": ("demo", "--no-agents"),
}
INPUTS: Files = {"s.yaml": SCENARIO, "p.yaml": POISSON, "plan.yaml": PLAN, "sw.yaml": SWEEP, "m.csv": TABLE}
USER_FILES: Files = {
    "mine/thesis.tex": "\\chapter{Results}\n",
    "mine/data/points.csv": "a,b\n1,2\n",
    "afile": "not a folder\n",
}


def marker(command: str) -> str:
    """The marker of a results folder ``command`` wrote (another command's results, for ``-o``)."""
    return json.dumps({"tool": "infersim", "command": command, "version": "0.1.0", "files": ["fit.json"]}) + "\n"


def other_command(command: str) -> str:
    return "plan" if command != "plan" else "run"


TARGETS = [
    pytest.param(".", "current folder", id="dot"),
    pytest.param("", "current folder", id="empty-string"),
    pytest.param("./", "current folder", id="dot-slash"),
    pytest.param("..", "holds the current folder", id="parent"),
    pytest.param("/", "root of the file system", id="root"),
    pytest.param("~", "home folder", id="tilde"),
    pytest.param(str(Path.home()), "home folder", id="home"),
    pytest.param("afile", "is a file", id="existing-file"),
    pytest.param("afile/sub", "afile", id="under-a-file"),
    pytest.param("mine", "not an infersim results folder", id="foreign-folder"),
    pytest.param("mine/data", "not an infersim results folder", id="foreign-subfolder"),
    pytest.param("hw", "not an infersim results folder", id="profile-folder"),
    pytest.param("marked", "holds the results of `infersim", id="another-commands-results"),
    pytest.param("/proc/infersim-fuzz", "/proc/infersim-fuzz", id="proc",
                 marks=pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")),
]  # fmt: skip


@pytest.mark.parametrize("command", list(WRITERS))
@pytest.mark.parametrize(("target", "expected"), TARGETS)
def test_a_bad_results_folder_is_refused_and_nothing_is_touched(
    sandbox: Sandbox, command: str, target: str, expected: str
) -> None:
    """``-o`` at the current folder, above it, home, /, a file, a foreign or another command's folder,
    or one that cannot be made (``/proc/...``, even for root): exit 2 before any work (nothing
    printed), and every byte of the user's files stays as it was."""
    sandbox.write(
        {
            **INPUTS,
            **USER_FILES,
            "hw/nvidia-h100-sxm.yaml": H100,
            "marked/.infersim-results.json": marker(other_command(command)),
            "marked/fit.json": "{}\n",
        }
    )
    assert_rejected(sandbox.run(*WRITERS[command], "-o", target), expected)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("command", list(WRITERS))
def test_a_read_only_folder_is_refused(sandbox: Sandbox, command: str) -> None:
    """``-o`` inside a folder without write permission (mode 0o500): exit 2 naming it, nothing written."""
    sandbox.write(INPUTS)
    locked = sandbox.root / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert_rejected(sandbox.run(*WRITERS[command], "-o", "locked/out"), "locked")
    finally:
        locked.chmod(stat.S_IRWXU)


def test_overwrite_keeps_the_users_files_and_adds_infersims(sandbox: Sandbox) -> None:
    """``--overwrite`` into a foreign folder: the user's files stay byte-identical; only results are added."""
    sandbox.write({**INPUTS, **USER_FILES})
    outcome = sandbox.run("run", "s.yaml", "-o", "mine", "--overwrite")
    assert_no_crash(outcome)
    assert outcome.code == 0 and not outcome.changed, outcome
    assert_writes_only_inside(outcome, "mine")
    assert {"mine/summary.json", "mine/requests.csv", "mine/.infersim-results.json"} <= set(outcome.added)


def test_overwrite_never_replaces_a_users_file_of_the_same_name(sandbox: Sandbox) -> None:
    """The user's ``requests.csv`` in a foreign folder is their data: --overwrite refuses, naming it."""
    sandbox.write({**INPUTS, "mine/requests.csv": "my,own\n1,2\n"})
    assert_rejected(sandbox.run("run", "s.yaml", "-o", "mine", "--overwrite"), "mine", "requests.csv")


def test_a_successful_run_writes_only_its_results_folder(sandbox: Sandbox) -> None:
    """Default folder ``runs/<name>`` under the current folder, and nothing else anywhere."""
    sandbox.write(INPUTS)
    outcome = sandbox.run("run", "s.yaml")
    assert_no_crash(outcome)
    assert outcome.code == 0, outcome
    assert_writes_only_inside(outcome, "runs")


# -- report ---------------------------------------------------------------------------------------------
def damaged(name: str, contents: str | bytes) -> Files:
    return {f"res/{name}": contents}


def claimed(command: str, name: str, contents: str) -> Files:
    """``name`` written into the folder with a marker that lists it as ``command``'s (a report reads only
    the files its folder's marker lists)."""
    marker = {"tool": "infersim", "command": command, "version": "0", "files": [name]}
    return {f"res/{name}": contents, f"res/{MARKER}": json.dumps(marker)}


REPORT = ("report", "res")

REPORT_CASES = [
    case("truncated-summary", REPORT, "res/summary.json", "not valid JSON",
         files=damaged("summary.json", '{"ttft_s": {"count": 20, "me')),
    case("summary-not-utf8", REPORT, "res/summary.json", "UTF-8", files=damaged("summary.json", b'{"a": "\xff"}')),
    case("summary-with-nan", REPORT, "res/summary.json", "NaN", files=damaged("summary.json", '{"ttft_s": NaN}')),
    case("summary-missing-keys", REPORT, "res/summary.json", files=damaged("summary.json", '{"ttft_s": {}}')),
    case("summary-a-list", REPORT, "res/summary.json", files=damaged("summary.json", "[1, 2]")),
    case("summary-empty", REPORT, "res/summary.json", "not valid JSON", files=damaged("summary.json", "")),
    case("levels-not-numbers", REPORT, "res/levels.csv:2", "t_s",
         files=damaged("levels.csv", "replica,level,t_s,value\n0,batch,abc,1\n")),
    case("requests-ragged", REPORT, "res", "damaged", files=damaged("requests.csv", "id,replica\n1,2,3\n")),
    case("resolved-scenario-not-utf8", REPORT, "res/scenario.resolved.yaml", "UTF-8",
         files=damaged("scenario.resolved.yaml", b"name: \xff\n")),
    case("compare-json-wrong-shape", REPORT, "res", "damaged",
         files=claimed("compare", "compare.json", '[{"hardware": 3}]')),
    case("sweep-json-wrong-shape", REPORT, "res", "damaged", files=claimed("run", "sweep.json", '{"a": 1}')),
    case("summary-missing-keys-names-the-file", REPORT, "res/summary.json", "ttft_s",
         files=damaged("summary.json", '{"ttft_s": {}}')),
    case("levels-not-numbers-names-the-file", REPORT, "res/levels.csv",
         files=damaged("levels.csv", "replica,level,t_s,value\n0,batch,abc,1\n")),
]  # fmt: skip


@pytest.mark.parametrize(("files", "argv", "expected"), REPORT_CASES)
def test_a_damaged_results_folder_is_rejected_cleanly(
    sandbox: Sandbox, results_folder: Path, files: Files, argv: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    """``report`` on a damaged results folder: exit 2 naming the damage; no report.html, no figures."""
    shutil.copytree(results_folder, sandbox.root / "res")
    check(sandbox, files, argv, expected)


@pytest.mark.parametrize(
    ("setup", "folder", "expected"),
    [
        pytest.param({}, "empty", "no infersim results", id="empty-folder"),
        pytest.param({}, "nosuch", "no such folder", id="missing-folder"),
        pytest.param({"afile": "x"}, "afile", "afile", id="a-file"),
        pytest.param({"mine/notes.txt": "x"}, "mine", "no infersim results", id="foreign-folder"),
    ],
)
def test_report_without_results_is_rejected_cleanly(sandbox: Sandbox, setup: Files, folder: str, expected: str) -> None:
    """``report`` on a folder holding no results: exit 2 naming it, nothing added."""
    sandbox.write(setup)
    if folder == "empty":
        (sandbox.root / "empty").mkdir()
    assert_rejected(sandbox.run("report", folder), folder, expected)


# -- Ctrl-C ---------------------------------------------------------------------------------------------
#: About a minute of simulation on one core: long enough to interrupt mid-run.
LONG_SCENARIO = edit(POISSON, "duration: 2 s", "duration: 20000 s").replace("rate_per_s: 10", "rate_per_s: 50")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def _long_run(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    (tmp_path / "long.yaml").write_text(LONG_SCENARIO)
    process = subprocess.Popen(
        [sys.executable, "-m", "simulator", "run", "long.yaml", "-o", "out"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
def test_ctrl_c_during_a_run_exits_130_with_one_line(tmp_path: Path) -> None:
    """SIGINT mid-simulation: exit 130, one stderr line, no traceback, no results folder."""
    with _long_run(tmp_path) as process:
        deadline = time.monotonic() + 30
        while _cpu_seconds(process.pid) < 1.5 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # 1.5 s of CPU: past the imports (~0.7 s), inside the simulation
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert len(err.splitlines()) == 1 and err.startswith("infersim: interrupted"), err
    assert TRACEBACK not in err and out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.yaml"]


def test_ctrl_c_at_startup_exits_130_with_one_line(tmp_path: Path) -> None:
    """SIGINT while the package imports pydantic, numpy and scipy (0.15 s of CPU in; they take ~1.5 s):
    the same one quiet line. (Before Python's own start-up is done, ~0.05 s, no program can catch it.)"""
    with _long_run(tmp_path) as process:
        deadline = time.monotonic() + 30
        while _cpu_seconds(process.pid) < 0.15 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130 and TRACEBACK not in err and len(err.splitlines()) == 1, err
