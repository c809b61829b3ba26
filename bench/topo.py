"""What the mesh benches share: topologies, CPU readings, and board long-pollers.

``presence.py`` and ``board.py`` build the same networks (a line, or a tree
where every host has up to three children), read each daemon's CPU time from
``/proc``, and keep every host's client long-polling ``/v1/board/wait`` the
way an agent waiting for work does.
"""

from __future__ import annotations

import os
import threading
import time

from nodes import Node

TOPOLOGIES = ("line", "tree")
FANOUT = 3  # children per host in a tree
_TICK = os.sysconf("SC_CLK_TCK")


def edges(kind: str, n: int) -> list[tuple[int, int]]:
    """Links of a line of ``n`` hosts, or of a tree of fan-out :data:`FANOUT` rooted at 0."""
    if kind == "line":
        return [(i, i + 1) for i in range(n - 1)]
    if kind == "tree":
        return [((i - 1) // FANOUT, i) for i in range(1, n)]
    raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}")


def adjacency(n: int, links: list[tuple[int, int]]) -> dict[int, set[int]]:
    adj: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in links:
        adj[a].add(b)
        adj[b].add(a)
    return adj


def distances(adj: dict[int, set[int]], src: int) -> dict[int, int]:
    """Links from ``src`` to every host it can reach (breadth first)."""
    dist, frontier = {src: 0}, [src]
    while frontier:
        nxt = []
        for i in frontier:
            for j in adj[i]:
                if j not in dist:
                    dist[j] = dist[i] + 1
                    nxt.append(j)
        frontier = nxt
    return dist


def build(nodes: list[Node], kind: str) -> dict[int, set[int]]:
    """Connect ``nodes`` (started) as ``kind``; the adjacency."""
    links = edges(kind, len(nodes))
    for a, b in links:
        nodes[b].connect(nodes[a])
    return adjacency(len(nodes), links)


def start_all(nodes: list[Node], timeout: float = 180) -> None:
    for n in nodes:
        n.start(wait=False)
    for n in nodes:
        n.wait_ready(timeout)


def cpu_seconds(node: Node) -> float:
    """User plus system CPU time the node's daemon has used so far."""
    return sum(cpu_split(node))


def cpu_split(node: Node) -> tuple[float, float]:
    """User and system CPU time the node's daemon has used so far."""
    assert node.proc is not None
    with open(f"/proc/{node.proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def cpu_all(nodes: list[Node]) -> list[float]:
    return [cpu_seconds(n) for n in nodes]


def spent(before: list[float], after: list[float]) -> list[float]:
    return [b - a for a, b in zip(before, after, strict=True)]


def spent_split(before: list[tuple[float, float]],
                after: list[tuple[float, float]]) -> tuple[float, float]:
    """User and system CPU-s spent by all the daemons between two :func:`cpu_split` readings."""
    return (sum(b[0] - a[0] for a, b in zip(before, after, strict=True)),
            sum(b[1] - a[1] for a, b in zip(before, after, strict=True)))


def presence_lines(nodes: list[Node]) -> int:
    """Presence lines all daemons have sent so far (``status.presence.lines_sent``)."""
    return sum(n.api("GET", "/v1/status")["presence"]["lines_sent"] for n in nodes)


def board_in(nodes: list[Node]) -> tuple[int, int, int]:
    """Board lines read, records taken and gap checks that found the copy behind the
    owner's head (each asks every peer again), by all daemons so far (``status.board``)."""
    got = [n.api("GET", "/v1/status")["board"] for n in nodes]
    return (sum(b["lines_in"] for b in got), sum(b["records_in"] for b in got),
            sum(b.get("head_gaps", 0) for b in got))


def presence_signed(nodes: list[Node]) -> int:
    """Documents of their own all daemons have signed so far (``status.presence.signed``)."""
    return sum(n.api("GET", "/v1/status")["presence"].get("signed", 0) for n in nodes)


def subscribe_all(nodes: list[Node], adj: dict[int, set[int]], topic: str,
                  timeout: float = 60) -> float:
    """Every host but 0 (the owner) subscribes, nearest first; seconds it took.

    Nearest first: a host hands the topic document to a neighbour that
    subscribes after it holds it, whatever the distance to the owner.
    """
    t0 = time.monotonic()
    for i, _d in sorted(distances(adj, 0).items(), key=lambda x: x[1]):
        if i:
            got = nodes[i].api("POST", "/v1/board/subscribe", {"topic": topic,
                                                                "timeout": timeout})
            if not got["topic"]["known"]:
                raise AssertionError(f"{nodes[i].name}: no topic document after {timeout} s")
    return time.monotonic() - t0


def open_topic(owner: Node, name: str, **policy: object) -> str:
    body = {"name": name, "read": "open", "post": "open", "rate": 6000, "keep": 1_000_000,
            "keep_bytes": 1024 ** 3, **policy}
    return owner.api("POST", "/v1/board/topic", body)["topic"]["topic"]


class Waiter(threading.Thread):
    """Follows one host's board topic, noting when each post arrived.

    By default with one streaming ``/v1/board/wait`` (``stream``: the host
    sends every post that arrived since the last, as it arrives, on one
    request), as a client that follows a topic does; ``poll=True`` long-polls
    instead, one request a wake-up, as a script waiting for the next post.
    """

    def __init__(self, node: Node, topic: str, poll: bool = False) -> None:
        super().__init__(daemon=True)
        self.node, self.topic, self.poll = node, topic, poll
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        first = node.api("POST", "/v1/board/wait", {"topics": [topic], "timeout": 0})
        self.cursor = first["cursor"]
        self.error = ""
        self.answers = 0  # objects (answers or stream chunks) the host sent

    def _note(self, got: dict) -> None:
        now = time.monotonic()
        self.answers += 1
        for p in got["posts"]:
            self.seen.setdefault(p["hash"], now)
        self.cursor = got["cursor"]

    def run(self) -> None:
        client = self.node.client  # one connection, kept, as an agent's loop holds
        try:
            while not self.stop.is_set():
                body = {"topics": [self.topic], "after": self.cursor}
                if self.poll:
                    # A long poll: the host answers as soon as a post is there.
                    self._note(client.request("POST", "/v1/board/wait", {**body, "timeout": 30}))
                    continue
                with client.stream("POST", "/v1/board/wait",
                                   {**body, "timeout": 600, "stream": True}) as chunks:
                    for got in chunks:
                        self._note(got)
                        if self.stop.is_set():
                            break
        except Exception as e:  # noqa: BLE001 - reported by the bench, not raised in a thread
            if not self.stop.is_set():
                self.error = f"{type(e).__name__}: {e}"


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))] if s else float("nan")


def avg_max(v: list[float], fmt: str = ".2f") -> str:
    return f"avg {sum(v) / len(v):{fmt}}, max {max(v):{fmt}}" if v else "none"
