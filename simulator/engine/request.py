"""A model call in flight: its lengths, its timestamps, where its KV is, whom it belongs to."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import simpy

    from simulator.engine.kv.blocks import PrefixHit


class Request:
    """One model call and its timestamps (seconds). ``generated`` counts emitted tokens.

    Compiled (:mod:`simulator.compiled`), its fields hold their declared types: a token count is
    a Python ``int`` (a numpy integer raises ``TypeError``), which the engine reads directly.
    """

    __slots__ = (
        "admitted_s",
        "arrival_s",
        "block_hashes",
        "cached_tokens",
        "done",
        "failed",
        "first_token_s",
        "generated",
        "hash_ratio",
        "hit",
        "id",
        "input_tokens",
        "key_base",
        "klass",
        "one_way_s",
        "output_tokens",
        "preemptions",
        "priority",
        "published_upto",
        "replica",
        "reserved_usd",
        "second_token_s",
        "session",
        "shared",
        "swapped",
        "task",
        "user",
    )  # fmt: skip

    def __init__(
        self,
        request_id: int,
        arrival_s: float,
        input_tokens: int,
        output_tokens: int,
        user: int,
        session: Hashable | None = None,
        block_hashes: Sequence[Hashable] | None = None,
        hash_ratio: int = 1,
        key_base: int | None = None,
    ) -> None:
        self.id = request_id
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.user = user
        self.generated = 0
        self.admitted_s = math.nan
        self.first_token_s = math.nan
        self.second_token_s = math.nan  # its next token after the first (:mod:`simulator.engine.replica`)
        self.preemptions = 0
        self.replica = -1
        self.done: simpy.Event | None = None  # when somebody waits on the request
        self.swapped: tuple[float, float] | None = None  # (context, prompt_left) while swapped out
        self.session = session  # conversation id (session affinity routes on it)
        self.key_base = key_base  # block i of its session's context has the key key_base + i (None: no session)
        self.block_hashes = block_hashes  # explicit prompt block hashes (traces), first
        self.hash_ratio = hash_ratio  # our KV blocks per trace hash block
        self.cached_tokens = 0  # prompt tokens served from the prefix cache at first admission
        self.shared: Sequence[Hashable] = []  # cached blocks this request references while running
        self.task = -1  # the agent task this call belongs to
        self.klass = 0  # workload class index
        self.priority = 0  # higher is admitted first
        self.published_upto = 0  # leading blocks of this request that are shared prefix KV
        self.one_way_s = 0.0  # half the network round trip to its backend
        self.failed = False  # an API refused it (429) until the client's retries ran out
        self.reserved_usd = 0.0  # API budget reserved for it when routed
        self.hit: tuple[int, int, PrefixHit] | None = None  # (cache version, generated, prefix hit) last found

    @property
    def cacheable(self) -> bool:
        """Whether any of its blocks has a key (a session or trace hashes): else none is shared."""
        return self.key_base is not None or self.block_hashes is not None

    def block_keys(self, start: int, stop: int) -> Sequence[Hashable | None]:
        """Keys of the KV blocks ``start..stop-1``: block i covers tokens [i * bs, (i + 1) * bs) of
        this context; None where a block has no key (no session, or past a trace's hashes).

        A session's block i is the integer ``key_base + i`` (:class:`SessionKeys`: bases 2^32
        apart, so sessions never share a block); its keys come as a ``range``, which the prefix
        cache keeps as runs (:class:`~simulator.engine.kv.blocks.BlockManager`).
        """
        if self.block_hashes is None:
            base = self.key_base
            return [None] * (stop - start) if base is None else range(base + start, base + stop)
        hashes, ratio = self.block_hashes, self.hash_ratio
        return [(self.session, hashes[i // ratio], i % ratio) if i // ratio < len(hashes) else None
                for i in range(start, stop)]  # fmt: skip


class SessionKeys:
    """The base of each session's block keys in one simulation: ``2^32 x`` its first-seen order."""

    def __init__(self) -> None:
        self._bases: dict[Hashable, int] = {}

    def base(self, session: Hashable | None) -> int | None:
        if session is None:
            return None
        return self._bases.setdefault(session, len(self._bases) << 32)
