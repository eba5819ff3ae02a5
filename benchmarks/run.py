"""Simulator speed and memory (``make bench``; not part of CI): CPU and wall seconds, simulated
requests (model calls) per CPU-second, SimPy events per request and peak RSS, case by case.

Each case runs in a fresh process so its peak RSS is its own; Ctrl-C stops the case running and
prints the table of those finished. Cases:

- ``reference``: the reference workload of the speed issue and of Vidur's peer script
  (``../shared/peers/run_vidur.sh``): Llama-2-70B on 4 x A100-SXM (TP2 x PP2), continuous
  batching with prefill-first scheduling (vLLM V0), 128 sequences and 4,096 batched tokens at
  most, 16-token KV blocks, no prefix caching, Poisson arrivals at 1 request/s, 1,024 prompt and
  256 output tokens. ``N reference`` runs N requests; ``T s reference`` runs T simulated seconds
  (memory at 10k and 100k simulated seconds should match); ``N reference via infersim run`` is ``infersim
  run`` writing every request row, start-up included; ``N reference on R replicas`` is R replicas
  at R requests/s behind least-outstanding-tokens routing (the router's cost per request).
- ``chat``: Poisson arrivals at 60 % of a deployment's analytic saturation throughput, lognormal
  512-token prompts and 128-token answers, per architecture.
- ``agents``: N agents each run one 50-step task (1k-token system prompt, ~250 tokens added per
  step, ~100-token answers, ~1 s tools) on enough replicas to hold their KV, least outstanding
  tokens routing, prefix caching on; ``N agents routed by predicted latency`` the same with
  ``least-predicted-latency`` routing (the router's closed-form prediction per call).
- ``plan candidate``: ``N coding agents on the plan's answer`` is one candidate of ``infersim plan
  scenarios/plan-coding-agents.yaml`` run to its end, the fleet of its answer (:data:`PLAN_ANSWER`:
  4 x H100 + 8 x B300 + 1 x B200 serving gpt-oss-120b, MoE, three step-time models, 13 replicas)
  with N agents on the coding-agent workload, 20 minutes and the drain: the run the 10-minute
  question's search repeats ~65 times; ``... recording only tasks`` records only its tasks, as the plan's
  runs do (:func:`~simulator.runner.simulate_tasks`; calls counted as made, steps not recorded),
  so its CPU per call is what the plan's CPU follows.

The header says which engine runs: ``compiled (mypyc)`` after ``make`` (:mod:`simulator.compiled`),
or ``pure Python`` and why; ``INFERSIM_PURE_PYTHON=1`` measures the sources.

``--vs-vidur`` also runs the reference workload through Vidur 0.0.26 (its script installs it on
first use) at 1k and 10k requests and prints CPU per request side by side (start-up included:
both run as commands), and the ratio per request beyond start-up (the 10k run minus the 1k run).

    make bench BENCH="--full"                 # from the repository root, with any of these flags
    python benchmarks/run.py                  # the quick set (about 2 minutes on 2 cores)
    python benchmarks/run.py --full           # every case (1M requests, 10k agents, memory growth)
    python benchmarks/run.py --vs-vidur       # side by side with Vidur on the reference workload
    python benchmarks/run.py --cases "10000 reference,200 agents"
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from simulator import compiled
from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.layouts import deploy
from simulator.api import load_scenario
from simulator.cli import one_blas_thread
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.engine.build import build
from simulator.plan.resolve import resolve
from simulator.results.metrics import summarize
from simulator.studies.planning import fleet_at
from simulator.tables import format_table

ARCHITECTURES = {
    "nvidia-h100-sxm": "llama-3.1-8b",
    "cerebras-cs3": "llama-3.1-8b",
    "groq-lpu": "llama-3.1-8b",
    "sambanova-sn40l": "llama-3.1-8b",
}
AGENT_HARDWARE = "nvidia-h100-sxm"
PROMPT_MEDIAN, ANSWER_MEDIAN = 512, 128
LOAD_FRACTION = 0.6
QUICK = [
    "1000 reference",
    "10000 reference",
    "10000 reference via infersim run",
    "200 agents",
    "200 agents routed by predicted latency",
    "200 coding agents on the plan's answer",
    "200 coding agents on the plan's answer recording only tasks",
]
FULL = [*QUICK, "10000 reference on 64 replicas", "100000 reference", "1000000 reference",
        "1000000 reference via infersim run", "10000 s reference",
        "100000 s reference", "10000 agents", *(f"10000 chat on {hw}" for hw in ARCHITECTURES)]  # fmt: skip
ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "peers"
PLAN_SCENARIO = ROOT / "scenarios" / "plan-coding-agents.yaml"
#: Replicas per backend of the 10-minute question's answer (README, plan section); the others at 0.
PLAN_ANSWER = {"h100": 4, "b300": 8, "b200": 1}


def reference_scenario(
    requests: int | None = None, duration_s: float | None = None, replicas: int = 1
) -> dict[str, Any]:
    """The reference workload (module docstring) as a scenario mapping, on ``replicas`` replicas."""
    run: dict[str, Any] = {"seed": 1}
    if duration_s is not None:
        run |= {"duration": f"{duration_s:g} s", "drain": False}
    else:
        run["max_requests"] = requests
    return {
        "name": "bench-reference",
        "deployment": {"hardware": "nvidia-a100-sxm", "model": "llama-2-70b", "chips": 4, "tensor_parallel": 2,
                       "pipeline_parallel": 2},
        "scheduler": {"policy": "continuous", "priority": "prefill-first", "max_batch_size": 128,
                      "max_batched_tokens": 4096, "kv_block_tokens": 16},
        "prefix_caching": False,
        "replicas": replicas,
        "router": {"policy": "least-outstanding-tokens"},
        "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": float(replicas)}},
        "requests": {"input_tokens": {"dist": "constant", "value": 1024},
                     "output_tokens": {"dist": "constant", "value": 256}},
        "run": run,
    }  # fmt: skip


def chat_scenario(hardware: str, requests: int, catalog: Catalog) -> dict[str, Any]:
    model = ARCHITECTURES[hardware]
    deployment = deploy(catalog, DeploymentSpec(hardware=hardware, model=model))
    users = saturation_concurrency(deployment, PROMPT_MEDIAN, ANSWER_MEDIAN)
    saturated = estimate(deployment, PROMPT_MEDIAN, ANSWER_MEDIAN, users)
    rate = LOAD_FRACTION * saturated.aggregate_output_tok_s / ANSWER_MEDIAN
    return {
        "name": f"bench-{hardware}",
        "deployment": {"hardware": hardware, "model": model},
        "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
        "requests": {"input_tokens": {"dist": "lognormal", "median": PROMPT_MEDIAN, "sigma": 0.6},
                     "output_tokens": {"dist": "lognormal", "median": ANSWER_MEDIAN, "sigma": 0.6}},
        "run": {"seed": 1, "max_requests": requests},
    }  # fmt: skip


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


def agent_scenario(agents: int, catalog: Catalog, policy: str = "least-outstanding-tokens") -> dict[str, Any]:
    model = ARCHITECTURES[AGENT_HARDWARE]
    deployment = deploy(catalog, DeploymentSpec(hardware=AGENT_HARDWARE, model=model))
    kv_tokens = deployment.kv_budget_bytes / deployment.kv_bytes_per_token
    replicas = max(1, math.ceil(1.5 * agents * AGENT_MEAN_CONTEXT / kv_tokens))
    return {
        "name": "bench-agents",
        "deployment": {"hardware": AGENT_HARDWARE, "model": model},
        "replicas": replicas,
        "router": {"policy": policy},
        "load": {"kind": "agents", "workload": "bench-agent", "agents": agents},
        "run": {"seed": 1, "max_requests": agents * AGENT_STEPS},
    }


def plan_candidate(agents: int, catalog: Catalog) -> Scenario:
    """The planning scenario's fleet at :data:`PLAN_ANSWER` with ``agents`` agents (a run reads none of ``plan``)."""
    scenario = load_scenario(PLAN_SCENARIO, {"load.agents": agents}, catalog)
    return fleet_at(scenario, tuple(PLAN_ANSWER.get(b.name, 0) for b in scenario.fleet), "mixed")


