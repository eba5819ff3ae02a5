"""What several commands share: the catalog, ``--set`` values, result files, tables, progress."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

import yaml

from simulator.capacity import Capacity
from simulator.cli import stop_if_terminated
from simulator.cli.output import FileContents, ResultsFolder
from simulator.config.loading import Catalog, parse_override
from simulator.config.scenario import Scenario
from simulator.errors import ConfigError
from simulator.plan.limits import Limits
from simulator.results.summary import RunSummary
from simulator.results.views import BACKEND_HEADERS, CLASS_HEADERS, backend_rows, class_rows
from simulator.runner import RunResult
from simulator.serialize import strict_json
from simulator.tables import format_number, format_table
from simulator.units import format_seconds
from simulator.version import __version__


def catalog(args: argparse.Namespace) -> Catalog:
    return Catalog(args.hardware_dir, args.model_dir, stack_dir=args.stack_dir)


def profile_dirs(args: argparse.Namespace) -> tuple[str | None, str | None, str | None]:
    """The user's profile folders, as a worker process or a Dask worker gets them."""
    return tuple(str(d) if d else None for d in (args.hardware_dir, args.model_dir, args.stack_dir))  # type: ignore[return-value]


def sweep_values(overrides: Sequence[str]) -> list[dict[str, object]]:
    """Every combination of ``--set`` values (a comma list of values sweeps that field)."""
    combos: list[dict[str, object]] = [{}]
    for text in overrides:
        path, values = parse_override(text)
        combos = [combo | {path: value} for combo in combos for value in values]
    return combos


def count_values(overrides: Sequence[str]) -> tuple[int, str]:
    """How many runs the ``--set`` comma lists expand into, and how (``100 load.users x 3 run.seed``):
    the product of their lengths, counted from the text as :func:`parse_override` splits it (a YAML
    flow value is one value), before any value is parsed or any combination built."""
    lengths = []
    for text in overrides:
        path, _, raw = text.partition("=")
        flow = raw.strip().startswith(("{", "["))
        lengths.append((path.strip(), 1 if flow else raw.count(",") + 1))
    how = " x ".join(f"{n:,} {path}" for path, n in lengths if n > 1)
    return math.prod(n for _, n in lengths), how or "one value each"


def single_values(overrides: Sequence[str], command: str) -> dict[str, object]:
    combos = sweep_values(overrides)
    if len(combos) > 1:
        raise ConfigError(f"{command} takes one value per --set field (a comma list would sweep it)")
    return combos[0]


def limits(args: argparse.Namespace) -> Limits | None:
    """The up-front size limits, unless ``--allow-large-runs``."""
    return None if args.allow_large_runs else Limits()


def set_label(combo: dict[str, object]) -> str:
    """``--set`` values of one run, as ``path=value, ...``."""
    return ", ".join(f"{k}={v}" for k, v in combo.items())


def run_index(headers: list[str], rows: list[list[object]]) -> str:
    """Which run folder holds what: ``run-NNN`` and its values, one line each."""
    return format_table(["folder", *headers], [[f"run-{i:03d}", *row] for i, row in enumerate(rows)]) + "\n"


def scenario_yaml(scenario: Scenario) -> str:
    """The resolved scenario with its provenance (version, seed): rerunnable as it stands."""
    data = scenario.model_dump(mode="json", by_alias=True)
    data["provenance"] = {"version": __version__, "seed": scenario.run.seed}
    return str(yaml.safe_dump(data, sort_keys=False))


def json_text(payload: object) -> str:
    """Strict JSON (``null`` where a number is undefined), indented, with a final newline."""
    return json.dumps(strict_json(payload), indent=2, allow_nan=False) + "\n"


@contextlib.contextmanager
def messages_aside(args: argparse.Namespace) -> Iterator[None]:
    """Under ``--json`` the command's messages (its tables, ``wrote ...``) go to standard error,
    so that standard output holds only the one JSON document printed after this block."""
    if not getattr(args, "json", False):
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


def run_files(result: RunResult) -> dict[str, FileContents]:
    """A run's files; the per-request and level tables are written piece by piece."""
    return {
        "summary.json": json_text(result.summary.to_dict()),
        "requests.csv": result.records.csv_chunks(),
        "levels.csv": result.records.levels_csv_chunks(),
        "scenario.resolved.yaml": scenario_yaml(result.scenario),
    }


