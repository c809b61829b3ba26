"""bench/sim.py: real replication cores over a simulated network, at small sizes.

Timings are not asserted; what is: every post reaches every host, through
kills, a partition and lost lines (the digest exchange repairs what the
flood lost), the graphs are what their names say, and a forged post goes
nowhere.
"""

from __future__ import annotations

import os
import random
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)

import sim  # noqa: E402
import sim_net  # noqa: E402

BASE = ["--hosts", "40", "--degree", "4", "--post-rate", "1/min", "--rest", "40",
        "--sim-seconds", "60", "--kill", "0", "--tail", "200", "--resync", "300"]


def run(*extra: str) -> dict:
    return sim.run(sim.parse(BASE + list(extra)))


def test_every_post_reaches_every_host_on_a_random_regular_graph():
    r = run()
    assert r["posts"] >= 20
    assert r["missing"] == 0
    assert r["records"] == r["posts"] + 1  # the topic's document and every post
    assert 0 < r["spread_p99"] < 2.0


def test_killed_hosts_heal_from_their_neighbours_when_they_come_back():
    r = run("--kill", "0.1", "--down", "20")
    assert r["killed"] == 4
    assert r["unhealed"] == 0 and r["missing"] == 0
    assert r["heal_max"] < 5.0  # the digest on reconnect, not the periodic resync


def test_a_partition_heals_once_the_halves_meet_again():
    r = run("--partition", "30", "--post-rate", "0")
    assert r["missing"] == 0


def test_lost_lines_are_repaired_by_the_periodic_digest():
    r = run("--loss", "0.2", "--resync", "30", "--tail", "300")
    assert r["missing"] == 0
    lossless = run("--loss", "0.2", "--resync", "100000", "--tail", "20")
    assert lossless["missing"] > 0  # without the digest the flood alone loses posts


@pytest.mark.parametrize("name", sorted(sim_net.TOPOLOGIES))
def test_the_graphs_are_connected_and_simple(name):
    edges = sim_net.TOPOLOGIES[name](200, random.Random(3), 6)
    assert len(set(edges)) == len(edges) and all(a != b for a, b in edges)
    seen, todo = {0}, [0]
    nbrs: dict[int, set[int]] = {}
    for a, b in edges:
        nbrs.setdefault(a, set()).add(b)
        nbrs.setdefault(b, set()).add(a)
    while todo:
        for j in nbrs.get(todo.pop(), ()):
            if j not in seen:
                seen.add(j)
                todo.append(j)
    assert len(seen) == 200
    if name == "regular":
        assert {len(v) for v in nbrs.values()} == {6}


def test_the_clock_runs_events_in_time_order():
    c = sim_net.Clock()
    out = []
    c.at(2.0, out.append, "b")
    c.at(1.0, out.append, "a")
    c.at(5.0, out.append, "late")
    c.run(3.0)
    assert out == ["a", "b"] and c.now == 3.0


def test_a_forged_post_is_taken_by_no_one():
    w = sim.World(sim.parse(BASE + ["--hosts", "10"]))
    host = w.hosts[1]
    real = sim.make_post(w.ids[1], w.topic, [{"k": "text", "text": "hi"}], sim.BASE_MS)
    forged = real.raw.replace('"hi"', '"ho"')
    assert host.take([forged]) == []
    assert host.take([real.raw]) == [real.raw]
    assert host.take([real.raw]) == []  # held: a duplicate ends here


def test_owner_posts_at_a_fixed_rate_reach_every_host_of_a_tree_as_in_the_mesh_bench():
    r = run("--hosts", "32", "--topology", "tree", "--degree", "3", "--rate", "5",
            "--author", "owner", "--sim-seconds", "10", "--rest", "10", "--latency", "0.2",
            "--jitter", "0.1", "--cpu-ms", "1.5")
    assert 30 <= r["posts"] <= 80 and r["missing"] == 0
    # a tree carries each post once a link: about the post rate, one way, a minute
    assert r["load_lines"] >= 5 * 60 / 2
    assert r["delivery_p50"] <= r["delivery_p99"] < 0.1
