"""The command line: JSON contracts, the validation targets, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.cli import main, one_blas_thread
from simulator.config.loading import bundled_dir

ESTIMATE_KEYS = {"ttft_s", "itl_s", "per_user_output_tok_s", "aggregate_output_tok_s", "chips", "breakdown"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, check=False)


def test_estimate_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--hardware", "groq-lpu", "--model", "gpt-oss-120b", "--weights", "mxfp4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out.keys() >= ESTIMATE_KEYS
    assert out["per_user_output_tok_s"] == pytest.approx(1.0 / out["itl_s"], rel=1e-12)
    assert sum(out["breakdown"].values()) > 0 and out["bottleneck"] in out["breakdown"]


def test_estimate_text_names_the_bottleneck(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--hardware", "cerebras-cs3", "--model", "llama-3.1-70b"]) == 0
    out = capsys.readouterr().out
    assert "4 x cerebras-cs3" in out and "bottleneck:" in out and "sram" in out


def test_estimate_text_shows_each_groups_precision_and_weight_only_paths(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss keeps attention in BF16 and its experts in MXFP4; Hopper has no FP4 tensor cores, so
    its experts run weight-only (dequantised to BF16), which the breakdown says."""
    assert main(["estimate", "--hardware", "nvidia-h100-sxm", "--model", "gpt-oss-120b"]) == 0
    groups = next(line for line in capsys.readouterr().out.splitlines() if "weights by group" in line)
    assert "attention bf16," in groups and "experts mxfp4 (weight-only: bf16 matmuls)" in groups


#: Bounds on the bundled 127-row table's plain errors, rounded up from the figures so far, so that no
#: change makes them worse: the overall median and GPU since the dequantising MXFP4 expert kernel and
#: the rows' stated KV precision; p90 and MoE since the stacks' own KV-memory rules (p90 30.7 %, MoE
#: 11.5 %); wafer-scale, LPU and dataflow since the SRAM machines' mechanisms (the launch release's
#: stack, unfitted fabric latencies, documented drafts, the served formats).
PLAIN_BOUNDS = {"median": 0.09, "p90": 0.33, "wafer-scale": 0.25, "lpu": 0.08, "dataflow": 0.18, "gpu": 0.085,
                "moe": 0.12}  # fmt: skip


