"""``infersim import``, ``infersim compare-measured`` and ``infersim models import``: measured runs in,
simulated against measured out, model profiles from a Hugging Face ``config.json``.

``import`` reads result files (:mod:`simulator.io.importers`), refuses the whole command (exit 2,
nothing written) when any run's load cannot be reproduced and it has no per-request data,
and writes one folder: ``measurements.csv`` (rows ``validate`` and ``calibrate --table``
read), ``traces/<run>.jsonl`` (task-graph traces ``infersim run`` replays),
``measured/<run>.csv`` (the measured requests in trace order), ``scenarios/<run>.yaml`` (the
replay as a scenario: ``infersim run FOLDER/scenarios/<run>.yaml --set load.rate_scale=2`` predicts
the same requests at twice the rate) and ``import.json`` (every run: its source, load, notes,
statistics and deployment).

``compare-measured`` replays every trace of an import folder through the engine with the
import's seed and compares request by request (:mod:`simulator.studies.measured`).
"""

from __future__ import annotations

import argparse
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.cli.common import catalog, json_text, messages_aside
from simulator.cli.output import ResultsFolder, subfolder
from simulator.config.base import MAX_INTEGER
from simulator.config.files import read_json
from simulator.config.loading import Catalog
from simulator.config.model import ModelSpec
from simulator.errors import ConfigError, InfersimError, InfersimWarning, did_you_mean
from simulator.tables import format_table

if TYPE_CHECKING:
    from simulator.config.hardware import HardwareProfile
    from simulator.io.importers.common import ImportedRun, PerRequest
    from simulator.io.importers.rows import Deployment

MANIFEST = "import.json"
TABLE = "measurements.csv"


def _known(kind: str, ident: str, ids: list[str], hint: str) -> None:
    if ident not in ids:
        raise ConfigError(
            f"--{kind}: no {kind} profile {ident!r}{did_you_mean(ident, ids)} (known: {', '.join(ids)}); {hint}"
        )


def _model_for(name: str | None, cat: Catalog, source: str) -> str:
    """The catalog model whose ``hf_repo`` the file names (case and an -Instruct suffix aside)."""
    if not name:
        raise ConfigError(f"{source}: the file does not name its model; give --model")

    def key(text: str) -> str:
        return text.lower().removesuffix("-instruct")

    for ident in cat.model_ids():
        repo = cat.model(ident).hf_repo
        if repo and key(repo) == key(name):
            return ident
    raise ConfigError(
        f"{source}: model {name!r}: no model profile has this hf_repo; give --model, or add one with "
        f"`infersim models import config.json` (then --model-dir)"
    )


def _repo_key(text: str) -> str:
    """A Hub id as result files write it: case, an -Instruct suffix and a local snapshot folder aside."""
    return text.lower().rstrip("/").rsplit("/", 2)[-1].removesuffix("-instruct")


def _warn_if_other_model(given: str | None, stated: str | None, cat: Catalog, source: str) -> None:
    """Warn when ``--model`` names a profile whose ``hf_repo`` is not the model the file states."""
    if not given or not stated:
        return
    repo = cat.model(given).hf_repo
    if repo and _repo_key(repo) != _repo_key(stated):
        warnings.warn(
            f"{source}: the file states model {stated!r}, but --model {given} is {repo!r}; "
            "the rows compare against the profile given",
            InfersimWarning,
            stacklevel=1,
        )


def _warn_if_other_memory(path: Path, hardware: HardwareProfile) -> None:
    """Warn when the result file's path states a memory size per chip (``a100-40gb``) that no
    weight-holding memory of ``--hardware`` has (within 5 %, read in GB or GiB: datasheets round binary
    sizes, and profiles hold what CUDA sees): the A100's 40 GB and 80 GB variants share everything but
    their capacity, which sets the batch a run could hold."""
    stated = {int(n) for n in re.findall(r"(?<![0-9.])([0-9]{2,3}) ?gb(?![a-z])", str(path).lower())}
    tiers = {t.name: t.capacity.value / 1e9 for t in hardware.memory if t.holds_weights}
    for size in sorted(stated):
        if tiers and not any(abs(r - size) <= 0.05 * size for gb in tiers.values() for r in (gb, gb * 1e9 / 2**30)):
            have = ", ".join(f"{gb:g} GB of {name}" for name, gb in tiers.items())
            warnings.warn(
                f"{path}: its path states {size} GB per chip, but --hardware {hardware.id} has {have}; "
                "capacity-bound figures will differ (use a profile of that variant)",
                InfersimWarning,
                stacklevel=1,
            )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:80]