def _bench_catalog(folder: Path) -> Catalog:
    workload = {"schema_version": 1, "id": "bench-agent", "name": "bench agent", "description": "benchmark",
                "sources": {"bench": "benchmarks/run.py"}, "task": AGENT_TASK}  # fmt: skip
    (folder / "bench-agent.yaml").write_text(yaml.safe_dump(workload))
    return Catalog(workload_dir=folder)


@dataclass(frozen=True)
class Case:
    """One benchmark case, parsed from its name: ``N reference``, ``T s reference``, ``N reference
    via infersim run``, ``N reference on R replicas``, ``N agents``, ``N agents routed by predicted
    latency``, ``N chat on HARDWARE``, ``N coding agents on the plan's answer`` (`` recording only tasks``)."""

    name: str

    @property
    def size(self) -> int:
        return int(self.name.split()[0])

    def scenario(self, catalog: Catalog) -> dict[str, Any]:
        if " s reference" in self.name:
            return reference_scenario(duration_s=self.size)
        if " replicas" in self.name:
            return reference_scenario(requests=self.size, replicas=int(self.name.split()[-2]))
        if "reference" in self.name:
            return reference_scenario(requests=self.size)
        if self.name.endswith("routed by predicted latency"):
            return agent_scenario(self.size, catalog, "least-predicted-latency")
        if "agents" in self.name:
            return agent_scenario(self.size, catalog)
        return chat_scenario(self.name.rsplit(" ", 1)[1], self.size, catalog)


