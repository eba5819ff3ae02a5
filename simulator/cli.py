"""The ``infersim`` command line.

Bad input (a profile, a field, a table row, a model that does not fit) prints one clear
message naming the file and field path or the ids, and exits with status 2, no traceback.
A results folder is written to a temporary sibling and renamed into place, so an
interrupted command leaves nothing half-written (the sweep cache and the HTML report add
whole files to a folder that is already complete).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, get_args

import yaml

from simulator import __version__
from simulator.analytic.estimate import Estimate, estimate, saturation_concurrency
from simulator.analytic.placement import Deployment, PlacementError, plan
from simulator.analytic.step_time import COMPONENTS
from simulator.calibration import CalibrationError, calibrate, derived_paths, fit_report
from simulator.compare import compare, comparison_table
from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog, ConfigError, parse_override
from simulator.config.scenario import Scenario
from simulator.demo import (
    DEMO_INPUT_TOKENS,
    DEMO_LOADED_USERS,
    DEMO_MODELS,
    DEMO_OUTPUT_TOKENS,
    SPEED_WAR_AGENTS,
    SPEED_WAR_SCENARIO,
    agent_war,
    speed_gap,
    speed_gap_text,
    task_table,
)
from simulator.engine.build import ScenarioError
from simulator.planning import answer_scenario, plan_fleet, plan_text
from simulator.report import write_report
from simulator.results.metrics import overload_message
from simulator.runner import RunResult, load_scenario_data, scenario_from, simulate
from simulator.serialize import deployment_dict, estimate_dict
from simulator.sweep import expand, load_sweep, run_sweep, summarize_rows, write_table
from simulator.tables import format_table
from simulator.validation import BUNDLED_TABLE, read_table, summarize, validate

EXIT_BAD_INPUT = 2  # also `plan` when no fleet within the limits can meet the targets
EXIT_BROKEN_PIPE = 1  # as the Python documentation's SIGPIPE note recommends
GB = 1e9


def _catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(args.hardware_dir, args.model_dir)


def _deployment(args: argparse.Namespace, catalog: Catalog) -> Deployment:
    spec = DeploymentSpec(
        hardware=args.hardware,
        model=args.model,
        chips=args.chips,
        tensor_parallel=args.tensor_parallel,
        pipeline_parallel=args.pipeline_parallel,
        weights=args.weights,
        kv_cache=args.kv_cache,
    )
    return plan(catalog.hardware(args.hardware), catalog.model(args.model), spec)


# -- commands ---------------------------------------------------------------------------------
def cmd_profiles(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    hardware = [catalog.hardware(i) for i in catalog.hardware_ids()]
    models = [catalog.model(i) for i in catalog.model_ids()]
    if args.json:
        print(json.dumps({
            "hardware": [h.model_dump(mode="json") for h in hardware],
            "models": [m.model_dump(mode="json") for m in models],
        }, indent=2))  # fmt: skip
        return 0
    rows = []
    for h in hardware:
        tiers = ", ".join(
            f"{t.name} {t.capacity.value / GB:.3g} GB @ {t.bandwidth.value / 1e12:.3g} TB/s" for t in h.memory
        )
        peak = max(h.compute.peak.values(), key=lambda q: q.value).value
        rows.append([h.id, h.family, f"{peak / 1e12:,.0f}", tiers, h.interconnect.domain_chips.value])
    print(format_table(["hardware", "family", "peak TFLOP/s", "memory per chip", "domain"], rows))
    print()
    from simulator.analytic.architecture import active_params, total_params

    rows = [
        [m.id, f"{total_params(m) / 1e9:.1f}", f"{active_params(m) / 1e9:.1f}", m.num_layers, m.hidden_size,
         m.attention.kind, m.native_precision]
        for m in models
    ]  # fmt: skip
    print(format_table(["model", "params B", "active B", "layers", "hidden", "attention", "native"], rows))
    return 0


def _estimate_text(e: Estimate) -> str:
    d = e.deployment
    info = estimate_dict(e)
    lines = [
        f"{d.model.id} on {d.chips} x {d.hardware.id}  (tp {d.tensor_parallel}, pp {d.pipeline_parallel}, "
        f"ep {d.expert_parallel}; weights {d.weights}, KV {d.kv_cache})",
        f"  weights {d.weight_bytes / GB:.1f} GB and KV in {d.weights_tier.name}; KV budget "
        f"{d.kv_budget_bytes / GB:.1f} GB = {d.max_kv_tokens:,} tokens; "
        f"max concurrency {info['max_concurrency']} at {e.input_tokens}+{e.output_tokens} tokens",
    ]
    if d.resident_tiers:
        lines.append(
            f"  slower tiers ({', '.join(t.name for t in d.resident_tiers)}) hold "
            f"{d.resident_models_capacity_bytes / GB:,.0f} GB of further resident models"
        )
    lines += [
        f"  TTFT {e.ttft_s * 1e3:.1f} ms   ITL {e.itl_s * 1e3:.2f} ms   per-user {e.per_user_output_tok_s:,.0f} tok/s"
        f"   aggregate {e.aggregate_output_tok_s:,.0f} tok/s at concurrency {e.concurrency}",
        "  decode pass breakdown:",
    ]
    total = e.decode_step.total_s
    for key in COMPONENTS:
        value = e.decode_step.components_s[key]
        if value > 0:
            lines.append(f"    {key:<15} {value * 1e3:9.3f} ms  {value / total:5.1%}")
    lines.append(f"  bottleneck: {e.explanation()}")
    return "\n".join(lines)


def cmd_estimate(args: argparse.Namespace) -> int:
    deployment = _deployment(args, _catalog(args))
    if args.concurrency == "max":
        concurrency = saturation_concurrency(deployment, args.input_tokens, args.output_tokens)
    else:
        concurrency = int(args.concurrency)
    result = estimate(deployment, args.input_tokens, args.output_tokens, concurrency)
    print(json.dumps(estimate_dict(result), indent=2) if args.json else _estimate_text(result))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    results = validate(read_table(args.table or BUNDLED_TABLE), _catalog(args))
    summary = summarize(results)
    if args.json:
        rows = [
            {"id": r.row.id, "predicted": r.predicted, "measured": r.row.value, "rel_error": r.rel_error,
             "metric": r.row.metric, "hardware": r.row.hardware, "model": r.row.model,
             "bottleneck": r.bottleneck, "flag": r.flag, "reason": r.reason}
            for r in results
        ]  # fmt: skip
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    table: list[list[object]] = []
    for r in results:
        conc = "max" if r.row.concurrency is None else r.row.concurrency
        pred = "-" if r.predicted is None else f"{r.predicted:.4g}"
        err = r.reason if r.rel_error is None else f"{r.rel_error:+.0%}"
        table.append([r.row.id, r.row.hardware, r.row.model, r.row.weights, conc, r.row.metric,
                     f"{r.row.value:.4g}", pred, err, r.bottleneck, "flagged" if r.flag else ""])  # fmt: skip
    headers = ["id", "hardware", "model", "w", "C", "metric", "measured", "predicted", "error", "bottleneck", ""]
    print(format_table(headers, table))
    for item in summary["flagged"]:  # type: ignore[attr-defined]
        print(f"  flagged {item['id']}: {item['flag']}")
    for item in summary["unpredicted"]:  # type: ignore[attr-defined]
        print(f"  not predicted {item['id']}: {item['reason']}")
    print()
    stats = [["all rows", *_stat_cells(summary["overall"])]]  # type: ignore[arg-type]
    stats += [["unflagged rows", *_stat_cells(summary["unflagged"])]]  # type: ignore[arg-type]
    stats += [[fam, *_stat_cells(s)] for fam, s in summary["by_architecture"].items()]  # type: ignore[attr-defined]
    print(format_table(["architecture", "rows", "median |err|", "p90 |err|"], stats))
    return 0


def _stat_cells(stats: dict[str, float]) -> list[object]:
    return [stats["rows"], f"{stats['median_abs_rel_error']:.1%}", f"{stats['p90_abs_rel_error']:.1%}"]


SUMMARY_COLUMNS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "per_user_output_tok_s")


def _sweep_values(overrides: Sequence[str]) -> list[dict[str, object]]:
    """Every combination of ``--set`` values (a list of values sweeps that field)."""
    combos: list[dict[str, object]] = [{}]
    for text in overrides:
        path, values = parse_override(text)
        combos = [combo | {path: value} for combo in combos for value in values]
    return combos


def _scenario_yaml(scenario: Scenario) -> str:
    """The resolved scenario with its provenance (version, seed): rerunnable as it stands."""
    data = scenario.model_dump(mode="json", by_alias=True)
    data["provenance"] = {"version": __version__, "seed": scenario.run.seed}
    return yaml.safe_dump(data, sort_keys=False)


def _run_files(result: RunResult) -> dict[str, str]:
    return {
        "summary.json": json.dumps(result.summary, indent=2) + "\n",
        "requests.csv": result.records.to_csv(),
        "levels.csv": result.records.levels_csv(),
        "scenario.resolved.yaml": _scenario_yaml(result.scenario),
    }


def _summary_row(label: str, summary: dict[str, Any]) -> list[object]:
    return [
        label, summary["requests_completed"], f"{summary['ttft_s']['p50'] * 1e3:.1f}",
        f"{summary['ttft_s']['p99'] * 1e3:.1f}", f"{summary['tpot_s']['mean'] * 1e3:.2f}",
        f"{summary['itl_s']['p99'] * 1e3:.2f}", f"{summary['per_user_output_tok_s']['p50']:,.0f}",
        f"{summary['output_tok_s']:,.0f}", f"{summary['requests_per_s']:.3g}", f"{summary['mean_batch_size']:.1f}",
        f"{summary['prefix_cache_hit_rate']:.0%}", _money(summary["cost"], "usd_per_million_output_tokens"),
    ]  # fmt: skip


TASK_HEADERS = [
    "run", "tasks", "task p50 s", "task p90 s", "model s", "tool s", "sub-agents s", "queue s", "network s",
    "calls/task",
    "tok/s/user p50",
    "cache hit", "tasks/h", "$/task",
]  # fmt: skip


def _task_row(label: str, summary: dict[str, Any]) -> list[object]:
    t = summary["tasks"]
    part = t["mean_seconds"]
    return [
        label, t["tasks_completed"], f"{t['task_time_s']['p50']:.1f}", f"{t['task_time_s']['p90']:.1f}",
        f"{part['model']:.1f}", f"{part['tool']:.1f}", f"{part['subagent']:.1f}", f"{part['queue']:.1f}",
        f"{part['network']:.1f}", f"{t['calls_per_task']:.0f}",
        f"{summary['per_user_output_tok_s']['p50']:,.0f}", f"{summary['prefix_cache_hit_rate']:.0%}",
        f"{t['tasks_per_hour']:,.1f}", _money(summary["cost"], "usd_per_task"),
    ]  # fmt: skip


SUMMARY_HEADERS = [
    "run", "requests", "TTFT p50 ms", "TTFT p99 ms", "TPOT ms", "ITL p99 ms", "tok/s/user p50",
    "output tok/s", "req/s", "batch", "cache hit", "$/1M out",
]  # fmt: skip


def _money(cost: dict[str, Any], key: str) -> str:
    return f"{cost[key]:.3g}"


def _progress_bar(label: str) -> Callable[[float], None]:
    """A one-line bar with an ETA on stderr (used only when stderr is a terminal)."""
    started = time.monotonic()

    def show(fraction: float) -> None:
        elapsed = time.monotonic() - started
        eta = f"ETA {elapsed / fraction * (1 - fraction):.0f} s" if 0 < fraction < 1 else f"{elapsed:.0f} s"
        bar = "#" * round(30 * fraction)
        print(f"\rinfersim {label}: [{bar:<30}] {fraction:4.0%} {eta}   ", end="\n" if fraction >= 1 else "",
              file=sys.stderr, flush=True)  # fmt: skip

    return show


def cmd_run(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    data = load_scenario_data(args.scenario)
    combos = _sweep_values(args.set or [])
    results = []
    for index, combo in enumerate(combos):
        scenario = scenario_from(data, combo, str(args.scenario))
        progress = _progress_bar(f"run {index + 1}/{len(combos)}") if sys.stderr.isatty() and not args.json else None
        results.append((combo, simulate(scenario, catalog, progress)))
    out = args.out or Path("runs") / results[0][1].scenario.name
    if len(results) == 1:
        files = _run_files(results[0][1])
    else:
        files = {
            f"run-{i:03d}/{name}": text for i, (_, r) in enumerate(results) for name, text in _run_files(r).items()
        }
        files["sweep.json"] = json.dumps([{"set": c, "summary": r.summary} for c, r in results], indent=2) + "\n"
    write_results(out, files)
    _maybe_report(args, out)
    if args.json:
        payload: object = results[0][1].summary if len(results) == 1 else [
            {"set": c, "summary": r.summary} for c, r in results]  # fmt: skip
        print(json.dumps(payload, indent=2))
        return 0
    for combo, result in results:
        if message := overload_message(result.summary):
            label = ", ".join(f"{k}={v}" for k, v in combo.items())
            print(f"infersim: warning: {label + ': ' if label else ''}{message}", file=sys.stderr)
    labels = [", ".join(f"{k}={v}" for k, v in c.items()) or r.scenario.name for c, r in results]
    rows = [_summary_row(label, r.summary) for label, (_, r) in zip(labels, results, strict=True)]
    print(format_table(SUMMARY_HEADERS, rows))
    task_rows = [
        _task_row(label, r.summary) for label, (_, r) in zip(labels, results, strict=True) if "tasks" in r.summary
    ]
    if task_rows:
        print()
        print(format_table(TASK_HEADERS, task_rows))
    print(f"\nwrote {out}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    profile = catalog.hardware(args.hardware)
    results = validate([r for r in read_table(args.table or BUNDLED_TABLE) if r.hardware == profile.id], catalog)
    chosen = set(args.rows.split(",")) if args.rows else None
    rows = [r.row for r in results if (r.row.id in chosen if chosen else not r.flag and r.predicted is not None)]
    paths = args.fit.split(",") if args.fit else derived_paths(profile)
    if not paths:
        raise ConfigError(f"{profile.id} has no previously fitted parameters; name them with --fit (e.g. "
                          "compute.efficiency,execution.layer_latency)")  # fmt: skip
    try:
        fit = calibrate(profile, paths, rows, catalog)
    except CalibrationError as exc:
        raise ConfigError(str(exc)) from None
    report = fit_report(fit)
    out = args.out or Path("runs") / f"calibrate-{profile.id}"
    profile_yaml = yaml.safe_dump(fit.profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    write_results(out, {f"{profile.id}.yaml": profile_yaml, "fit.json": json.dumps(report, indent=2) + "\n"})
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    table = [
        [
            r["id"],
            f"{r['measured']:.4g}",
            f"{r['before']:.4g}",
            f"{r['rel_error_before']:+.0%}",
            f"{r['after']:.4g}",
            f"{r['rel_error_after']:+.0%}",
        ]
        for r in report["rows"]
    ]
    print(format_table(["row", "measured", "before", "error", "after", "error"], table))
    for path, value in fit.parameters.items():
        print(f"{path} = {value:.4g}")
    loo = report["loo_median_abs_rel_error"]
    print(f"leave-one-out |error|: median {loo:.1%}, max {report['loo_max_abs_rel_error']:.1%}" if loo is not None
          else "leave-one-out: needs more rows than parameters")  # fmt: skip
    print(f"\nwrote {out}/{profile.id}.yaml (use it with --hardware-dir {out})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        raise ConfigError(f"{args.folder}: not a results folder")
    print(f"wrote {write_report(args.folder)}")
    return 0


def _maybe_report(args: argparse.Namespace, out: Path) -> None:
    """``--report``: the HTML page of the folder just written."""
    if getattr(args, "report", False):
        page = write_report(out)
        print(f"wrote {page}", file=sys.stderr if args.json else sys.stdout)


def cmd_sweep(args: argparse.Namespace) -> int:
    spec = load_sweep(args.sweep)
    runs = expand(spec, args.sweep, _catalog(args))
    out = args.out or Path("runs") / f"sweep-{spec.name}"
    dirs = (str(args.hardware_dir) if args.hardware_dir else None, str(args.model_dir) if args.model_dir else None)
    bar = _progress_bar(f"sweep of {len(runs)} runs") if sys.stderr.isatty() and not args.json else None
    progress = (lambda done, total: bar(done / total)) if bar else None
    rows = run_sweep(spec, runs, out, args.executor, args.jobs, args.address, dirs, progress)
    factors = list(dict.fromkeys(k for p in runs for k in p.factors))
    summary = summarize_rows(rows, factors, spec.metrics)
    table = write_table(rows, out / "runs")
    write_table(summary, out / "summary")
    resolved = spec.model_dump(mode="json") | {"provenance": {"version": __version__, "runs": len(runs)}}
    (out / "sweep.resolved.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    failed = sum(1 for r in rows if r["error"])
    _maybe_report(args, out)
    if args.json:
        print(json.dumps({"runs": rows, "summary": summary}, indent=2))
    else:
        print(f"{len(rows)} runs ({failed} failed), {len(summary)} factor combinations; wrote {table} and "
              f"{out}/summary{table.suffix}")  # fmt: skip
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    data = load_scenario_data(args.scenario)
    hardware = [h.strip() for h in args.hardware.split(",") if h.strip()]
    for hw in hardware:
        catalog.hardware(hw)  # unknown ids fail before any simulation
    combos = _sweep_values(args.set or [])
    loads = [(", ".join(f"{k}={v}" for k, v in c.items()), scenario_from(data, c, str(args.scenario))) for c in combos]
    rows = compare(loads[0][1], hardware, loads, catalog)
    payload = [row.to_dict() for row in rows]
    files = {f"run-{i:03d}/{name}": text for i, row in enumerate(rows) for name, text in _run_files(row.result).items()}
    files["compare.json"] = json.dumps(payload, indent=2) + "\n"
    files["compare.txt"] = comparison_table(rows) + "\n"
    out = args.out or Path("runs") / f"compare-{loads[0][1].name}"
    write_results(out, files)
    _maybe_report(args, out)
    if args.json:
        print(json.dumps(payload, indent=2))
        return 0
    print(comparison_table(rows))
    print(f"\nwrote {out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    scenario = scenario_from(load_scenario_data(args.scenario), _single_values(args.set or []), str(args.scenario))
    progress = (
        (lambda text: print(f"infersim: {text}", file=sys.stderr)) if sys.stderr.isatty() and not args.json else None
    )
    result = plan_fleet(scenario, catalog, progress)
    payload = result.to_dict()
    files = {"plan.json": json.dumps(payload, indent=2) + "\n", "plan.txt": plan_text(result) + "\n",
             "scenario.resolved.yaml": _scenario_yaml(scenario)}  # fmt: skip
    if result.answer is not None:
        files["answer.yaml"] = _scenario_yaml(answer_scenario(scenario, result.answer))
    out = args.out or Path("runs") / f"plan-{scenario.name}"
    write_results(out, files)
    _maybe_report(args, out)
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(plan_text(result))
        print(f"\nwrote {out}")
    if result.answer is None:
        print(f"infersim: error: {result.explanation} (the full search is in {out})", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _single_values(overrides: Sequence[str]) -> dict[str, object]:
    combos = _sweep_values(overrides)
    if len(combos) > 1:
        raise ConfigError("plan takes one value per --set field (a comma list would sweep it)")
    return combos[0]


def write_results(out_dir: Path, files: dict[str, str]) -> None:
    """Write ``files`` into ``out_dir`` all at once: a temporary sibling renamed into place."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, text in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def cmd_demo(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    rows = speed_gap(catalog)
    text = speed_gap_text(rows)
    print(
        f"The speed gap: per-user output tok/s alone and with {DEMO_LOADED_USERS} users "
        f"({DEMO_INPUT_TOKENS}-token prompts, {DEMO_OUTPUT_TOKENS}-token answers, smallest deployment that fits):\n"
    )
    print(text, flush=True)
    scenario = {
        "kind": "speed-gap",
        "models": [{"model": m, "weights": w} for m, w in DEMO_MODELS],
        "input_tokens": DEMO_INPUT_TOKENS,
        "output_tokens": DEMO_OUTPUT_TOKENS,
        "concurrency": [1, DEMO_LOADED_USERS],
        "seed": SPEED_WAR_SCENARIO["run"]["seed"],  # type: ignore[index]
        "version": __version__,
        "deployments": [deployment_dict(r.single.deployment) for r in rows if r.single],
    }
    files = {
        "speed_gap.txt": text + "\n",
        "speed_gap.json": json.dumps([r.to_dict() for r in rows], indent=2) + "\n",
        "scenario.resolved.yaml": yaml.safe_dump(scenario, sort_keys=False),
    }
    agents = [] if args.no_agents else agent_war(catalog)
    if agents:
        files |= {
            f"agents/run-{i:03d}/{name}": t
            for i, row in enumerate(agents)
            for name, t in _run_files(row.result).items()
        }
        files["agents/compare.json"] = json.dumps([row.to_dict() for row in agents], indent=2) + "\n"
        files["agents/compare.txt"] = comparison_table(agents) + "\n"
        files["agents/tasks.txt"] = task_table(agents) + "\n"
        print(f"\nAgents under load: fast-tool coding agents (50 calls each) on gpt-oss-120b, "
              f"{' and '.join(str(n) for n in SPEED_WAR_AGENTS)} at once (simulated):\n")  # fmt: skip
        print(task_table(agents))
    write_results(args.out, files)
    page = write_report(args.out)
    print(f"\nwrote {args.out}/ (speed_gap.txt, speed_gap.json, agents/, scenario.resolved.yaml)")
    print(f"report: {page.resolve()}")
    return 0


