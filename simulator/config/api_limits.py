"""A hosted API as its clients meet it: a round trip and a provider front end that vary per request,
rate limits that answer 429, and the client's retries (a backend's ``api`` section).

Without this section a hosted stack's API time is its profile's constant ``round_trip +
front_end`` (:class:`~simulator.config.stack.ApiTime`, what ``infersim validate`` uses) and
nothing limits the rate. With it:

- ``round_trip`` / ``front_end``: distributions drawn per request, replacing the stack's
  constants (empty: the constant). Published figures to set them from (seconds):

  ============================  ====================================================  ==========
  what                          figure                                                source
  ============================  ====================================================  ==========
  US East <-> US West (Oregon)  87 ms mean round trip                                 cloudping (1)
  US East <-> EU (Ireland)      80.5 ms mean round trip                               cloudping (1)
  EU (Ireland) <-> US West      137 ms mean round trip                                cloudping (1)
  Groq Llama 3.3 70B TTFT       120 ms median, 280 ms p95 (lognormal sigma 0.52)      TokenMix (2)
  Cerebras Llama 3.3 70B TTFT   110 ms p50, 280 ms p95, 710 ms p99 (sigma 0.57-0.80)  KairosRoute (3)
  ============================  ====================================================  ==========

  (1) AWS inter-region averages, https://acomputerscientistlearnsaws.blogspot.com/2017/04/aws-regions.html
  (cloudping.co table); (2) https://tokenmix.ai/blog/ai-api-latency-benchmark (April 2026, 10k+
  requests, 2K-token prompts); (3) https://www.kairosroute.com/blog/provider-latency-leaderboard-2026
  (March-April 2026, gateway to first streamed token). A TTFT's spread, taken whole as the front
  end's, is an upper bound on it (part of it is the round trip's and the prefill's).
- ``limits``: requests per minute, tokens per minute (prompt + the request's output, as
  Cerebras counts ``max_completion_tokens`` up front) and concurrent requests, as the
  provider documents them for a tier. Examples: GroqCloud's free tier, llama-3.3-70b-versatile
  30 RPM and 12K TPM, openai/gpt-oss-120b 30 RPM and 8K TPM
  (https://console.groq.com/docs/rate-limits); Cerebras' free tier, gpt-oss-120b and
  llama-3.3-70b 30 RPM and 60K TPM (https://inference-docs.cerebras.ai/support/rate-limits).
  A request is accepted only if the requests and tokens accepted in the trailing 60 s, with
  it, stay within the limits (a sliding window: no minute ever holds more; providers' token
  buckets, Cerebras' stated algorithm, allow bursts up to that and never more per minute of
  steady use), and fewer than ``concurrent_requests`` are in flight; else the provider answers 429.
- ``retry``: after a 429 the client waits ``min(initial * 2^k, max) * (1 - jitter * U)``
  (``k`` = retries so far, ``U`` uniform on [0, 1)) and sends again; after ``max_retries``
  retries the request fails. The defaults are the OpenAI and Anthropic Python SDKs'
  (``DEFAULT_MAX_RETRIES = 2``, ``INITIAL_RETRY_DELAY = 0.5``, ``MAX_RETRY_DELAY = 8.0``,
  ``jitter = 1 - 0.25 * random()``: openai/openai-python src/openai/_constants.py and
  _base_client.py ``_calculate_retry_timeout``). A ``retry-after`` header is not modelled.
- ``on_limit``: ``spill``: the router reads the provider's remaining quota (the
  ``x-ratelimit-remaining-*`` headers both document) and sends a request the limits would
  refuse to another allowed backend when one can take it, only sending it into a 429 when
  none can; ``retry``: the router ignores the limits and the client meets the 429s.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Spec
from simulator.config.distributions import Distribution
from simulator.units import MAX_LATENCY_S, Seconds

PositiveInt = Annotated[int, Field(ge=1)]
#: The window of a per-minute limit (s).
MINUTE_S = 60.0


class RateLimits(Spec):
    """A provider's documented limits for one model and tier (module docstring)."""

    requests_per_minute: PositiveInt | None = Field(None, description="RPM; empty: no limit")
    tokens_per_minute: PositiveInt | None = Field(None, description="TPM, prompt + output tokens; empty: no limit")
    concurrent_requests: PositiveInt | None = Field(None, description="requests in flight at once; empty: no limit")
    source: str = Field("", description="where the provider documents them (URL, tier, date)")

    @model_validator(mode="after")
    def _some_limit(self) -> RateLimits:
        if self.requests_per_minute is None and self.tokens_per_minute is None and self.concurrent_requests is None:
            raise ValueError("give requests_per_minute, tokens_per_minute or concurrent_requests")
        return self


class RetryPolicy(Spec):
    """How a client backs off after a 429 (defaults: the OpenAI and Anthropic Python SDKs')."""

    max_retries: Annotated[int, Field(ge=0, le=100)] = Field(2, description="retries before the request fails")
    initial_backoff: Annotated[Seconds, Field(gt=0.0, le=MAX_LATENCY_S)] = Field(0.5, description="first wait")
    max_backoff: Annotated[Seconds, Field(gt=0.0, le=MAX_LATENCY_S)] = Field(8.0, description="longest wait")
    jitter: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        0.25, description="each wait is shortened by up to this share, uniformly"
    )


class ApiBehaviour(Spec):
    """A hosted API's per-request round trip and front end, rate limits and client retries."""

    round_trip: Distribution | None = Field(
        None, description="seconds per request, replacing the stack's api.round_trip (empty: that constant)"
    )
    front_end: Distribution | None = Field(
        None, description="seconds per request at the provider before a replica, replacing the stack's api.front_end"
    )
    limits: RateLimits | None = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    on_limit: Literal["spill", "retry"] = Field(
        "spill", description="spill: the router sends what the limits would refuse elsewhere; retry: meet the 429s"
    )