def import_command(args: argparse.Namespace) -> int:
    """Import measured results: the rows table, the manifest and each replayable run's trace and scenario."""
    from simulator.io.importers.rows import COLUMNS

    if not 0 <= args.seed <= MAX_INTEGER:
        raise ConfigError(f"--seed: expected an integer from 0 to 2**63 - 1, got {args.seed}")
    cat = catalog(args)
    _check_known(args, cat)
    out = ResultsFolder(args.out or Path("runs") / "import", "import", args.overwrite)
    table, files, manifest = _import_runs(args, cat, out.path)
    files[TABLE] = _csv(table, COLUMNS)
    files[MANIFEST] = json_text({"schema_version": 1, "runs": manifest})
    out.write(files)
    with messages_aside(args):
        _import_text(table, manifest, out.path)
    if args.json:
        print(
            json_text({"folder": str(out.path), "rows": len(table), "table": str(out.path / TABLE), "runs": manifest}),
            end="",
        )
    return 0


def _import_runs(
    args: argparse.Namespace, cat: Catalog, folder: Path
) -> tuple[list[dict[str, str]], dict[str, str], list[dict[str, object]]]:
    """Every run of every result file, flagged and compared on its deployment: the table rows, the
    replay files and the manifest entries."""
    from simulator.io.importers import read_file
    from simulator.io.importers.rows import rows

    table: list[dict[str, str]] = []
    files: dict[str, str] = {}
    manifest: list[dict[str, object]] = []
    for path in args.results:
        runs = read_file(path, args.format)
        for index, run in enumerate(runs):
            if run.load is None and run.per_request is None:
                raise ConfigError(f"refused: {run.refusal}")
            deployment = _deployment(args, cat, path, index, run)
            run_id = _slug(path.stem) + (f"-{index + 1}" if len(runs) > 1 else "")
            if any(m["id"] == run_id for m in manifest):
                raise ConfigError(f"{path}: a second result file named {path.stem!r}; import it into its own folder")
            flagged = _flagged(args, cat, run, deployment)
            table += rows(flagged, deployment, run_id)
            entry = _entry(flagged, deployment, run_id)
            files |= _replay_files(args, cat, folder, flagged, entry)
            manifest.append(entry)
    return table, files, manifest


def _check_known(args: argparse.Namespace, cat: Catalog) -> None:
    """Refuse a hardware, stack or model id the catalog does not know."""
    _known(
        "hardware",
        args.hardware,
        cat.hardware_ids(),
        "add a hardware profile YAML for it (hardware_profiles/ or --hardware-dir)",
    )
    if args.stack:
        _known("stack", args.stack, cat.stack_ids(), "add a serving stack profile (--stack-dir)")
    if args.model:
        _known("model", args.model, cat.model_ids(), "add one with `infersim models import config.json`")


def _deployment(args: argparse.Namespace, cat: Catalog, path: Path, index: int, run: ImportedRun) -> Deployment:
    """The deployment an imported run is compared on (the model named, or the one its file names),
    warning when the file names another model or memory size than the deployment's."""
    from simulator.io.importers.rows import Deployment

    model = args.model or _model_for(run.model_name, cat, run.source)
    _warn_if_other_model(args.model, run.model_name, cat, run.source)
    if index == 0:
        _warn_if_other_memory(path, cat.hardware(args.hardware))
    weights = args.weights or cat.model(model).native_precision
    return Deployment(
        args.hardware,
        model,
        weights,
        args.chips,
        args.layout or "",
        args.stack or "",
        args.spec_decoding,
        args.replicas,
    )


