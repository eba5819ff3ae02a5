"""The requests waiting at one replica for admission, in the order a policy admits them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from simulator.engine.request import Request


class WaitingQueue:
    """Requests waiting for admission: highest priority first, FCFS within a priority.

    The deque operations the policies use: ``append`` (arrival), ``appendleft`` (a preempted
    request returns to the front of its priority), ``popleft`` and ``[0]`` (the next to admit).
    """

    def __init__(self) -> None:
        self._levels: dict[int, deque[Request]] = {}
        self._order: list[int] = []  # priorities present, highest first
        self._size = 0
        self.tokens = 0.0  # prompt and output tokens the waiting requests still need

    def _level(self, priority: int) -> deque[Request]:
        if priority not in self._levels:
            self._levels[priority] = deque()
            self._order = sorted(self._levels, reverse=True)
        return self._levels[priority]

    def append(self, request: Request) -> None:
        self._level(request.priority).append(request)
        self._size += 1
        self.tokens += _tokens_left(request)

    def appendleft(self, request: Request) -> None:
        self._level(request.priority).appendleft(request)
        self._size += 1
        self.tokens += _tokens_left(request)

    def _head_level(self) -> deque[Request]:
        return next(self._levels[p] for p in self._order if self._levels[p])

    def popleft(self) -> Request:
        self._size -= 1
        request = self._head_level().popleft()
        self.tokens -= _tokens_left(request)
        return request

    def __getitem__(self, index: int) -> Request:
        assert index == 0, "only the head of the queue is visible"
        return self._head_level()[0]

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Request]:
        """Every waiting request, in admission order."""
        for priority in self._order:
            yield from self._levels[priority]


def _tokens_left(request: Request) -> float:
    return float(request.input_tokens + request.output_tokens - request.generated)