def progress_bar(label: str) -> Callable[[float], None]:
    """A one-line bar with an ETA on stderr (used only when stderr is a terminal)."""
    started = time.monotonic()

    def show(fraction: float) -> None:
        fraction = min(max(fraction, 0.0), 1.0)
        elapsed = time.monotonic() - started
        meaningful = 0.01 <= fraction < 1  # an ETA from the first percent would be noise
        eta = f"ETA {elapsed / fraction * (1 - fraction):.0f} s" if meaningful else f"{elapsed:.0f} s"
        bar = "#" * round(30 * fraction)
        print(
            f"\rinfersim {label}: [{bar:<30}] {fraction:4.0%} {eta}   ",
            end="\n" if fraction >= 1 else "",
            file=sys.stderr,
            flush=True,
        )

    return show


def progress_lines(command: str, args: argparse.Namespace) -> Callable[[str], None] | None:
    """One line per step of a long command on stderr (not with ``--json``)."""
    if getattr(args, "json", False):
        return None
    return lambda text: print(f"infersim {command}: {text}", file=sys.stderr, flush=True)


class Countdown:
    """``k/n`` and an ETA (:func:`progress_text`) for progress lines, counting finished runs."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.monotonic()

    def finished(self) -> str:
        """Count one more finished run (never past the total); ``k/n done, ETA s``."""
        self.done = min(self.done + 1, self.total)
        return progress_text(self.done, self.total, time.monotonic() - self.started)


def progress_text(done: int, total: int, elapsed_s: float) -> str:
    """``k/n done`` with ``0 <= k <= n``, and an ETA once one run has finished and while runs are
    left: the mean wall time per finished run times the runs left (never negative); then the time taken."""
    done = min(max(done, 0), total)
    elapsed_s = max(elapsed_s, 0.0)
    left = total - done
    if not left:
        return f"{done}/{total} done, {elapsed_s:.0f} s"
    return f"{done}/{total} done" + (f", ETA {elapsed_s / done * left:.0f} s" if done else "")


class PartialFolder:
    """A results folder filled run by run (:mod:`simulator.cli.output`): each finished run's files
    with ``<stem>.partial.json`` (``partial: true``, what is done, version, seed), then the full results."""

    def __init__(self, out: ResultsFolder, stem: str, seed: int) -> None:
        self.out, self.stem, self.seed = out, stem, seed
        self.written: list[str] = []
        self.started = False

    def add(self, files: Mapping[str, FileContents], done: object) -> None:
        """Write a finished run's ``files`` (the first write clears an earlier command's results)."""
        note = {
            "partial": True,
            "note": "written while the command ran; it did not finish: what is here is what was done",
            "version": __version__,
            "seed": self.seed,
            "done": done,
        }
        self.out.write(
            {**files, f"{self.stem}.partial.json": json_text(note)}, replace=not self.started, kept=tuple(self.written)
        )
        self.started = True
        self.written += [name for name in files if name not in self.written]
        stop_if_terminated(self.kept())

    def finish(self, files: Mapping[str, FileContents]) -> None:
        """The full results; the runs written before stay, ``<stem>.partial.json`` goes (not after a
        SIGTERM: the folder stays partial)."""
        stop_if_terminated(self.kept())
        self.out.write(files, kept=tuple(name for name in self.written if name not in files))

    def kept(self) -> str:
        """What an interrupted command says it leaves."""
        return (
            f"the finished runs are kept in {self.out.path} (marked partial in {self.stem}.partial.json)"
            if self.started
            else "no results folder was written"
        )


def interactive(args: argparse.Namespace) -> bool:
    """Progress is shown on a terminal, never with ``--json``."""
    return sys.stderr.isatty() and not getattr(args, "json", False)


def maybe_report(args: argparse.Namespace, folder: ResultsFolder) -> None:
    """``--report``: the HTML page of the folder just written."""
    if getattr(args, "report", False):
        from simulator.cli.report import write_report

        page = write_report(folder.path)
        print(f"wrote {page}", file=sys.stderr if args.json else sys.stdout)


# -- run summary tables -------------------------------------------------------------------------
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
SUMMARY_HEADERS = [
    "run", "requests", "TTFT p50", "TTFT p99", "TTST p50", "TPOT", "ITL p99", "tok/s/user p50",
    "output tok/s", "req/s", "batch", "cache hit", "$/1M out", "capacity",
]  # fmt: skip

# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
TASK_HEADERS = [
    "run", "tasks", "task p50 s", "task p90 s", "model s", "tool s", "sub-agents s", "queue s", "network s",
    "calls/task", "tok/s/user p50", "cache hit", "tasks/h", "$/task",
]  # fmt: skip


def summary_row(label: str, s: RunSummary, capacity: Capacity | None = None) -> list[object]:
    """One run's row; a capacity-limited run (:mod:`simulator.capacity`) has its TTFT and speed marked."""
    capacity = capacity or Capacity(None, None, s.preemptions)
    return [
        label,
        s.requests_completed,
        capacity.marked(format_seconds(s.ttft_s.p50)),
        capacity.marked(format_seconds(s.ttft_s.p99)),
        format_seconds(s.ttst_s.p50 if s.ttst_s else math.nan),
        format_seconds(s.tpot_s.mean),
        format_seconds(s.itl_s.p99),
        capacity.marked(format_number(s.per_user_output_tok_s.p50, ",.0f")),
        format_number(s.output_tok_s, ",.0f"),
        format_number(s.requests_per_s, ".3g"),
        format_number(s.mean_batch_size, ".1f"),
        format_number(s.prefix_cache_hit_rate, ".0%"),
        format_number(s.cost.usd_per_million_output_tokens, ".3g"),
        capacity.note() or "ok",
    ]