def measure(case: Case) -> dict[str, Any]:
    """Run one case in this process (the simulation, or ``infersim run`` as a command)."""
    if "on the plan's answer" in case.name:
        catalog = Catalog()
        scenario = plan_candidate(case.size, catalog)
        resolve(scenario, catalog)  # untimed: the plan's process has imported and resolved it all before
        return _simulation(scenario, catalog, details=not case.name.endswith("recording only tasks"))
    with tempfile.TemporaryDirectory() as folder:
        catalog = _bench_catalog(Path(folder))
        data = case.scenario(catalog)
        if case.name.endswith("via infersim run"):
            return _command(data, Path(folder))
        return _simulation(Scenario.model_validate(data), catalog)


def _simulation(scenario: Scenario, catalog: Catalog, details: bool = True) -> dict[str, Any]:
    """One run, its summary included; ``details`` False: recording only its tasks (the calls made)."""
    wall, cpu = time.perf_counter(), time.process_time()
    simulation = build(resolve(scenario, catalog), details=details)
    end_s = simulation.run()
    records = simulation.records(end_s)
    summary = summarize(records, scenario.slo) if details else None
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "calls": summary.requests_completed if summary else simulation.factory.count, "cpu_s": cpu, "wall_s": wall,
        "events": next(simulation.env._eid),  # SimPy's running event id: events scheduled so far
        "steps": sum(r.iterations for r in summary.replicas) if summary else math.nan, "simulated_s": end_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "replicas": sum(backend.replicas for backend in scenario.fleet),
    }  # fmt: skip


def _command(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``infersim run`` writing every request row, start-up included (CPU and RSS of the command)."""
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    wall = time.perf_counter()
    infersim = Path(sys.executable).with_name("infersim")
    subprocess.run([str(infersim), "run", str(path), "-o", str(folder / "out")], check=True, capture_output=True)
    wall = time.perf_counter() - wall
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(folder / "out" / "requests.csv", "rb") as rows:
        calls = sum(1 for _ in rows) - 1
    return {"calls": calls, "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall, "events": math.nan,
            "steps": math.nan, "simulated_s": math.nan, "peak_rss_mb": usage.ru_maxrss / 1024,
            "replicas": data.get("replicas", 1)}  # fmt: skip


def compile_package() -> None:
    """Start-up as an installed package has it: pip compiles bytecode at install time, while an
    editable install under PYTHONDONTWRITEBYTECODE would compile every module at every start."""
    package = Path(__file__).resolve().parents[1] / "simulator"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)


def _child(case: Case, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(measure(case))


def run_case(case: Case) -> dict[str, Any]:
    """Measure ``case`` in a fresh process; Ctrl-C stops that process too."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child, args=(case, queue))
    child.start()
    try:
        while child.is_alive() or not queue.empty():
            try:
                return queue.get(timeout=0.5)  # type: ignore[no-any-return]
            except Exception:  # queue.Empty: still running
                continue
        raise RuntimeError(f"{case.name}: the benchmark process exited with code {child.exitcode}")
    finally:
        if child.is_alive():
            child.terminate()
        child.join()


def row(case: str, r: dict[str, Any]) -> list[str]:
    calls = r["calls"]
    return [case, f"{r['replicas']}", f"{calls:,}", f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}",
            f"{calls / r['cpu_s']:,.0f}", f"{1e6 * r['cpu_s'] / calls:,.0f}",
            "" if math.isnan(r["events"]) else f"{r['events'] / calls:.1f}",
            "" if math.isnan(r["steps"]) else f"{r['steps']:,}",
            "" if math.isnan(r["simulated_s"]) else f"{r['simulated_s']:,.0f}", f"{r['peak_rss_mb']:.0f}"]  # fmt: skip


HEADERS = ["case", "replicas", "calls", "CPU s", "wall s", "calls/CPU s", "CPU us/call", "events/call", "steps",
           "sim s", "peak MB"]  # fmt: skip


