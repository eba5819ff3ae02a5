"""Shared fixtures: the bundled catalog and named deployments."""

from __future__ import annotations

import signal

import pytest
from hypothesis import HealthCheck, settings

from simulator.analytic import layouts
from simulator.analytic.placement import Deployment
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog

settings.register_profile(
    "ci", derandomize=True, max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


def interruptible() -> None:
    """In a child before it starts: Ctrl-C (SIGINT) does its default, as in a terminal, even when
    the suite runs as a background job (which starts its children with SIGINT ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog()


def deploy(catalog: Catalog, hardware: str, model: str, **fields: object) -> Deployment:
    spec = DeploymentSpec(hardware=hardware, model=model, **fields)  # type: ignore[arg-type]
    return layouts.deploy(catalog, spec)


@pytest.fixture(scope="session")
def h100_70b_tp4(catalog: Catalog) -> Deployment:
    return deploy(catalog, "nvidia-h100-sxm", "llama-3.1-70b", chips=4)


@pytest.fixture(scope="session")
def cs3_70b(catalog: Catalog) -> Deployment:
    return deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