# -- parser -----------------------------------------------------------------------------------
def _concurrency(text: str) -> str:
    if text != "max" and not (text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'max', got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infersim", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"infersim {__version__}")
    parser.add_argument("--hardware-dir", type=Path, help="directory of hardware profile YAMLs")
    parser.add_argument("--model-dir", type=Path, help="directory of model profile YAMLs")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("profiles", help="list hardware and model profiles with their key numbers")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_profiles)

    p = sub.add_parser("estimate", help="deployment, TTFT, ITL, per-user and aggregate speed, breakdown")
    p.add_argument("--hardware", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--chips", type=int)
    p.add_argument("--tensor-parallel", type=int)
    p.add_argument("--pipeline-parallel", type=int)
    p.add_argument("--weights", choices=get_args(Precision))
    p.add_argument("--kv-cache", choices=get_args(Precision))
    p.add_argument("--input-tokens", type=int, default=DEMO_INPUT_TOKENS)
    p.add_argument("--output-tokens", type=int, default=DEMO_OUTPUT_TOKENS)
    p.add_argument("--concurrency", type=_concurrency, default="1", help="an integer or 'max'")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("validate", help="predict every row of a measurement table and report the error")
    p.add_argument("table", nargs="?", type=Path, help="CSV (default: the bundled measurements)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("run", help="simulate a scenario under load and write a results folder")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")
    p.add_argument("scenario", type=Path)
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field; a,b,c sweeps it")
    p.add_argument("-o", "--out", type=Path, help="results folder (default: runs/<scenario name>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="a self-contained HTML report (and PNG figures) of a results folder")
    p.add_argument("folder", type=Path)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("sweep", help="a grid / sample of scenarios with seeds, on a process pool or Dask")
    p.add_argument("sweep", type=Path)
    p.add_argument("--executor", choices=("local", "dask"), default="local")
    p.add_argument("--address", help="Dask scheduler, e.g. tcp://10.0.0.5:8786 (default: a local cluster)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)")
    p.add_argument("-o", "--out", type=Path, help="results and cache folder (default: runs/sweep-<name>)")
    p.add_argument("--json", action="store_true", help="print every row and the summary as JSON")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("calibrate", help="fit a profile's efficiencies and latencies to measured rows")
    p.add_argument("--hardware", required=True)
    p.add_argument("--table", type=Path, help="measurement CSV (default: the bundled measurements)")
    p.add_argument("--fit", help="comma-separated parameter paths (default: the profile's previously fitted ones)")
    p.add_argument("--rows", help="comma-separated row ids (default: the hardware's unflagged, predictable rows)")
    p.add_argument("-o", "--out", type=Path, help="folder for the calibrated YAML and fit.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("compare", help="one scenario on several hardware profiles: speed against cost")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")
    p.add_argument("scenario", type=Path)
    p.add_argument("--hardware", required=True, help="comma-separated hardware profile ids")
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field; a,b,c compares loads")
    p.add_argument("-o", "--out", type=Path, help="results folder (default: runs/compare-<scenario name>)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("plan", help="the cheapest fleet meeting every SLO target, searched by simulation")
    p.add_argument("--report", action="store_true", help="also write report.html with the figures")
    p.add_argument("scenario", type=Path)
    p.add_argument("--set", action="append", metavar="PATH=VALUE", help="override a field")
    p.add_argument("-o", "--out", type=Path, help="results folder (default: runs/plan-<scenario name>)")
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("demo", help="the speed war: the speed gap, agents under load, cost per task, a report")
    p.add_argument("-o", "--out", type=Path, default=Path("results/demo"))
    p.add_argument("--no-agents", action="store_true", help="only the closed-form speed gap (seconds, not minutes)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (ConfigError, PlacementError, ScenarioError) as exc:
        print(f"infersim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # the reader (e.g. `| head`) closed early: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
