"""ULID ids (strictly increasing per sender) and thread ids."""

from __future__ import annotations

import re
import threading

import pytest

from awp.wire.ids import (
    ALPHABET,
    IdGenerator,
    decode_ulid,
    encode_ulid,
    is_ulid,
    new_blob_ref,
    new_thread_id,
    ulid_time_ms,
)

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
T0 = 1_790_000_000_123  # a fixed 2026 millisecond


def fixed(ms: int):
    return lambda: ms


class SteppingClock:
    def __init__(self, values):
        self.values = list(values)

    def __call__(self) -> int:
        return self.values.pop(0)


def test_alphabet():
    assert ALPHABET == CROCKFORD
    assert len(set(ALPHABET)) == 32
    for c in "ILOU":
        assert c not in ALPHABET


def test_ids_are_26_crockford_chars():
    gen = IdGenerator()
    for _ in range(200):
        i = gen.next()
        assert len(i) == 26
        assert ULID_RE.match(i), i
        assert set(i) <= set(CROCKFORD)
        assert is_ulid(i)


def test_real_clock_ids_carry_current_time():
    import time

    before = time.time_ns() // 1_000_000
    i = IdGenerator().next()
    after = time.time_ns() // 1_000_000
    assert before <= ulid_time_ms(i) <= after