def _flagged(args: argparse.Namespace, cat: Catalog, run: ImportedRun, deployment: Deployment) -> ImportedRun:
    """The run with the flags of its rows (below a physical floor, served from a prefix cache), each warned."""
    from simulator.io.importers.checks import cache_warning, floor_flags

    hardware, model_spec = cat.hardware(args.hardware), cat.model(deployment.model)
    weights = args.weights or model_spec.native_precision
    flags = (*run.flags, *floor_flags(run, model_spec, hardware, args.chips, weights, args.spec_decoding))
    for flag in flags:
        warnings.warn(f"{run.source}: rows kept but flagged: {flag}", InfersimWarning, stacklevel=1)
    warning = cache_warning(run, model_spec, hardware, args.chips)
    if warning:
        warnings.warn(warning, InfersimWarning, stacklevel=1)
        run = replace(run, notes=(*run.notes, "TTFTs beat the prefill floor: served from a prefix cache"))
        flags = (*flags, "every TTFT beats the prefill floor of its offline batch: served from a prefix cache")
    return replace(run, flags=flags)


def _entry(run: ImportedRun, deployment: Deployment, run_id: str) -> dict[str, object]:
    """The run's entry in the import's manifest: where it came from, its deployment, load and metrics."""
    return {
        "id": run_id,
        "source": run.source,
        "format": run.format,
        "model_name": run.model_name,
        "deployment": vars(deployment),
        "load": None if run.load is None else run.load.words(),
        "refusal": run.refusal,
        "notes": list(run.notes),
        "input_tokens_mean": run.input_tokens_mean,
        "output_tokens_mean": run.output_tokens_mean,
        "metrics": {m: {"field": s.field, **s.values} for m, s in run.metrics.items()},
    }


def _replay_files(
    args: argparse.Namespace, cat: Catalog, folder: Path, run: ImportedRun, entry: dict[str, object]
) -> dict[str, str]:
    """The trace, measured table and replay scenario of a run with per-request data, named in ``entry``
    (none for a closed loop without send times, noted in ``entry``)."""
    from simulator.io.importers.rows import measured_csv, trace_lines

    per_request = run.per_request
    if per_request is None:
        return {}
    if per_request.arrival_s is None and run.load is not None and run.load.kind == "closed":
        entry["notes"] = [
            *run.notes,
            "a closed loop without recorded send times: no replay trace "
            "(vLLM clients that record start_times give one)",
        ]
        return {}
    run_id = entry["id"]
    entry |= {
        "trace": f"traces/{run_id}.jsonl",
        "measured": f"measured/{run_id}.csv",
        "seed": args.seed,
        "scenario": f"scenarios/{run_id}.yaml",
    }
    return {
        f"traces/{run_id}.jsonl": trace_lines(run, args.seed),
        f"measured/{run_id}.csv": measured_csv(run),
        f"scenarios/{run_id}.yaml": _replay_yaml(entry, per_request, folder, cat),
    }


def _import_text(table: list[dict[str, str]], manifest: list[dict[str, object]], path: Path) -> None:
    """The import's runs as a table, and where they were written."""
    print(
        format_table(
            ["run", "format", "load", "rows", "requests"],
            [
                [
                    str(m["id"]),
                    str(m["format"]),
                    str(m["load"] or "-"),
                    str(sum(r["id"].startswith(f"{m['id']}-") for r in table)),
                    "yes" if "trace" in m else "-",
                ]
                for m in manifest
            ],
        )
    )
    print(
        f"\nwrote {len(table)} rows and {sum('trace' in m for m in manifest)} traces to {path} "
        f"(infersim validate {path / TABLE}; infersim compare-measured {path})"
    )
    for m in manifest:
        if "trace" in m:
            print(
                f"a prediction at another load: infersim run {path / 'scenarios' / str(m['id'])}.yaml --set "
                "load.rate_scale=2"
            )


