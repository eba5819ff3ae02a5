"""The ``infersim`` argument parser: every command, its options, what each means, its default.

A command names the function that runs it as ``module:function`` (``handler``), imported only
when that command runs, so ``infersim profiles`` does not pay for matplotlib or scipy.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path
from typing import NoReturn, get_args

from simulator.config.names import Precision
from simulator.errors import InfersimError, did_you_mean
from simulator.version import __version__

#: Prompt and answer lengths ``estimate`` assumes unless told (a chat turn; also the demo's).
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000


#: The exit statuses, shown under every command's help (README: "Exit status and size limits").
EXIT_STATUS = """\
exit status: 0 answered; 1 a bug; 2 bad input (a file, field or flag; a run, or more than 10,000 runs of one
command, over the limits without --allow-large-runs; a fit the rows cannot determine); 3 answered: no feasible
fleet (plan: no fleet within the limits meets the targets, or none found before plan.max_candidates or
--time-limit stopped it); 4 a run measured nothing (run, compare: no request arrived, or none completed in the
window); 74 the device is full (EX_IOERR); 130 Ctrl-C; 143 SIGTERM"""


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help with each option's default, once, and descriptions kept as written.

    The default is added only where it tells something: not when the help already states one
    (``(default: ...)`` in words), nor for a default of ``None`` or ``False`` (an absent option,
    an unset flag), nor for a command's positional arguments.
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "default" in text.lower() or unset or not action.option_strings:
            return text
        return super()._get_help_string(action) or text


class UsageError(InfersimError):
    """A flag argparse refuses (a bad value, a missing or unknown argument)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors raise :class:`UsageError` (one ``infersim: error:`` line, exit 2) instead of
    printing the usage block and exiting; subcommand parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        message = message.removeprefix("argument ")
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:  # argparse's own (3.12+ adds its suggestion in other words): the closest choice, once
            known = re.findall(r"'([^']*)'", choice.group(2))
            message += did_you_mean(choice.group(1), known)
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def positive_int(text: str) -> int:
    """An integer >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def duration_s(text: str) -> float:
    """A positive duration in seconds, with a time unit (``60 s``, ``2 min``) or a bare number of
    seconds (argparse type)."""
    from simulator.units import parse_quantity  # here: the parser starts without pydantic (``--help``)

    try:
        value = float(text) if re.fullmatch(r"\s*[0-9.eE+-]+\s*", text) else parse_quantity(text, "time")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 60 s or 2 min, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {text!r}")
    return value


#: Most worker processes ``sweep --jobs`` starts: more than any one machine has cores (a pool
#: forks them all up front, and never more than there are runs to do).
MAX_JOBS = 1024


def jobs(text: str) -> int:
    """An integer from 1 to :data:`MAX_JOBS` (argparse type)."""
    value = positive_int(text)
    if value > MAX_JOBS:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_JOBS:,} worker processes, got {text!r}")
    return value


def concurrency(text: str) -> str:
    """A positive integer or ``max`` (argparse type)."""
    if text != "max":
        positive_int(text)
    return text


def _add_output(p: argparse.ArgumentParser, default_help: str) -> None:
    p.add_argument("-o", "--out", type=Path, help=f"results folder (default: {default_help})")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a folder that is not empty and not this command's own results; only the files "
        "infersim writes are replaced",
    )


def _add_executor(p: argparse.ArgumentParser) -> None:
    """Where the command's simulations run (:mod:`simulator.studies.execution`)."""
    p.add_argument("--executor", choices=("local", "dask"), default="local", help="where runs execute")
    p.add_argument("--address", help="Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: a loopback cluster)")
    p.add_argument(
        "--jobs",
        type=jobs,
        default=min(os.cpu_count() or 1, MAX_JOBS),
        help=f"worker processes (at most {MAX_JOBS:,}; 1 runs in this process)",
    )


def _add_large(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-large-runs",
        action="store_true",
        help="run even when a simulation would exceed the request, client, replica or memory limits checked up "
        "front, or the command would expand into more than 10,000 runs",
    )


