"""The demo command: the speed war end to end, written to one results folder with its report."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from simulator.cli.common import catalog, json_text, messages_aside, run_files
from simulator.cli.output import FileContents, ResultsFolder
from simulator.cli.report import write_report
from simulator.serialize import deployment_dict
from simulator.studies.compare import ComparisonRow, comparison_table
from simulator.studies.demo import (
    DEMO_INPUT_TOKENS,
    DEMO_LOADED_USERS,
    DEMO_MODELS,
    DEMO_OUTPUT_TOKENS,
    SPEED_WAR_AGENTS,
    SPEED_WAR_SCENARIO,
    GapRow,
    agent_war,
    speed_gap,
    speed_gap_text,
    task_table,
)
from simulator.version import __version__


def demo(args: argparse.Namespace) -> int:
    with messages_aside(args):
        document = _demo(args)
    if args.json:
        print(json_text(document), end="")
    return 0


def _demo(args: argparse.Namespace) -> dict[str, object]:
    """Run the demo, print its tables and write its folder: what ``--json`` prints."""
    cat = catalog(args)
    out = ResultsFolder(args.out or Path("results/demo"), "demo", args.overwrite)
    rows = speed_gap(cat)
    text = speed_gap_text(rows)
    print(
        f"The speed gap: per-user output tok/s alone and with {DEMO_LOADED_USERS} users "
        f"({DEMO_INPUT_TOKENS}-token prompts, {DEMO_OUTPUT_TOKENS}-token answers, smallest deployment that fits):\n"
    )
    print(text, flush=True)
    files = _speed_gap_files(rows, text)
    agents = [] if args.no_agents else agent_war(cat)
    if agents:
        files |= _agent_files(agents)
        print(
            f"\nAgents under load: fast-tool coding agents (50 calls each) on gpt-oss-120b, "
            f"{' and '.join(str(n) for n in SPEED_WAR_AGENTS)} at once (simulated):\n"
        )
        print(task_table(agents))
    out.write(files)
    page = write_report(out.path)
    written = [
        "speed_gap.txt",
        "speed_gap.json",
        *(["agents/"] if agents else []),
        "scenario.resolved.yaml",
        "report.html",
        "figures/",
    ]
    print(f"\nwrote {out.path}/ ({', '.join(written)})")
    print(f"report: {page.resolve()}")
    return {
        "folder": str(out.path),
        "report": str(page),
        "speed_gap": [r.to_dict() for r in rows],
        "agents": [row.to_dict() for row in agents],
    }


def _speed_gap_files(rows: list[GapRow], text: str) -> dict[str, FileContents]:
    """The speed-gap table, its rows as JSON and the scenario it answers (with the deployments chosen)."""
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
    return {
        "speed_gap.txt": text + "\n",
        "speed_gap.json": json_text([r.to_dict() for r in rows]),
        "scenario.resolved.yaml": yaml.safe_dump(scenario, sort_keys=False),
    }


def _agent_files(agents: list[ComparisonRow]) -> dict[str, FileContents]:
    """Each agent run's folder under agents/, then the comparison and task tables."""
    files: dict[str, FileContents] = {
        f"agents/run-{i:03d}/{name}": t for i, row in enumerate(agents) for name, t in run_files(row.result).items()
    }
    files["agents/compare.json"] = json_text([row.to_dict() for row in agents])
    files["agents/compare.txt"] = comparison_table([row.to_dict() for row in agents]) + "\n"
    files["agents/tasks.txt"] = task_table(agents) + "\n"
    return files
