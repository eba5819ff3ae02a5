"""Disaggregated prefill and decode: a prefill backend's replicas hand each prompt's KV to a
decode backend's replica over a KV link (physics in :mod:`simulator.analytic.kv_transfer`).

The router sends a request to a prefill replica (its class's rules and replica policy, as for
any backend). There it runs as a prompt with no output: its iterations are the prefill pool's
own batches (chunked, batched, preempted like any prompt). When its prefill ends, the KV
leaves over the sending replica's links (first come first served per replica), whole or
layer-streamed, and the request is given to the decode replica with the most free KV blocks
after its queue and the transfers already heading to it (KV-aware), ties to the earlier
replica. It arrives there ``latency + per_transfer`` after its last byte left, with
``prompt - 1`` tokens of KV in place and one to compute (``handoff: kv``) or its whole prompt
to prefill again (``handoff: prompt``), and decodes as any request does; its first token is
the decode pool's first iteration over it. So

    TTFT = (prefill queue + prefill) + transfer + (decode queue + first decode iteration),

each part recorded per request (:class:`~simulator.records.store.KVTransferRecords`).
"""

from __future__ import annotations

import math
from array import array

import numpy as np
import simpy

from simulator.analytic.kv_transfer import Handoff, arrival_s, handoff_kind, transfer_bytes, wire_end_s
from simulator.engine.fleet import Backend
from simulator.engine.replica import Replica
from simulator.engine.request import Request
from simulator.records.store import KV_TRANSFER_COLUMNS, KVTransferRecords, LevelMonitor


class KVHandoff:
    """The link from one prefill backend to its decode backend, and the handoffs across it."""

    def __init__(self, env: simpy.Environment, prefill: Backend, decode: Backend) -> None:
        link = prefill.plan.kv_link
        assert link is not None, "resolve pairs a prefill backend with its link"
        self.env, self.prefill, self.decode, self.link = env, prefill, decode, link
        self.kind: Handoff = handoff_kind(link, decode.deployment.hardware.family)
        self.kv_bytes_per_token = decode.deployment.kv_bytes_per_token
        self.layers = decode.deployment.model.num_layers
        self.link_free_s = {r.index: 0.0 for r in prefill.replicas}
        self.heading_blocks = {r.index: 0.0 for r in decode.replicas}  # KV on its way to each decode replica
        self.output_tokens: dict[int, int] = {}  # of requests prefilling
        self.routed_s: dict[int, float] = {}
        self.rows = array("d")  # one KV_TRANSFER_COLUMNS row per handoff delivered
        self.in_prefill, self.in_transfer = LevelMonitor(), LevelMonitor()
        self._prefilling, self._crossing = 0, 0

    def admit(self, request: Request) -> None:
        """A request routed to a prefill replica: it runs there as a prompt with no output."""
        self.output_tokens[request.id] = request.output_tokens
        self.routed_s[request.id] = self.env.now
        request.output_tokens = 0
        self._prefilling += 1
        self.in_prefill.record(self.env.now, self._prefilling)

    def prefilled(self, request: Request) -> None:
        """Its prefill ended (a prefill replica's completion): send the KV to a decode replica."""
        now = self.env.now
        self._prefilling -= 1
        self.in_prefill.record(now, self._prefilling)
        request.output_tokens = self.output_tokens.pop(request.id)
        request.generated = 0
        request.first_token_s = math.nan  # the decode pool emits the first token
        nbytes = transfer_bytes(request.input_tokens, self.kv_bytes_per_token, self.kind)
        sender = request.replica
        wire_end = wire_end_s(self.link, nbytes, self.layers, request.admitted_s, now, self.link_free_s[sender])
        self.link_free_s[sender] = wire_end
        arrive = arrival_s(self.link, wire_end)
        target = max(self.decode.replicas, key=lambda r: (r.kv_headroom - self.heading_blocks[r.index], -r.index))
        blocks = target.blocks_for(request.input_tokens)
        self.heading_blocks[target.index] += blocks
        self._crossing += 1
        self.in_transfer.record(now, self._crossing)
        row = (float(request.id), self.routed_s.pop(request.id), now, wire_end, arrive, nbytes, float(target.index))
        self.env.timeout(arrive - now).callbacks.append(lambda _: self._deliver(request, target, blocks, row))

    def _deliver(self, request: Request, target: Replica, blocks: float, row: tuple[float, ...]) -> None:
        """The KV (or prompt) is at the decode replica: it joins that replica's queue."""
        self.heading_blocks[target.index] -= blocks
        self._crossing -= 1
        self.in_transfer.record(self.env.now, self._crossing)
        self.rows.extend(row)
        if self.kind == "kv":
            request.swapped = (request.input_tokens - 1.0, 1.0)  # (KV in place, prompt tokens to compute)
        # Replica.submit releases a network reservation when one_way_s > 0; this request made none here.
        one_way_s, request.one_way_s = request.one_way_s, 0.0
        target.submit(request)
        request.one_way_s = one_way_s

    def freeze(self) -> KVTransferRecords:
        table = np.frombuffer(self.rows, dtype=np.float64).reshape(-1, len(KV_TRANSFER_COLUMNS)).copy()
        return KVTransferRecords(
            prefill_backend=self.prefill.name,
            decode_backend=self.decode.name,
            kind=self.kind,
            columns={name: table[:, i] for i, name in enumerate(KV_TRANSFER_COLUMNS)},
            in_prefill=self.in_prefill,
            in_transfer=self.in_transfer,
            prefilling=self._prefilling,
            crossing=self._crossing,
        )


def couple(env: simpy.Environment, backends: list[Backend]) -> list[KVHandoff]:
    """A handoff for each prefill backend paired with a decode backend; its replicas report to it."""
    handoffs = []
    for backend in backends:
        if backend.plan.decode_backend is None:
            continue
        handoff = KVHandoff(env, backend, backends[backend.plan.decode_backend])
        for replica in backend.replicas:
            replica.on_complete = handoff.prefilled
        handoffs.append(handoff)
    return handoffs
