"""Command-line manners: a mistyped id gets the closest known one, each option's default is shown
once and only when it says something, every command prints one JSON document under ``--json``
(its messages on standard error), and ``plan``'s "no feasible fleet" is exit 3, not bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.cli.parser import _Formatter, build_parser
from tests.cli.test_cli import run_cli

FIXTURES = Path(__file__).parents[1] / "importers" / "fixtures"

SCENARIO = """\
name: manners
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 2}
requests: {input_tokens: {dist: constant, value: 200}, output_tokens: {dist: constant, value: 20}}
run: {seed: 1, max_requests: 10}
"""


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"infersim": parser, **sub.choices}


def test_a_mistyped_hardware_id_suggests_the_closest_known_one() -> None:
    result = run_cli("estimate", "--hardware", "nvidia-h20", "--model", "llama-3.1-8b")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "unknown hardware profile 'nvidia-h20' (did you mean 'nvidia-h200'?)" in result.stderr


def test_a_mistyped_set_path_and_model_suggest_the_closest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert main(["run", str(tmp_path / "s.yaml"), "--set", "load.user=4", "-o", str(tmp_path / "a")]) == 2
    assert "load.user: unknown key (did you mean 'users'?)" in capsys.readouterr().err
    assert (
        main(["run", str(tmp_path / "s.yaml"), "--set", "deployment.model=lama-3.1-8b", "-o", str(tmp_path / "b")]) == 2
    )
    assert "(did you mean 'llama-3.1-8b'?)" in capsys.readouterr().err


def test_a_mistyped_choice_and_command_suggest_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estmate"]) == 2
    assert "did you mean 'estimate'?" in capsys.readouterr().err
    assert main(["estimate", "--hardware", "nvidia-h200", "--model", "llama-3.1-8b", "--weights", "fp88"]) == 2
    assert "did you mean 'fp8'?" in capsys.readouterr().err
    assert main(["estimate", "--hardware", "nvidia-h200", "--model", "zzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no guess


def test_every_help_line_states_its_default_at_most_once() -> None:
    commands = _commands()
    assert len(commands) >= 16
    for name, parser in commands.items():
        formatter = _Formatter(name)
        for action in parser._actions:
            if action.help in (None, argparse.SUPPRESS):
                continue
            text = formatter._expand_help(action)
            assert "(default: None)" not in text and "(default: False)" not in text, (name, action.dest, text)
            assert text.lower().count("default") <= 1, (name, action.dest, text)
        page = parser.format_help()
        assert "(default: None)" not in page and "(default: False)" not in page, name
    estimate = commands["estimate"].format_help()
    assert "(default: 1000)" in estimate  # a default the help does not state is still shown
    assert "(default: 0)" in " ".join(commands["import"].format_help().split())  # --seed: 0 is a value, not unset


def test_every_command_takes_json() -> None:
    for name, parser in _commands().items():
        if name != "infersim":
            assert any("--json" in a.option_strings for a in parser._actions), name


def _first_requests(path: Path, requests: int) -> None:
    """A real vLLM bench file (Llama 3.3 70B on 8 x A100, 4 req/s) cut to its first ``requests``."""
    data = json.loads((FIXTURES / "measured" / "vllm-llama70b-a100-qps04.json").read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        data[key] = data[key][:requests]
    data |= {"num_prompts": requests, "completed": requests, "total_input_tokens": sum(data["input_lens"]),
             "total_output_tokens": sum(data["output_lens"])}  # fmt: skip
    path.write_text(json.dumps(data))


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> object:
    assert main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out)  # the whole of standard output is one JSON document


def test_the_commands_without_json_before_print_one_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = tmp_path / "run"
    assert main(["run", str(tmp_path / "s.yaml"), "-o", str(run)]) == 0
    capsys.readouterr()
    exported = _json(capsys, ["export", str(run), "--json"])
    assert exported["file"] == str(run / "summary.vllm-bench.json") and exported["summary"]["completed"] > 0  # type: ignore[index]
    page = _json(capsys, ["report", str(run), "--json"])
    assert Path(page["report"]).is_file()  # type: ignore[index]

    config = FIXTURES / "hf_configs" / "mixtral-8x7b" / "config.json"
    model = _json(capsys, ["models", "import", str(config), "--name", "m", "-o", str(tmp_path / "m"), "--json"])
    assert model["profile"]["id"] == "m" and model["active_params"] < model["total_params"]  # type: ignore[index]

    _first_requests(tmp_path / "vllm.json", 6)
    folder = tmp_path / "import"
    imported = _json(capsys, ["import", str(tmp_path / "vllm.json"), "--hardware", "nvidia-a100-sxm", "--chips", "8",
                              "--layout", "TP8", "--stack", "vllm", "-o", str(folder), "--json"])  # fmt: skip
    assert imported["rows"] > 0 and len(imported["runs"]) == 1  # type: ignore[index]
    compared = _json(capsys, ["compare-measured", str(folder), "--json"])
    assert list(compared["runs"]) == [imported["runs"][0]["id"]]  # type: ignore[index]
    _replays_at_another_load(folder / imported["runs"][0]["scenario"], tmp_path, capsys)  # type: ignore[index]

    demo = _json(capsys, ["demo", "--no-agents", "-o", str(tmp_path / "demo"), "--json"])
    assert demo["speed_gap"] and demo["agents"] == []  # type: ignore[index]
    engine = _json(capsys, ["compile", "--status", "--json"])
    assert isinstance(engine["compiled"], bool)  # type: ignore[index]


CALIBRATION_ROWS = """\
id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value,load,request_rate_per_s,requests
A1,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,512,128,1,itl_s,0.0075,,,
A2,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,2048,256,1,itl_s,0.0078,,,
A3,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,128,512,1,itl_s,0.0074,,,
B1,nvidia-h100-sxm,1,llama-3.1-8b,bf16,none,512,128,,aggregate_output_tok_s,250,poisson,2,50
"""


def test_calibrate_refuses_a_parameter_the_rows_cannot_move(tmp_path: Path) -> None:
    """Single-stream inter-token latency reads the weights: the compute efficiency moves none of
    these rows, so the fit is refused (exit 2) with the sensitivity table, not returned unmoved."""
    (tmp_path / "rows.csv").write_text(CALIBRATION_ROWS)
    common = ("calibrate", "--hardware", "nvidia-h100-sxm", "--table", str(tmp_path / "rows.csv"), "--shared",
              "trtllm.layer_latency")  # fmt: skip
    result = run_cli(*common, "--rows", "A1,A2,A3", "--fit", "compute.efficiency", "-o", str(tmp_path / "a"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "nvidia-h100-sxm.compute.efficiency cannot explain the error of rows A1, A2, A3" in result.stderr
    assert "p1 = nvidia-h100-sxm.compute.efficiency" in result.stderr and not (tmp_path / "a").exists()

    burst = run_cli(*common, "--rows", "A1,B1", "--fit", "memory.hbm.efficiency", "-o", str(tmp_path / "b"))
    assert burst.returncode == 2 and "B1: the output throughput of a finite run of 50 requests" in burst.stderr

    fitted = run_cli(*common, "--fit", "memory.hbm.efficiency", "-o", str(tmp_path / "c"), "--json")
    assert fitted.returncode == 0, fitted.stderr
    assert "left out" in fitted.stderr and "B1" in fitted.stderr  # the burst, left out of the default rows
    report = json.loads(fitted.stdout)
    assert {r["id"] for r in report["rows"]} == {"A1", "A2", "A3"}
    for name in report["parameters"]:
        assert set(report["sensitivity"][name]) == {"A1", "A2", "A3"} and name in report["start"]


def _replays_at_another_load(scenario: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The scenario an import writes replays its requests; ``load.rate_scale=2`` sends the same
    requests at half of each arrival time (the folder moved first: its paths are relative)."""
    moved = tmp_path / "moved"
    scenario.parent.parent.rename(moved)
    arrivals = {}
    for scale in (1, 2):
        out = tmp_path / f"x{scale}"
        argv = ["run", str(moved / "scenarios" / scenario.name), "--set", f"load.rate_scale={scale}", "-o", str(out)]
        assert main(argv) == 0
        lines = (out / "requests.csv").read_text().splitlines()
        column = lines[0].split(",").index("arrival_s")
        arrivals[scale] = sorted(float(line.split(",")[column]) for line in lines[1:])
    capsys.readouterr()
    assert len(arrivals[1]) == 6 and arrivals[2] == pytest.approx([t / 2 for t in arrivals[1]], rel=1e-9, abs=1e-12)


def test_calibrate_moves_the_parameters_of_an_imported_vllm_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows of an imported run are simulated, and a simulated time jitters at small parameter
    steps: the fit's differences over :data:`~simulator.studies.calibration.ENGINE_STEP` follow the trend,
    so the fit moves from its start and lowers the error (it once returned the starting values)."""
    _first_requests(tmp_path / "vllm.json", 40)
    folder = tmp_path / "import"
    assert main(["import", str(tmp_path / "vllm.json"), "--hardware", "nvidia-a100-sxm", "--chips", "8", "--layout",
                 "TP8", "--stack", "vllm", "-o", str(folder)]) == 0  # fmt: skip
    capsys.readouterr()
    report = _json(capsys, ["calibrate", "--hardware", "nvidia-a100-sxm", "--table", str(folder / "measurements.csv"),
                            "-o", str(tmp_path / "cal"), "--json"])  # fmt: skip
    assert report["not_moved"] == {}  # type: ignore[index]
    assert report["median_abs_rel_error_after"] < report["median_abs_rel_error_before"] / 2  # type: ignore[index]
