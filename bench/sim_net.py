"""The simulated network of ``bench/sim.py``: topologies and a heap of timed events.

Kept apart from the hosts so that each part reads on its own: this module
knows nothing of the board, only of graphs, latencies and time.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable


def line(n: int, rng: random.Random, degree: int = 2) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(n - 1)]


def tree(n: int, rng: random.Random, degree: int = 3) -> list[tuple[int, int]]:
    """Each host dials its parent; ``degree`` children a host."""
    return [((i - 1) // degree, i) for i in range(1, n)]


def regular(n: int, rng: random.Random, degree: int = 6) -> list[tuple[int, int]]:
    """A random ``degree``-regular simple graph (pairing with restarts, then repairs)."""
    if n * degree % 2 or degree >= n:
        raise SystemExit("a regular graph needs n * degree even and degree < n")
    for _attempt in range(100):
        stubs = [i for i in range(n) for _ in range(degree)]
        rng.shuffle(stubs)
        edges: set[tuple[int, int]] = set()
        left: list[int] = []
        for a, b in zip(stubs[::2], stubs[1::2], strict=True):
            e = (min(a, b), max(a, b))
            if a == b or e in edges:
                left += [a, b]
            else:
                edges.add(e)
        # repair: swap a bad pair's ends with a random good edge's
        for _ in range(len(left) * 20):
            if not left:
                break
            a, b = left[0], left[1]
            c, d = rng.choice(sorted(edges))
            e1, e2 = (min(a, c), max(a, c)), (min(b, d), max(b, d))
            if a != c and b != d and e1 not in edges and e2 not in edges and e1 != e2:
                edges.discard((c, d))
                edges.update((e1, e2))
                del left[:2]
        if not left:
            return sorted(edges)
    raise SystemExit("could not build a regular graph; try another --seed")


def scale_free(n: int, rng: random.Random, degree: int = 3) -> list[tuple[int, int]]:
    """Preferential attachment: each new host links to ``degree // 2`` (at least 1)
    hosts chosen in proportion to their degree."""
    m = max(1, degree // 2)
    edges: list[tuple[int, int]] = [(i, j) for i in range(m + 1) for j in range(i + 1, m + 1)]
    ends = [v for e in edges for v in e]
    for v in range(m + 1, n):
        chosen: set[int] = set()
        while len(chosen) < m:
            chosen.add(rng.choice(ends))
        for u in chosen:
            edges.append((u, v))
            ends += [u, v]
    return edges


TOPOLOGIES: dict[str, Callable[[int, random.Random, int], list[tuple[int, int]]]] = {
    "line": line, "tree": tree, "regular": regular, "scale-free": scale_free}


class Clock:
    """Simulated time: a heap of ``(t, seq, fn, args)``; ``run`` pops them in order."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple] = []
        self._seq = 0
        self.events = 0

    def at(self, t: float, fn: Callable, *args: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    def after(self, dt: float, fn: Callable, *args: object) -> None:
        self.at(self.now + dt, fn, *args)

    def run(self, until: float) -> None:
        heap = self._heap
        pop = heapq.heappop
        n = 0
        while heap and heap[0][0] <= until:
            t, _s, fn, args = pop(heap)
            self.now = t
            fn(*args)
            n += 1
        self.events += n
        self.now = max(self.now, until)