def speculation_text(label: str, s: RunSummary) -> str:
    """One line on a run's speculative decoding ('' when it does not speculate)."""
    spec = s.speculation
    if spec is None:
        return ""
    return (
        f"{label + ': ' if label else ''}speculative decoding: {format_number(spec.acceptance_length, '.2f')} "
        f"tokens per verify pass (acceptance length; {format_number(spec.acceptance_rate, '.0%')} of "
        f"{spec.draft_tokens:,} drafted tokens accepted over {spec.verify_passes:,} passes)"
    )


# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
KV_HEADERS = ["run", "backend", "KV", "prefill", "transfer", "first decode", "GB moved", "hit tokens",
              "TTFT saved s"]  # fmt: skip


def kv_rows(label: str, s: RunSummary) -> list[list[object]]:
    """KV in motion: each disaggregated backend's TTFT parts (means) and bytes; each backend's KV tiers."""
    rows: list[list[object]] = []
    for name, k in (s.kv_transfers or {}).items():
        rows.append(
            [
                label,
                name,
                f"{k.handoff} to {k.decode_backend}",
                format_seconds(k.prefill_s.mean),
                format_seconds(k.transfer_s.mean),
                format_seconds(k.decode_first_s.mean),
                format_number(k.bytes_moved / 1e9, ",.1f"),
                "-",
                "-",
            ]
        )
    for name, t in (s.kv_tiers or {}).items():
        for tier, v in t.tiers.items():
            rows.append(
                [
                    label,
                    name,
                    f"tier {tier}",
                    "-",
                    "-",
                    "-",
                    format_number(v.bytes_up / 1e9, ",.1f"),
                    f"{v.hit_tokens:,}",
                    format_number(t.ttft_saved_s, ",.1f"),
                ]
            )
    return rows


def task_row(label: str, s: RunSummary) -> list[object]:
    t = s.tasks
    assert t is not None
    part = t.mean_seconds
    return [
        label,
        t.tasks_completed,
        format_number(t.task_time_s.p50, ".1f"),
        format_number(t.task_time_s.p90, ".1f"),
        format_number(part.model, ".1f"),
        format_number(part.tool, ".1f"),
        format_number(part.subagent, ".1f"),
        format_number(part.queue, ".1f"),
        format_number(part.network, ".1f"),
        format_number(t.calls_per_task, ".0f"),
        format_number(s.per_user_output_tok_s.p50, ",.0f"),
        format_number(s.prefix_cache_hit_rate, ".0%"),
        format_number(t.tasks_per_hour, ",.1f"),
        format_number(s.cost.usd_per_task, ".3g"),
    ]


def breakdown_text(label: str, s: RunSummary) -> str:
    """Per-class rows (with attributed cost) and per-backend rows of one run, each titled; empty if one of each."""
    parts = []
    prefix = f"{label}: " if label else ""
    if s.classes:
        parts.append(
            f"{prefix}per class ($ attributed by seat-seconds: a replica's time shared equally among the "
            f"sequences in its batch)\n{format_table(CLASS_HEADERS, class_rows(s))}"
        )
    if len(s.backends) > 1:
        parts.append(f"{prefix}per backend\n{format_table(BACKEND_HEADERS, backend_rows(s))}")
    return "\n\n".join(parts)
