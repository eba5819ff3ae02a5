"""The SimPy engine: the only package that imports simpy.

Time is float seconds everywhere. Time advances only through ``env.timeout`` of durations
computed by the pure step-time model; processes never compute physics inline. At most one
event per scheduler iteration, never one per token: a batch that does not change (pure
decoding, nobody admissible) jumps to its next completion in one event.
"""

from collections.abc import Generator
from typing import Any

import simpy

#: A SimPy process body.
ProcessGenerator = Generator[simpy.Event, Any, None]