def test_strictly_increasing_within_same_millisecond():
    gen = IdGenerator(clock=fixed(T0))
    ids = [gen.next() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    # compared as strings, every id is strictly above the previous one
    assert all(a < b for a, b in zip(ids, ids[1:], strict=False))
    assert all(ulid_time_ms(i) == T0 for i in ids)


def test_clock_step_back_yields_previous_plus_one():
    clock = SteppingClock([T0, T0 - 5000, T0 - 1, 1])
    gen = IdGenerator(clock=clock)
    first = gen.next()
    second = gen.next()
    third = gen.next()
    fourth = gen.next()
    assert first < second < third < fourth
    assert decode_ulid(second) == decode_ulid(first) + 1
    assert decode_ulid(third) == decode_ulid(first) + 2
    assert decode_ulid(fourth) == decode_ulid(first) + 3
    assert ulid_time_ms(fourth) == T0


def test_clock_moving_forward_uses_new_time():
    clock = SteppingClock([T0, T0 + 10])
    gen = IdGenerator(clock=clock)
    a = gen.next()
    b = gen.next()
    assert a < b
    assert ulid_time_ms(a) == T0
    assert ulid_time_ms(b) == T0 + 10


def test_restart_seeded_with_last_id_and_earlier_clock_continues_above():
    gen1 = IdGenerator(clock=fixed(T0))
    issued = [gen1.next() for _ in range(5)]
    last = issued[-1]
    assert gen1.last == last

    gen2 = IdGenerator(last=last, clock=fixed(T0 - 60_000))
    nxt = gen2.next()
    assert nxt > last
    assert decode_ulid(nxt) == decode_ulid(last) + 1
    more = [gen2.next() for _ in range(100)]
    assert more == sorted(more)
    assert more[0] > nxt


def test_seed_never_lowers():
    gen = IdGenerator(clock=fixed(T0 - 10))
    high = encode_ulid((T0 << 80) | 12345)
    low = encode_ulid(((T0 - 100_000) << 80) | 1)
    gen.seed(high)
    gen.seed(low)
    gen.seed(None)
    assert gen.last == high
    assert gen.next() == encode_ulid(((T0 << 80) | 12345) + 1)


def test_fresh_generator_has_no_last():
    assert IdGenerator().last is None


def test_encode_decode_round_trip():
    values = [0, 1, 31, 32, (1 << 80) - 1, 1 << 80, (T0 << 80) | 0xABCDEF, (1 << 128) - 1]
    for v in values:
        s = encode_ulid(v)
        assert len(s) == 26
        assert decode_ulid(s) == v
    assert encode_ulid(0) == "0" * 26
    assert encode_ulid(1) == "0" * 25 + "1"
    assert encode_ulid((1 << 128) - 1) == "7" + "Z" * 25


def test_decode_round_trip_of_generated_ids():
    gen = IdGenerator()
    for _ in range(100):
        i = gen.next()
        assert encode_ulid(decode_ulid(i)) == i


def test_decode_is_case_insensitive():
    s = encode_ulid((T0 << 80) | 987654321)
    assert decode_ulid(s.lower()) == decode_ulid(s)
    assert not is_ulid(s.lower())  # what we accept as ours is uppercase only


@pytest.mark.parametrize(
    "bad",
    ["", "0" * 25, "0" * 27, "0" * 25 + "U", "0" * 25 + "I", "0" * 25 + "!", "8" + "0" * 25],
)
def test_decode_rejects(bad):
    with pytest.raises(ValueError):
        decode_ulid(bad)
    assert not is_ulid(bad)


def test_is_ulid_rejects_non_strings():
    assert not is_ulid(None)
    assert not is_ulid(12345)
    assert not is_ulid(b"0" * 26)


def test_ulid_time_ms():
    assert ulid_time_ms(encode_ulid((T0 << 80) | ((1 << 80) - 1))) == T0
    assert ulid_time_ms(encode_ulid(T0 << 80)) == T0
    assert ulid_time_ms("01ARYZ6S41TSV4RRFFQ69G5FAV") == 1469918176385  # ULID spec example
    gen = IdGenerator(clock=fixed(T0))
    assert ulid_time_ms(gen.next()) == T0


def test_time_ordering_matches_string_ordering():
    a = IdGenerator(clock=fixed(T0)).next()
    b = IdGenerator(clock=fixed(T0 + 1)).next()
    assert a < b


THREAD_RE = re.compile(r"^thr_[abcdefghijkmnpqrstuvwxyz23456789]{8}$")


def test_thread_ids():
    ids = {new_thread_id() for _ in range(500)}
    for t in ids:
        assert THREAD_RE.match(t), t
    assert len(ids) > 490  # random, practically never colliding


def test_blob_ref():
    gen = IdGenerator(clock=fixed(T0))
    ref = new_blob_ref(gen)
    assert ref.startswith("b_")
    assert is_ulid(ref[2:])
    assert ulid_time_ms(ref[2:]) == T0


def test_generator_is_thread_safe():
    gen = IdGenerator(clock=fixed(T0))
    results: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        barrier.wait()
        out = results[slot]
        for _ in range(5_000):
            out.append(gen.next())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [i for r in results for i in r]
    assert len(all_ids) == 20_000
    assert len(set(all_ids)) == 20_000
    # each thread sees its own ids strictly increasing too
    for r in results:
        assert all(a < b for a, b in zip(r, r[1:], strict=False))


def test_encode_ulid_spells_every_5_bits_in_crockford():
    """The C-encoder spelling against the definition, 5 bits a character."""
    import random

    rnd = random.Random(5)
    values = [0, 1, 31, 32, (1 << 128) - 1, 1 << 127] + [rnd.getrandbits(128) for _ in range(500)]
    for v in values:
        want = "".join(CROCKFORD[(v >> (5 * (25 - i))) & 31] for i in range(26))
        assert encode_ulid(v) == want
        assert decode_ulid(want) == v
    for bad in (-1, 1 << 128):
        with pytest.raises(ValueError):
            encode_ulid(bad)


def test_ids_draw_fresh_random_bits_across_the_pool():
    gen = IdGenerator(clock=fixed(T0))
    ids = [gen.next() for _ in range(1000)]  # several refills of the pool
    assert ids == sorted(ids) and len(set(ids)) == 1000
    # With a fixed clock each id is the one before plus one, except where a
    # fresh draw of random bits happened to land higher: some must have.
    steps = [decode_ulid(b) - decode_ulid(a) for a, b in zip(ids, ids[1:], strict=False)]
    assert any(s > 1 for s in steps)


def test_a_run_of_ids_counts_up_from_one_fresh_draw():
    gen = IdGenerator(clock=fixed(T0))
    first = gen.next()
    run = gen.next_run(5)
    assert len(run) == 5 and first < run[0]
    values = [decode_ulid(i) for i in run]
    assert values == list(range(values[0], values[0] + 5))
    assert gen.next() > run[-1]
    assert gen.next_run(0) == [] and len(gen.next_run(1)) == 1
    later = IdGenerator(clock=fixed(T0 + 5))
    later.seed(run[-1])
    assert ulid_time_ms(later.next_run(3)[0]) == T0 + 5


def test_a_run_is_spelled_as_its_ids_one_by_one_across_a_carry():
    from awp.wire.ids import encode_run

    for first, n in [(0, 3), (12345 << 80 | 77, 64), ((1 << 40) - 5, 10),
                     ((7 << 80) | ((1 << 80) - 3), 6), ((1 << 128) - 4, 4)]:
        assert encode_run(first, n) == [encode_ulid(v) for v in range(first, first + n)]
    assert encode_run(5, 0) == []