def _replay_yaml(entry: dict[str, object], per_request: PerRequest, folder: Path, cat: Catalog) -> str:
    """The scenario that replays a run (as ``compare-measured`` does), its trace path relative to
    the scenario file so the folder can move: ``infersim run FOLDER/scenarios/<run>.yaml --set
    load.rate_scale=2`` predicts the same requests sent twice as fast."""
    import numpy as np

    from simulator.cli.common import scenario_yaml
    from simulator.studies.measured import scenario

    measured = {
        "input_tokens": np.asarray(per_request.input_tokens, dtype=float),
        "output_tokens": np.asarray(per_request.output_tokens, dtype=float),
        "ttft_s": np.asarray(per_request.ttft_s, dtype=float),
    }
    replay = scenario(entry, folder, measured, cat)
    assert replay.load is not None  # a trace load
    relative = Path("..") / str(entry["trace"])
    return scenario_yaml(replay.model_copy(update={"load": replay.load.model_copy(update={"path": relative})}))


def _csv(rows: list[dict[str, str]], columns: tuple[str, ...]) -> str:
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def compare_measured(args: argparse.Namespace) -> int:
    """Replay each traced run of an import and compare it with what was measured, request by request."""
    folder: Path = args.folder
    traced = _traced_runs(folder)
    cat = catalog(args)
    out = ResultsFolder(args.out or subfolder(folder, "compare"), "compare-measured", args.overwrite)
    files: dict[str, str | bytes] = {}
    report: dict[str, object] = {}
    with messages_aside(args):
        _replay(args, traced, folder, cat, files, report)
    if args.report:
        files["report.html"] = _html(report, [str(e["id"]) for e in traced])
    files["compare.json"] = json_text(report)
    out.write(files)
    if args.json:
        print(json_text({"folder": str(out.path), "runs": report}), end="")
    else:
        print(f"wrote {', '.join(sorted(f for f in files if '/' not in f))} to {out.path}")
    return 0


def _traced_runs(folder: Path) -> list[dict[str, object]]:
    """The manifest's runs with per-request data (a trace) to replay; none is an error."""
    data = read_json(folder / MANIFEST)
    runs = data.get("runs") if isinstance(data, dict) else None
    if not isinstance(runs, list):
        raise ConfigError(f"{folder / MANIFEST}: runs: expected a list (a folder written by infersim import)")
    traced = [r for r in runs if isinstance(r, dict) and "trace" in r]
    if not traced:
        raise ConfigError(f"{folder}: no run of this import has per-request data to replay")
    return traced


def _replay(
    args: argparse.Namespace,
    traced: list[dict[str, object]],
    folder: Path,
    cat: Catalog,
    files: dict[str, str | bytes],
    report: dict[str, object],
) -> None:
    """Each traced run replayed and compared (its table printed; files and summary added)."""
    from simulator.studies.measured import compare_run, comparison_csv, summary_rows

    for entry in traced:
        try:
            comparison = compare_run(entry, folder, cat)
        except InfersimError as exc:
            raise ConfigError(f"{folder / MANIFEST}: run {entry.get('id')}: {exc}") from None
        files[f"{entry['id']}.csv"] = comparison_csv(comparison)
        report[str(entry["id"])] = comparison.summary()
        print(f"{entry['id']} ({comparison.requests} requests, {comparison.served})")
        print(
            format_table(
                ["metric", "measured p50", "simulated p50", "bias", "median |error|", "p90 |error|"],
                summary_rows(comparison),
            )
        )
        print()
        if args.report:
            from simulator.studies.measured import cdf_figure

            files[f"figures/{entry['id']}-cdf.png"] = cdf_figure(comparison)


def _html(report: dict[str, object], ids: list[str]) -> str:
    """A self-contained page: each run's table and its CDF figure (beside it, in figures/)."""
    import html

    parts = [
        "<!doctype html><meta charset=utf-8><title>infersim: simulated against measured</title>",
        "<h1>Simulated against measured, request by request</h1>",
    ]
    for ident in ids:
        parts.append(f"<h2>{html.escape(ident)}</h2><pre>{html.escape(json_text(report[ident]))}</pre>")
        parts.append(f'<img src="figures/{html.escape(ident)}-cdf.png" alt="CDF of TTFT, TPOT and E2E">')
    return "\n".join(parts) + "\n"