def _command(sub: argparse._SubParsersAction, name: str, handler: str, help_text: str) -> argparse.ArgumentParser:  # type: ignore[type-arg]
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, description=help_text, epilog=EXIT_STATUS, formatter_class=_Formatter
    )
    p.set_defaults(handler=handler)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="infersim",
        description="How fast LLMs run on very different inference hardware, and what that speed costs.",
        epilog=EXIT_STATUS,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"infersim {__version__}")
    parser.add_argument(
        "--hardware-dir",
        type=Path,
        help="folder of hardware profile YAMLs added to the bundled ones (one with a bundled id shadows it)",
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        help="folder of model profile YAMLs added to the bundled ones (one with a bundled id shadows it)",
    )
    parser.add_argument(
        "--stack-dir",
        type=Path,
        help="folder of serving stack profile YAMLs added to the bundled ones (one with a bundled id shadows it)",
    )
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = _command(sub, "profiles", "simulator.cli.profiles:profiles", "list hardware and model profiles")
    p.add_argument("--json", action="store_true", help="print every profile in full as JSON")

    p = _command(
        sub,
        "estimate",
        "simulator.cli.profiles:estimate_command",
        "closed-form TTFT, inter-token latency and throughput of one deployment at a concurrency",
    )
    p.add_argument("--hardware", required=True, help="hardware profile id (see `infersim profiles`)")
    p.add_argument("--model", required=True, help="model profile id")
    p.add_argument("--chips", type=int, help="total chips (default: the smallest placement that fits)")
    p.add_argument("--tensor-parallel", type=int, help="chips one layer is split over (default: automatic)")
    p.add_argument("--pipeline-parallel", type=int, help="pipeline stages (default: automatic)")
    p.add_argument("--expert-parallel", type=int, help="chips the experts are spread over (default: chosen)")
    p.add_argument(
        "--attention-parallel",
        choices=("tensor", "data"),
        help="attention split over the chips (tensor) or run per chip on its own sequences (data); "
        "default: the layout that answers the question best",
    )
    p.add_argument("--stack", help="serving stack profile id (default: the hardware's)")
    p.add_argument("--weights", choices=get_args(Precision), help="weight precision (default: the model's native)")
    p.add_argument(
        "--kv-cache",
        choices=get_args(Precision),
        help="KV-cache precision (default: the stack's "
        "kv_cache: the activations' for vLLM and SGLang; TensorRT-LLM: fp8 on FP8/NVFP4 "
        "checkpoints)",
    )
    p.add_argument("--input-tokens", type=int, default=DEFAULT_INPUT_TOKENS, help="prompt tokens per request")
    p.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT_TOKENS, help="output tokens per request")
    p.add_argument(
        "--concurrency",
        type=concurrency,
        default="1",
        help="users in a closed loop, or 'max' (the most whose KV fits at full context)",
    )
    p.add_argument("--json", action="store_true", help="print the estimate as JSON")
    p.add_argument(
        "--explain",
        action="store_true",
        help="also list every sourced number of the hardware and "
        "stack profiles: value, confidence, source and its citation",
    )

    p = _command(
        sub,
        "validate",
        "simulator.cli.profiles:validate_command",
        "predict every row of a measurement table and report the error",
    )
    p.add_argument("table", nargs="?", type=Path, help="measurement CSV (default: the bundled measurements)")
    p.add_argument("--json", action="store_true", help="print every row and the summary as JSON")
    p.add_argument(
        "--cv",
        action="store_true",
        help="also predict each row with the fitted parameters refitted "
        "without the rows of its source (leave-one-source-out cross-validation)",
    )

    p = _command(
        sub,
        "calibrate",
        "simulator.cli.profiles:calibrate_command",
        "fit hardware and serving-stack efficiencies and latencies to measured rows",
    )
    p.add_argument("--hardware", required=True, help="comma-separated hardware profile ids to fit (jointly)")
    p.add_argument("--table", type=Path, help="measurement CSV (default: the bundled measurements)")
    p.add_argument(
        "--fit",
        help="comma-separated hardware parameter paths, fitted for each hardware (default: "
        "each profile's previously fitted ones)",
    )
    p.add_argument(
        "--shared",
        help="comma-separated serving-stack parameters <stack>.<field>, each fitted once "
        "on every row that stack served (default: the stacks' fitted ones)",
    )
    p.add_argument("--rows", help="comma-separated row ids (default: the hardware's unflagged, predictable rows)")
    _add_output(p, "runs/calibrate-<hardware>")
    p.add_argument("--json", action="store_true", help="print the fit as JSON")

    p = _command(sub, "run", "simulator.cli.run:run", "simulate a scenario under load and write a results folder")
    p.add_argument("scenario", type=Path, help="scenario YAML")
    p.add_argument(
        "--set", action="append", metavar="PATH=VALUE", help="override a field (repeatable); a,b,c runs each value"
    )
    _add_output(p, "runs/<scenario name>")
    _add_large(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")

    p = _command(
        sub,
        "compare",
        "simulator.cli.simulate:compare",
        "one scenario on several hardware profiles at the same load: speed against cost",
    )
    p.add_argument("scenario", type=Path, help="scenario YAML with one deployment")
    p.add_argument("--hardware", required=True, help="comma-separated hardware profile ids")
    p.add_argument(
        "--set", action="append", metavar="PATH=VALUE", help="override a field (repeatable); a,b,c compares each load"
    )
    _add_output(p, "runs/compare-<scenario name>")
    _add_large(p)
    _add_executor(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument(
        "--explain",
        action="store_true",
        help="also list every sourced number of each hardware and "
        "stack profile compared: value, confidence, source and its citation",
    )
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")

    p = _command(
        sub,
        "plan",
        "simulator.cli.simulate:plan",
        "the cheapest fleet meeting every SLO target, searched by simulation",
    )
    p.add_argument("scenario", type=Path, help="scenario YAML with backends and slo.targets")
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field (one value each)")
    _add_output(p, "runs/plan-<scenario name>")
    _add_large(p)
    _add_executor(p)
    p.add_argument(
        "--time-limit",
        type=duration_s,
        metavar="DURATION",
        help="stop the search after this long (e.g. 60 s, 2 min; a bare number is seconds) and answer with the "
        "cheapest fleet found that meets and the least a fleet not yet settled could cost",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")

    p = _command(
        sub,
        "sweep",
        "simulator.cli.sweep:sweep",
        "a grid or sample of scenarios with seeds, on a local process pool or a Dask cluster",
    )
    p.add_argument("sweep", type=Path, help="sweep YAML")
    p.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="override the sweep (replications=3, grid.load.users=1,8, metrics=...) or its base scenario "
        "(a scenario field's values become its grid values: deployment.hardware=nvidia-h200 fixes it, "
        "load.users=1,4,16 sweeps it); repeatable",
    )
    _add_executor(p)
    _add_output(p, "runs/sweep-<name>")
    _add_large(p)
    p.add_argument("--json", action="store_true", help="print every row and the summary as JSON")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")

    p = _command(
        sub,
        "report",
        "simulator.cli.report:report",
        "a self-contained HTML report (and PNG figures) of a results folder",
    )
    p.add_argument("folder", type=Path, help="a folder written by run, compare, plan, sweep or demo")
    p.add_argument("--json", action="store_true", help="print the report's path and figures as JSON")

    _add_import_commands(sub)

    p = _command(
        sub,
        "schema",
        "simulator.cli.schema:schema_command",
        "print the JSON Schema of a scenario, a profile or a run's summary.json",
    )
    p.add_argument("kind", choices=("scenario", "hardware", "model", "stack", "summary"), help="which document")
    p.add_argument("--json", action="store_true", help="accepted for uniformity: the schema is JSON either way")

    p = _command(
        sub,
        "compile",
        "simulator.cli.compiling:compile_command",
        "compile the engine's hot modules to C with mypyc (same results, faster runs)",
    )
    p.add_argument("--if-stale", action="store_true", help="build only if the build is missing or not current")
    p.add_argument("--status", action="store_true", help="only print whether runs use the compiled engine, and why not")
    p.add_argument("--json", action="store_true", help="print the engine line as JSON")

    p = _command(
        sub,
        "demo",
        "simulator.cli.demo:demo",
        "the speed war: the speed gap, agents under load, cost per task, and a report",
    )
    _add_output(p, "results/demo")
    p.add_argument("--no-agents", action="store_true", help="only the closed-form speed gap (seconds, not minutes)")
    p.add_argument("--json", action="store_true", help="print the speed gap and agent rows as JSON (tables on stderr)")
    return parser


def _add_import_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``import``, ``compare-measured`` and ``models import`` (:mod:`simulator.cli.imports`)."""
    from simulator.io.exporters import FORMATS as EXPORTS
    from simulator.io.importers import FORMATS

    p = _command(
        sub,
        "import",
        "simulator.cli.imports:import_command",
        "benchmark result files (vLLM, SGLang, inference-perf, AIPerf, GuideLLM) as measurement rows and replay traces",
    )
    p.add_argument("results", nargs="+", type=Path, help="result files")
    p.add_argument("--format", choices=FORMATS, help="the files' format (default: detected from their fields)")
    p.add_argument("--hardware", required=True, help="hardware profile id the runs were measured on")
    p.add_argument("--model", help="model profile id (default: the profile whose hf_repo the file names)")
    p.add_argument("--chips", type=positive_int, help="chips of one replica (default: automatic placement)")
    p.add_argument("--layout", help="parallel layout in engine words, e.g. 'TP8', 'TP4 PP2', 'DEP8'")
    p.add_argument("--stack", help="serving stack profile id (default: the hardware's)")
    p.add_argument("--weights", choices=get_args(Precision), help="weight precision (default: the model's native)")
    p.add_argument(
        "--spec-decoding",
        choices=("none", "yes", "unknown"),
        default="none",
        help="whether the server decoded speculatively (result files do not say)",
    )
    p.add_argument(
        "--replicas",
        type=positive_int,
        default=1,
        help="replicas behind a random load balancer; rows describe one replica's share",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of arrival times drawn for files without send times")
    _add_output(p, "runs/import")
    p.add_argument("--json", action="store_true", help="print the imported runs as JSON (messages on stderr)")

    p = _command(
        sub,
        "compare-measured",
        "simulator.cli.imports:compare_measured",
        "replay an import's per-request traces; simulated against measured, request by request",
    )
    p.add_argument("folder", type=Path, help="a folder written by infersim import")
    _add_output(p, "FOLDER/compare")
    p.add_argument("--report", action="store_true", help="also write report.html with the CDF figures")
    p.add_argument("--json", action="store_true", help="print each run's comparison as JSON (tables on stderr)")

    p = _command(
        sub,
        "export",
        "simulator.cli.imports:export_command",
        "a run folder's results in a peer's result format (vLLM bench, GuideLLM, AIPerf)",
    )
    p.add_argument("folder", type=Path, help="a folder written by infersim run")
    p.add_argument("--format", choices=EXPORTS, default="vllm-bench", help="whose result format")
    p.add_argument("--json", action="store_true", help="print the exported document as JSON")

    p = _command(sub, "models", "simulator.cli.imports:models_import", "model profiles from a Hugging Face config.json")
    p.add_argument("action", choices=("import",), help="import: build a profile from config.json")
    p.add_argument("config", type=Path, help="a config.json on disk (no network)")
    p.add_argument("--name", help="profile id (default: from the file's folder or model type)")
    p.add_argument(
        "--hf-repo",
        help="the Hub id result files name the model by (default: the config's "
        "_name_or_path, or a folder named org--name)",
    )
    _add_output(p, "runs/model-<id>")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