def test_validate_meets_the_error_targets_on_the_bundled_table(capsys: pytest.CaptureFixture[str]) -> None:
    """Median and p90 |error| over every row, the median on each architecture (wafer-scale, LPU,
    dataflow, GPU) and on the MoE rows within :data:`PLAIN_BOUNDS`; every row is predicted; every
    grouping conserves the rows: each row is counted once per grouping."""
    assert main(["validate", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 127 and all(
        {"id", "predicted", "measured", "rel_error"} <= r.keys() for r in out["rows"]
    )
    summary = out["summary"]
    assert not summary["unpredicted"], summary["unpredicted"]  # a speculative draft has chips of its own
    overall = summary["overall"]
    assert overall["median_abs_rel_error"] <= PLAIN_BOUNDS["median"]
    assert overall["p90_abs_rel_error"] <= PLAIN_BOUNDS["p90"]
    for architecture in ("wafer-scale", "lpu", "dataflow", "gpu"):
        assert summary["by_architecture"][architecture]["median_abs_rel_error"] <= PLAIN_BOUNDS[architecture]
    assert summary["by_model_kind"]["moe"]["median_abs_rel_error"] <= PLAIN_BOUNDS["moe"]
    for grouping in ("by_architecture", "by_model_family", "by_model_kind"):
        assert sum(group["rows"] for group in summary[grouping].values()) == overall["rows"], grouping


def test_validate_lists_rows_it_cannot_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "t.csv"
    header = "id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value\n"
    table.write_text(header + "X1,tpu-v9,,llama-3.1-8b,bf16,none,,,1,per_user_output_tok_s,100\n")
    assert main(["validate", str(table), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rows"][0]["predicted"] is None and "unknown hardware profile 'tpu-v9'" in out["rows"][0]["reason"]


def test_demo_writes_a_complete_results_folder(tmp_path: Path) -> None:
    """The closed-form half of the demo (the simulated agents are `make demo`'s, minutes long)."""
    out = tmp_path / "demo"
    assert main(["demo", "-o", str(out), "--no-agents"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".infersim-results.json", ".infersim-results.lock", "figures", "report.html", "scenario.resolved.yaml",
        "speed_gap.json", "speed_gap.txt"]  # fmt: skip
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert (out / "report.html").read_text().count("<img") == 4  # each demo model's speed gap, a roofline


def _profiles_copy(tmp_path: Path) -> Path:
    target = tmp_path / "hw"
    shutil.copytree(bundled_dir("hardware_profiles"), target)
    return target


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  layer_pipelined: false", "  layer_pipelined: false\n  turbo: true", "execution.turbo: unknown key"),
        ("value: 3.35 TB/s", "value: 3.35", "memory.1.bandwidth.value"),
        ("value: 81559 MiB,", "value: -80 GB,", "memory.1.capacity.value"),
        ("value: 81559 MiB,", "value: 0 GB,", "physical range of a size"),
    ],
)
def test_bad_profile_names_the_file_and_field(tmp_path: Path, old: str, new: str, expected: str) -> None:
    hw = _profiles_copy(tmp_path)
    path = hw / "nvidia-h100-sxm.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    result = run_cli("--hardware-dir", str(hw), "estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
    assert result.returncode == 2
    assert str(path) in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_unknown_profile_id_lists_the_known_ones() -> None:
    result = run_cli("estimate", "--hardware", "nvidia-h900", "--model", "llama-3.1-8b")
    assert result.returncode == 2 and "unknown hardware profile 'nvidia-h900'" in result.stderr
    assert "nvidia-h100-sxm" in result.stderr and "Traceback" not in result.stderr


def test_a_model_that_does_not_fit_exits_2_with_the_chips_it_needs() -> None:
    result = run_cli("estimate", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-405b", "--chips", "2")
    assert result.returncode == 2 and "needs at least" in result.stderr and "Traceback" not in result.stderr


def test_malformed_measurement_row_names_file_and_line(tmp_path: Path) -> None:
    table = tmp_path / "t.csv"
    header = "id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value\n"
    table.write_text(header + "X1,groq-lpu,,llama-3.1-8b,fp8,none,,,1,tokens_per_minute,100\n")
    result = run_cli("validate", str(table))
    assert result.returncode == 2 and f"{table}:2: metric" in result.stderr and "Traceback" not in result.stderr


SCENARIO = """\
name: cli-test
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 4}
requests: {input_tokens: {dist: constant, value: 128}, output_tokens: {dist: constant, value: 32}}
run: {seed: 3, max_requests: 40}
"""


def test_run_writes_summary_records_and_the_resolved_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s", "per_user_output_tok_s"):
        assert set(summary[key]) == {"count", "mean", "std", "min", "max", "p50", "p90", "p95", "p99", "p99_9"}
    for key in ("requests_completed", "requests_dropped", "output_tok_s", "input_tok_s", "requests_per_s",
                "goodput_requests_per_s"):  # fmt: skip
        assert key in summary
    assert summary["requests_completed"] == 40
    resolved = (out / "scenario.resolved.yaml").read_text()
    assert "seed: 3" in resolved and "version:" in resolved
    assert (out / "requests.csv").read_text().count("\n") == 41


def test_run_sweeps_a_field_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    assert main(["run", str(path), "-o", str(tmp_path / "o"), "--set", "load.users=1,2,8", "--json"]) == 0
    sweep = json.loads(capsys.readouterr().out)
    assert [row["set"]["load.users"] for row in sweep] == [1, 2, 8]
    throughputs = [row["summary"]["output_tok_s"] for row in sweep]
    assert throughputs == sorted(throughputs)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "load.thinktime=1"], "load.thinktime: unknown key"),
        (["--set", "load.users=0"], "load.users: Input should be greater than or equal to 1"),
        (["--set", "load.users.max=3"], "load.users does not resolve to a mapping"),
        (["--set", "requests.input_tokens.value=900000"], "holds at most"),
        (["--set", "deployment.hardware=tpu-v9"], "unknown hardware profile 'tpu-v9'"),
    ],
)
def test_bad_scenarios_exit_2_and_leave_no_results(tmp_path: Path, args: list[str], expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    result = run_cli("run", str(path), "-o", str(out), *args)
    assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() and not list(tmp_path.glob(".out*"))


AGENTS = """\
name: agents-test
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: agents, workload: coding-agent, agents: 2}
run: {seed: 3, max_requests: 20}
"""


def test_agent_run_prints_the_task_table(tmp_path: Path) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(AGENTS)
    result = run_cli("run", str(path), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "task p50 s" in result.stdout and "cache hit" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "load.workload=coding-agnet"], "unknown workload profile 'coding-agnet'"),
        (["--set", "load.agents=null"], "give exactly one of agents (closed loop) or tasks_per_s"),
        (
            ["--set", "requests={input_tokens: {dist: constant, value: 9}, output_tokens: {dist: constant, value: 9}}"],
            "requests (lengths) are needed for open and closed",
        ),
    ],
)
def test_bad_agent_scenarios_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    path = tmp_path / "a.yaml"
    path.write_text(AGENTS)
    result = run_cli("run", str(path), "-o", str(tmp_path / "out"), *args)
    assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr


