"""Simulator speed and memory: wall time, simulated requests and events per wall second,
peak memory, for chat workloads on each architecture (``make bench``; not part of CI).

Each case runs in a fresh process so its peak RSS is its own. The load is Poisson at 60 %
of the deployment's analytic saturation throughput, so batches form and change as they do
in service. "events" counts the SimPy events the run scheduled; "steps" the model
iterations simulated (a decode jump covers many steps with one event).

    python benchmarks/run.py [--sizes 10000,100000,1000000] [--hardware groq-lpu,...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time

from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.placement import plan
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.engine.build import build
from simulator.results.metrics import summarize
from simulator.results.records import freeze
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
    deployment = plan(catalog.hardware(hardware), catalog.model(model), spec)
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


def measure(hardware: str, model: str, requests: int) -> dict[str, object]:
    catalog = Catalog()
    scenario = chat_scenario(hardware, model, requests, catalog)
    start = time.perf_counter()
    simulation = build(scenario, catalog)
    end_s = simulation.run()
    summary = summarize(freeze(simulation, end_s), scenario.slo)
    wall = time.perf_counter() - start
    events = next(simulation.env._eid)  # SimPy's running event id: events scheduled so far
    return {
        "hardware": hardware, "requests": requests, "wall_s": wall, "requests_per_wall_s": requests / wall,
        "events_per_wall_s": events / wall, "steps": sum(r["iterations"] for r in summary["replicas"]),
        "simulated_s": end_s, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "batch": summary["mean_batch_size"],
    }  # fmt: skip


def _child(args: tuple[str, str, int], queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(measure(*args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--hardware", default=",".join(CASES))
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    rows = []
    for hardware in args.hardware.split(","):
        for size in map(int, args.sizes.split(",")):
            queue = context.Queue()
            child = context.Process(target=_child, args=((hardware, CASES[hardware], size), queue))
            child.start()
            r = queue.get()
            child.join()
            rows.append([r["hardware"], r["requests"], f"{r['wall_s']:.1f}", f"{r['requests_per_wall_s']:,.0f}",
                         f"{r['events_per_wall_s']:,.0f}", f"{r['steps']:,}", f"{r['simulated_s']:,.0f}",
                         f"{r['batch']:.1f}", f"{r['peak_rss_mb']:.0f}"])  # fmt: skip
            print(rows[-1], flush=True)
    headers = ["hardware", "requests", "wall s", "req/wall s", "events/wall s", "steps", "sim s", "batch", "peak MB"]
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
