"""Simulator speed and memory: wall time, simulated requests and events per wall second,
peak memory, for chat requests and for concurrent agents on each architecture (``make bench``;
not part of CI).

Each case runs in a fresh process so its peak RSS is its own. Chat: Poisson arrivals at 60 %
of the deployment's analytic saturation throughput, so batches form and change as they do
in service. Agents: N agents each run one 50-step task (1k-token system prompt, ~250 tokens
added per step, ~100-token answers, ~1 s tools) on enough replicas to hold their KV.
"events" counts the SimPy events the run scheduled; "steps" the model iterations simulated
(a decode jump covers many steps with one event).

    python benchmarks/run.py [--sizes 10000,100000,1000000] [--agents 1000,10000] [--hardware groq-lpu,...]
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import yaml

from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.engine.build import build
from simulator.resolve import resolve
from simulator.results.metrics import summarize
from simulator.tables import format_table

CASES = {
    "nvidia-h100-sxm": "llama-3.1-8b",
    "cerebras-cs3": "llama-3.1-8b",
    "groq-lpu": "llama-3.1-8b",
    "sambanova-sn40l": "llama-3.1-8b",
}
PROMPT_MEDIAN, ANSWER_MEDIAN = 512, 128
LOAD_FRACTION = 0.6


def chat_scenario(hardware: str, model: str, requests: int, catalog: Catalog) -> Scenario:
    spec = DeploymentSpec(hardware=hardware, model=model)
    deployment = deploy(catalog, spec)
    users = saturation_concurrency(deployment, PROMPT_MEDIAN, ANSWER_MEDIAN)
    saturated = estimate(deployment, PROMPT_MEDIAN, ANSWER_MEDIAN, users)
    rate = LOAD_FRACTION * saturated.aggregate_output_tok_s / ANSWER_MEDIAN
    return Scenario.model_validate({
        "name": f"bench-{hardware}",
        "deployment": {"hardware": hardware, "model": model},
        "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
        "requests": {"input_tokens": {"dist": "lognormal", "median": PROMPT_MEDIAN, "sigma": 0.6},
                     "output_tokens": {"dist": "lognormal", "median": ANSWER_MEDIAN, "sigma": 0.6}},
        "run": {"seed": 1, "max_requests": requests},
    })  # fmt: skip


AGENT_STEPS = 50
AGENT_TASK = {
    "steps": {"dist": "constant", "value": AGENT_STEPS},
    "system_prompt_tokens": {"dist": "constant", "value": 1000},
    "first_input_tokens": {"dist": "lognormal", "median": 200, "sigma": 0.5},
    "step_input_tokens": {"dist": "lognormal", "median": 150, "sigma": 0.5},
    "output_tokens": {"dist": "lognormal", "median": 100, "sigma": 0.5},
    "tool": {"kind": "api", "latency_s": {"dist": "lognormal", "median": 1.0, "sigma": 0.5}},
}
#: Mean KV tokens an agent holds over its task (system + first input + half the growth).
AGENT_MEAN_CONTEXT = 1000 + 200 + AGENT_STEPS * 260 / 2


def agent_scenario(hardware: str, model: str, agents: int, catalog: Catalog) -> Scenario:
    spec = DeploymentSpec(hardware=hardware, model=model)
    deployment = deploy(catalog, spec)
    kv_tokens = deployment.kv_budget_bytes / deployment.kv_bytes_per_token
    replicas = max(1, math.ceil(1.5 * agents * AGENT_MEAN_CONTEXT / kv_tokens))
    return Scenario.model_validate({
        "name": f"bench-agents-{hardware}",
        "deployment": {"hardware": hardware, "model": model},
        "replicas": replicas,
        "router": {"policy": "least-outstanding-tokens"},
        "load": {"kind": "agents", "workload": "bench-agent", "agents": agents},
        "run": {"seed": 1, "max_requests": agents * AGENT_STEPS},
    })  # fmt: skip


def _bench_catalog(folder: Path) -> Catalog:
    workload = {"schema_version": 1, "id": "bench-agent", "name": "bench agent", "description": "benchmark",
                "sources": {"bench": "benchmarks/run.py"}, "task": AGENT_TASK}  # fmt: skip
    (folder / "bench-agent.yaml").write_text(yaml.safe_dump(workload))
    return Catalog(workload_dir=folder)


def measure(hardware: str, model: str, requests: int, kind: str = "chat") -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        catalog = _bench_catalog(Path(folder))
        scenario = (chat_scenario if kind == "chat" else agent_scenario)(hardware, model, requests, catalog)
        return _timed(scenario, catalog, requests, kind)


def _timed(scenario: Scenario, catalog: Catalog, requests: int, kind: str) -> dict[str, object]:
    start = time.perf_counter()
    simulation = build(resolve(scenario, catalog))
    end_s = simulation.run()
    summary = summarize(simulation.records(end_s), scenario.slo)
    wall = time.perf_counter() - start
    events = next(simulation.env._eid)  # SimPy's running event id: events scheduled so far
    calls = summary.requests_completed
    return {
        "hardware": scenario.deployment.hardware if scenario.deployment else "", "case": f"{requests:,} {kind}",
        "requests": calls, "wall_s": wall, "requests_per_wall_s": calls / wall,
        "events_per_wall_s": events / wall, "steps": sum(r.iterations for r in summary.replicas),
        "simulated_s": end_s, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "batch": summary.mean_batch_size, "replicas": scenario.replicas,
    }  # fmt: skip


def _child(args: tuple[str, str, int, str], queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(measure(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="chat requests per case")
    parser.add_argument("--agents", default="1000,10000", help="concurrent agents per case (empty: none)")
    parser.add_argument("--hardware", default=",".join(CASES))
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    cases = [(n, "chat") for n in map(int, args.sizes.split(",") if args.sizes else [])]
    cases += [(n, "agents") for n in map(int, args.agents.split(",") if args.agents else [])]
    rows = []
    for hardware in args.hardware.split(","):
        for size, kind in cases:
            queue = context.Queue()
            child = context.Process(target=_child, args=((hardware, CASES[hardware], size, kind), queue))
            child.start()
            r = queue.get()
            child.join()
            rows.append([r["hardware"], r["case"], r["replicas"], f"{r['requests']:,}", f"{r['wall_s']:.1f}",
                         f"{r['requests_per_wall_s']:,.0f}", f"{r['events_per_wall_s']:,.0f}", f"{r['steps']:,}",
                         f"{r['simulated_s']:,.0f}", f"{r['batch']:.1f}", f"{r['peak_rss_mb']:.0f}"])  # fmt: skip
            print(rows[-1], flush=True)
    headers = ["hardware", "case", "replicas", "requests", "wall s", "req/wall s", "events/wall s", "steps", "sim s",
               "batch", "peak MB"]  # fmt: skip
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
