"""The running set of one replica: a :class:`~simulator.engine.batching.protocol.Slot` per batch
slot, and which of them prefill and which decode."""

from __future__ import annotations

from simulator.engine.batching.protocol import Slot
from simulator.engine.request import Request


class Slots:
    """The running set of one replica, one :class:`Slot` per batch slot (made as the slots are
    first used), and the slots that prefill and that decode, each list in admission order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.table: list[Slot] = []  # by slot number
        self.prefilling: list[int] = []  # slots with prompt tokens left
        self.decoding: list[int] = []  # slots whose prompt is in KV
        self._free = list(range(capacity - 1, -1, -1))
        self._admissions = 0
        self.tokens_left = 0.0  # prompt and output tokens the running sequences still need (a running sum)

    @property
    def count(self) -> int:
        return self.capacity - len(self._free)

    def admit(self, request: Request, cached_tokens: float = 0.0, cached_blocks: int = 0) -> int:
        """Put a request in a free slot; ``cached_tokens`` of its prompt are already in KV."""
        slot = self._free.pop()
        while len(self.table) <= slot:
            self.table.append(Slot())
        state = self.table[slot]
        state.request = request
        if request.swapped is None:
            state.context = float(cached_tokens)
            state.prompt_left = float(request.input_tokens + request.generated - cached_tokens)
        else:
            state.context, state.prompt_left = request.swapped
            request.swapped = None
        state.out_left = float(request.output_tokens - request.generated)
        self.tokens_left += state.prompt_left + state.out_left
        state.blocks = float(cached_blocks)
        self._admissions += 1
        state.order = self._admissions
        (self.prefilling if state.prompt_left > 0 else self.decoding).append(slot)  # the latest admitted
        return slot

    def prefilled(self, slot: int) -> None:
        """A slot's prompt is all in KV: it decodes from now on (kept in admission order: ``insort``
        by admission, its loop written out, compiled, not a Python call of the key for every probe)."""
        self.prefilling.remove(slot)
        order, table, decoding = self.table[slot].order, self.table, self.decoding
        low, high = 0, len(decoding)
        while low < high:
            mid = (low + high) // 2
            if order < table[decoding[mid]].order:
                high = mid
            else:
                low = mid + 1
        decoding.insert(low, slot)

    def latest(self) -> int | None:
        """The slot admitted last, None when none runs."""
        last = [lane[-1] for lane in (self.prefilling, self.decoding) if lane]
        return max(last, key=self._order) if last else None

    def _order(self, slot: int) -> int:
        return self.table[slot].order

    def release(self, slot: int) -> Request:
        state = self.table[slot]
        request = state.request
        assert request is not None
        state.request = None
        self.tokens_left -= state.prompt_left + state.out_left
        state.blocks = 0.0
        (self.prefilling if state.prompt_left > 0 else self.decoding).remove(slot)
        self._free.append(slot)
        return request