def models_import(args: argparse.Namespace) -> int:
    import yaml

    from simulator.io.hf_config import profile_from_config

    profile: ModelSpec = profile_from_config(args.config, args.name, args.hf_repo)
    out = ResultsFolder(args.out or Path("runs") / f"model-{profile.id}", "models-import", args.overwrite)
    text = yaml.safe_dump(profile.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
    out.write({f"{profile.id}.yaml": text})
    from simulator.analytic.architecture import active_params, kv_bytes_per_token, total_params

    total, active, kv = total_params(profile), active_params(profile), kv_bytes_per_token(profile)
    if args.json:
        print(
            json_text(
                {
                    "file": str(out.path / f"{profile.id}.yaml"),
                    "total_params": total,
                    "active_params": active,
                    "kv_bytes_per_token": kv,
                    "profile": profile.model_dump(mode="json"),
                }
            ),
            end="",
        )
        return 0
    print(
        f"{profile.id}: {total / 1e9:.2f} B parameters, {active / 1e9:.2f} B active, {kv:,.0f} B of KV per token (bf16)"
    )
    print(f"wrote {profile.id}.yaml to {out.path} (use it with --model-dir {out.path})")
    return 0


def export_command(args: argparse.Namespace) -> int:
    """A run folder's results in a peer's format, written beside them (:mod:`simulator.io.exporters`)."""
    folder: Path = args.folder
    out = ResultsFolder(folder, None)
    columns = _request_columns(folder)
    summary, scenario = _run_documents(folder)
    document = _exported(args.format, folder, columns, summary, scenario)
    name = f"summary.{args.format}.json"
    out.write({name: json_text(document)})
    if args.json:
        print(json_text({"file": str(folder / name), "format": args.format, "summary": document}), end="")
    else:
        print(f"wrote {folder / name}")
    return 0


def _request_columns(folder: Path) -> dict[str, Any]:
    """requests.csv as one float array per column (an empty cell is NaN)."""
    import numpy as np

    from simulator.config.files import read_csv

    header, lines = read_csv(folder / "requests.csv", ("arrival_s", "first_token_s", "done_s", "dropped"))
    try:
        return {name: np.array([float(row[name] or "nan") for _, row in lines]) for name in header}
    except ValueError:
        raise ConfigError(f"{folder / 'requests.csv'}: expected numbers in every column") from None


def _run_documents(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """summary.json and scenario.resolved.yaml, the scenario's run.warmup in seconds."""
    from simulator.config.files import read_yaml
    from simulator.units import parse_quantity

    summary, scenario = read_json(folder / "summary.json"), read_yaml(folder / "scenario.resolved.yaml")
    if not isinstance(summary, dict) or not isinstance(scenario, dict):
        raise ConfigError(f"{folder}: summary.json and scenario.resolved.yaml: expected a run folder's mappings")
    warmup = (scenario.get("run") or {}).get("warmup") or 0.0
    try:
        seconds = float(warmup) if isinstance(warmup, int | float) else parse_quantity(str(warmup), "time")
    except ValueError as exc:
        raise ConfigError(f"{folder / 'scenario.resolved.yaml'}: run.warmup: {exc}") from None
    scenario["run"] = (scenario.get("run") or {}) | {"warmup": seconds}
    return summary, scenario


def _exported(
    kind: str, folder: Path, columns: dict[str, Any], summary: dict[str, Any], scenario: dict[str, Any]
) -> object:
    """The document in the peer's format; vLLM's names the time summary.json was written."""
    import datetime

    from simulator.io import exporters
    from simulator.version import __version__

    if kind == "vllm-bench":
        written = datetime.datetime.fromtimestamp((folder / "summary.json").stat().st_mtime)
        return exporters.vllm_bench(columns, summary, scenario, __version__, written.strftime("%Y%m%d-%H%M%S"))
    return getattr(exporters, kind)(columns, summary, scenario, __version__)