def test_a_closed_pipe_ends_quietly() -> None:
    """`infersim profiles | head -1` must not print a traceback."""
    result = subprocess.run(
        f"{sys.executable} -m simulator profiles | head -1", shell=True, capture_output=True, text=True, check=False
    )
    assert result.stdout.startswith("hardware") and "Traceback" not in result.stderr


def test_calibrate_writes_profiles_that_reproduce_the_rows_they_were_fitted_to(tmp_path: Path) -> None:
    """Two GPUs' HBM efficiencies and TensorRT-LLM's shared per-layer latency, fitted from the
    command line to rows generated with known values: the written YAML files load as profiles
    (``--hardware-dir`` / ``--stack-dir``) and predict those rows back."""
    from simulator.config.loading import Catalog
    from simulator.config.paths import with_values
    from tests.unit.test_calibration import _synthetic_rows

    catalog = Catalog()
    truths = catalog.with_profiles(
        hardware=[with_values(catalog.hardware("nvidia-h100-sxm"), {"memory.hbm.efficiency": 0.78}),
                  with_values(catalog.hardware("nvidia-h200"), {"memory.hbm.efficiency": 0.9})],
        stacks=[with_values(catalog.stack("trtllm"), {"layer_latency": 3.0e-5})],
    )  # fmt: skip
    rows = _synthetic_rows(truths.hardware("nvidia-h100-sxm"), truths) + _synthetic_rows(
        truths.hardware("nvidia-h200"), truths
    )
    header = "id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value"
    lines = [f"{r.id},{r.hardware},,{r.model},{r.weights},none,{r.input_tokens},{r.output_tokens},1,"
             f"{r.metric},{r.value!r}" for r in rows]  # fmt: skip
    table, out = tmp_path / "rows.csv", tmp_path / "cal"
    table.write_text("\n".join([header, *lines]) + "\n")
    args = ["calibrate", "--hardware", "nvidia-h100-sxm,nvidia-h200", "--table", str(table),
            "--fit", "memory.hbm.efficiency", "--shared", "trtllm.layer_latency", "-o", str(out)]  # fmt: skip
    assert main(args) == 0
    assert {"nvidia-h100-sxm.yaml", "nvidia-h200.yaml", "trtllm.yaml", "fit.json"} <= {p.name for p in out.iterdir()}
    hardware_dir, stack_dir = tmp_path / "hw", tmp_path / "stacks"
    hardware_dir.mkdir(), stack_dir.mkdir()
    for name in ("nvidia-h100-sxm.yaml", "nvidia-h200.yaml"):
        shutil.copy(out / name, hardware_dir / name)
    shutil.copy(out / "trtllm.yaml", stack_dir / "trtllm.yaml")
    dirs = ["--hardware-dir", str(hardware_dir), "--stack-dir", str(stack_dir)]
    refitted = json.loads(run_cli(*dirs, "validate", str(table), "--json").stdout)
    assert max(abs(r["rel_error"]) for r in refitted["rows"]) < 1e-3


def test_the_command_keeps_openblas_to_one_thread_unless_the_user_set_a_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenBLAS's idle threads spin (start-up CPU for nothing); a count the user set is theirs."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    one_blas_thread()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    one_blas_thread()
    assert "OPENBLAS_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("argv", [["--version"], ["estimate", "--hardware", "groq-lpu", "--model", "llama-3.1-8b"]])
def test_a_command_leaves_the_garbage_collector_on(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The start-up's objects are set aside from the collector only while the command runs: a
    caller running many commands in one process keeps its garbage collected."""
    import gc

    assert main(argv) == 0
    assert gc.isenabled() and gc.get_freeze_count() == 0
