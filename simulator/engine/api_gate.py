"""A hosted API's gate at run time: per-request times, the provider's rate limits, the client's backoff.

One :class:`ApiGate` per backend with an ``api`` section (:mod:`simulator.config.api_limits`
states the model and its sources). The gate draws each request's round trip and front end
from its own stream, so a gate changes no other stream of the run. Its :class:`RateWindow`
keeps the requests accepted in the trailing minute (a log, oldest first: O(1) amortised per
request) and the requests in flight; a request is accepted when, with it, the minute's requests
and tokens and the requests in flight stay within the limits, and refused (429) otherwise.
"""

from __future__ import annotations

import math
from array import array
from collections import deque

import numpy as np

from simulator.config.api_limits import MINUTE_S, ApiBehaviour, RateLimits
from simulator.records.store import ApiRecords


class RateWindow:
    """Requests and tokens accepted over the trailing minute, and requests in flight, against limits."""

    def __init__(self, limits: RateLimits) -> None:
        self.rpm = limits.requests_per_minute or math.inf
        self.tpm = limits.tokens_per_minute or math.inf
        self.concurrent = limits.concurrent_requests or math.inf
        self.log: deque[tuple[float, int]] = deque()
        self.tokens = 0
        self.in_flight = 0

    def _expire(self, now: float) -> None:
        """Forget what was accepted a minute or more ago (``t <= now - 60``)."""
        log = self.log
        while log and log[0][0] <= now - MINUTE_S:
            self.tokens -= log.popleft()[1]

    def admits(self, now: float, tokens: int) -> bool:
        """Whether a request of ``tokens`` sent now keeps every limit."""
        self._expire(now)
        return (len(self.log) + 1 <= self.rpm and self.tokens + tokens <= self.tpm
                and self.in_flight + 1 <= self.concurrent)  # fmt: skip

    def accept(self, now: float, tokens: int) -> None:
        self.log.append((now, tokens))
        self.tokens += tokens
        self.in_flight += 1

    def never_admits(self, tokens: int) -> bool:
        """A request over the whole per-minute token limit: no wait can make it fit."""
        return tokens > self.tpm


class ApiGate:
    """One API backend's per-request times, limits and retries, and what it saw."""

    def __init__(self, name: str, spec: ApiBehaviour, network_one_way_s: float, rng: np.random.Generator) -> None:
        self.name, self.spec, self.rng = name, spec, rng
        self.network_one_way_s = network_one_way_s  # half the scenario's network_rtt
        self.window = RateWindow(spec.limits) if spec.limits is not None else None
        self.accepted_s, self.accepted_tokens, self.refused_s = array("d"), array("d"), array("d")
        self.accepted_ids = array("d")  # request ids, beside accepted_s
        self.retries = self.failed = self.spilled = 0

    @property
    def spills(self) -> bool:
        """Whether the router avoids this backend while its limits would refuse a request."""
        return self.window is not None and self.spec.on_limit == "spill"

    def admits(self, now: float, tokens: int) -> bool:
        return self.window is None or self.window.admits(now, tokens)

    def try_send(self, now: float, tokens: int, request_id: int) -> bool:
        """The provider's answer to a request sent now: True accepted (counted), False 429."""
        window = self.window
        if window is not None:
            if not window.admits(now, tokens):
                self.refused_s.append(now)
                return False
            window.accept(now, tokens)
        self.accepted_s.append(now)
        self.accepted_tokens.append(float(tokens))
        self.accepted_ids.append(float(request_id))
        return True

    def gives_up(self, retries_done: int, tokens: int) -> bool:
        """Whether a refused request fails now: its retries are spent, or it can never fit."""
        window = self.window
        return retries_done >= self.spec.retry.max_retries or (window is not None and window.never_admits(tokens))

    def backoff_s(self, retries_done: int) -> float:
        """The client's wait before retry ``retries_done + 1``: ``min(initial 2^k, max) (1 - jitter U)``."""
        retry = self.spec.retry
        base = min(retry.initial_backoff * 2.0**retries_done, retry.max_backoff)
        return base * (1.0 - retry.jitter * float(self.rng.random()))

    def release(self) -> None:
        """A request accepted here has finished (its concurrency slot frees)."""
        if self.window is not None:
            self.window.in_flight -= 1

    def one_way_s(self, mean_one_way_s: float) -> float:
        """This request's half round trip: the network's plus half a drawn API round trip (else the mean)."""
        dist = self.spec.round_trip
        return mean_one_way_s if dist is None else self.network_one_way_s + max(dist.draw(self.rng), 0.0) / 2.0

    def front_end_s(self, mean_s: float) -> float:
        """This request's time at the provider's front end: drawn, else the mean."""
        dist = self.spec.front_end
        return mean_s if dist is None else max(dist.draw(self.rng), 0.0)

    def freeze(self) -> ApiRecords:
        limits = self.spec.limits
        return ApiRecords(
            backend=self.name,
            accepted_s=np.frombuffer(self.accepted_s, dtype=np.float64).copy(),
            accepted_tokens=np.frombuffer(self.accepted_tokens, dtype=np.float64).copy(),
            accepted_ids=np.frombuffer(self.accepted_ids, dtype=np.float64).copy(),
            refused_s=np.frombuffer(self.refused_s, dtype=np.float64).copy(),
            retries=self.retries, failed=self.failed, spilled=self.spilled,
            requests_per_minute=limits.requests_per_minute if limits else None,
            tokens_per_minute=limits.tokens_per_minute if limits else None,
            concurrent_requests=limits.concurrent_requests if limits else None,
        )  # fmt: skip