def vidur(requests: int, environ: dict[str, str]) -> dict[str, float]:
    """Vidur 0.0.26 on the reference workload (its peer script), CPU seconds of the whole command.

    It runs in ``environ``, the environment the benchmark was started with (not the one its own
    cases run with). Anything missing or malformed in its output is a RuntimeError saying what."""
    script = PEERS / "run_vidur.sh"
    if not script.is_file():
        raise RuntimeError(f"needs the peer script {script} (the shared folder beside the repository)")
    root = Path(environ.get("PEERS_ROOT", "/tmp/peers"))
    env = environ | {"VIDUR_NS": str(requests), "PEERS_ROOT": str(root)}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{script} exited with status {done.returncode}: {last}")
    try:
        metrics = dict(re.findall(r"(\w+)=(\S+)", done.stdout.strip().splitlines()[-1]))
        timing = next((root / "vidur-work" / "out").glob(f"*_n{requests}")) / "time.txt"
        text = timing.read_text()
        found = [re.search(rf"{k} time \(seconds\): ([\d.]+)", text) for k in ("User", "System")]
        if None in found:
            raise RuntimeError(f"{timing}: no user and system time in it")
        cpu = sum(float(match.group(1)) for match in found if match is not None)
        return {"cpu_s": cpu, "wall_s": float(metrics["wall_s"]), "peak_rss_mb": float(metrics["peak_rss_mb"])}
    except (IndexError, StopIteration, OSError, KeyError, ValueError) as exc:
        raise RuntimeError(f"{script}: its output under {root} is not what this script reads ({exc!r})") from exc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="every case (tens of minutes), not the quick set")
    parser.add_argument("--cases", help="comma-separated case names (see the module docstring)")
    parser.add_argument("--vs-vidur", action="store_true", help="the reference workload through Vidur too")
    args = parser.parse_args()
    # Ctrl-C or a termination stops the running case and prints the table so far (a background
    # job may have inherited SIGINT ignored, so both are set here).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    environ = dict(os.environ)  # Vidur runs in the environment as given
    # Cases run as the command line does, with one OpenBLAS thread (whose idle threads would spin on
    # their CPU time): each case is a fresh process, which reads the setting when it loads numpy.
    one_blas_thread()
    names = args.cases.split(",") if args.cases else FULL if args.full else QUICK
    if args.vs_vidur:
        names = [n for n in names if n not in ("1000 reference via infersim run", "10000 reference via infersim run")]
        names += ["1000 reference via infersim run", "10000 reference via infersim run"]
    print(f"infersim benchmarks: {len(names)} cases, each in its own process (Ctrl-C stops)", flush=True)
    print(f"engine: {compiled.status()}", flush=True)
    if any(name.endswith("via infersim run") for name in names):
        compile_package()
    rows: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            print(f"  {name} ...", end="", flush=True)
            try:
                rows[name] = run_case(Case(name.strip()))
            except RuntimeError as exc:  # the case's process died (killed, out of memory): go on
                print(f" failed: {exc}", flush=True)
                continue
            print(f" {rows[name]['cpu_s']:.1f} CPU s, {rows[name]['peak_rss_mb']:.0f} MB", flush=True)
        if args.vs_vidur:
            for n in (1000, 10000):
                print(f"  {n} reference via Vidur 0.0.26 ...", end="", flush=True)
                try:
                    peer = vidur(n, environ)
                except RuntimeError as exc:  # no peer script, or it failed: the table still prints
                    print(f" failed: {exc}", flush=True)
                    break
                rows[f"{n} reference via Vidur"] = peer | {"calls": n, "events": math.nan, "steps": math.nan,
                                                        "simulated_s": math.nan, "replicas": 1}  # fmt: skip
                print(f" {peer['cpu_s']:.1f} CPU s", flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted: the cases finished so far", file=sys.stderr)
    print(format_table(HEADERS, [row(name, r) for name, r in rows.items()]))
    for n in (1000, 10000):
        ours, theirs = rows.get(f"{n} reference via infersim run"), rows.get(f"{n} reference via Vidur")
        if ours and theirs:
            print(f"{n:,} requests, start-up included: Vidur takes {theirs['cpu_s'] / ours['cpu_s']:.1f}x "
                  f"the CPU of infersim")  # fmt: skip
    per_request_us = {}  # CPU per request beyond start-up: the 10,000-request run minus the 1,000-request one
    for tool in ("infersim run", "Vidur"):
        small, big = rows.get(f"1000 reference via {tool}"), rows.get(f"10000 reference via {tool}")
        if small and big:
            per_request_us[tool] = (big["cpu_s"] - small["cpu_s"]) / 9000 * 1e6
    if len(per_request_us) == 2:
        ours_us, theirs_us = per_request_us["infersim run"], per_request_us["Vidur"]
        print(f"per request beyond start-up (10,000 requests minus 1,000): infersim {ours_us:,.0f} us, "
              f"Vidur {theirs_us:,.0f} us: Vidur takes {theirs_us / ours_us:.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
