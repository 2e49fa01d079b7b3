"""The genetic operators' fast paths give what their general paths give: a source's digest read a
block at a time is the digest's rule byte by byte, and Breeder.children asking a Seen directly
(before ``made``) keeps the children, entries and draws it keeps when asking any other ``seen``."""
import numpy as np
import pytest

from ndvm._core import _core
from ndvm.cosearch import grammar as gp
from ndvm.cosearch import proposers, rounds
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import to_tree

MASK = (1 << 64) - 1
GOLDEN = 0x9e3779b97f4a7c15


def _finalize(h):
    h ^= h >> 30
    h = (h * 0xbf58476d1ce4e5b9) & MASK
    h ^= h >> 27
    h = (h * 0x94d049bb133111eb) & MASK
    return h ^ (h >> 31)


def _digest(data):
    """seen.hpp's rule, byte by byte: each 8-byte block (the last one short) read little-endian
    and folded in through splitmix64's finalizer."""
    h = _finalize((GOLDEN + len(data)) & MASK)
    k = 0
    while True:
        block = data[k:k + 8]
        h = (_finalize(h ^ int.from_bytes(block, "little")) + GOLDEN) & MASK
        k += len(block)
        if k >= len(data):
            return h


def test_a_sources_digest_is_its_blocks_rule_at_every_length():
    rng = np.random.default_rng(0)
    texts = ["", "(* a x)", "é (+ a b)", "abcdefgh", "abcdefghi", "\U00010000" * 5]
    texts += ["".join(chr(c) for c in rng.integers(32, 127, n)) for n in range(70)]
    texts += ["".join(chr(c) for c in rng.integers(160, 900, n)) for n in range(1, 30, 3)]
    for t in texts:
        assert _core.source_digest(t) == _digest(t.encode("utf-8")), t
    # a lone surrogate: its surrogates' own bytes
    assert _core.source_digest("a\ud800bcdefghij") == _digest(
        "a\ud800bcdefghij".encode("utf-8", "surrogatepass"))


class _AsSet:
    """A ``seen`` that is not a Seen: a set's answers, each question recorded."""

    def __init__(self, sources):
        self.held, self.asked = set(sources), []

    def __contains__(self, src):
        self.asked.append(src)
        return src in self.held


class _SeenRecorded(rounds.Seen):
    """A Seen subclass: asked through its own ``in`` (the general path), each question
    recorded."""

    def __init__(self):
        self.asked = []

    def __contains__(self, src):
        self.asked.append(src)
        return super().__contains__(src)


def _breed(seen, seed, admits=None, rounds_=4, settings=None):
    g = Grammar(params=("a", "b", "c"))
    breed = gp.breeder(g)
    simp = proposers._simplifier(g.params).core
    parents = [_core.Sites(to_tree(s)) for s in ("(* a (exp (* b x)))", "(+ a (* b (cos x)))",
                                                 "(* a (sin x))", "(/ a (+ b x))")]
    d = _core.Draws(np.random.default_rng(seed))
    got = []
    for k in range(rounds_):
        out, made = [], {}
        breed.children(d, 30, out, made, seen, simp, parents, [0.5, 0.1, 2.0, 0.3], 2, [],
                       admits=admits, **(settings or {}))
        got.append((out, {s: tuple(made[s]) for s in out}))
        for s in out[:10]:
            if isinstance(seen, rounds.Seen):
                seen.add(s)
            else:
                seen.held.add(s)
    return got, d.random()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("admits", [None, lambda tree: "sin" not in str(tree)])
def test_children_asking_a_seen_directly_keep_what_the_general_path_keeps(seed, admits):
    start = ["(* a x)", "(+ a x)", "(* a (exp (* b x)))", "a", "(sin x)"]
    fast = rounds.Seen()
    for s in start:
        fast.add(s)
    general, sub = _AsSet(start), _SeenRecorded()
    for s in start:
        sub.add(s)
    settings = {"fresh": 0.2, "crossover": 0.4} if seed % 2 else None
    want = _breed(general, seed, admits, settings=settings)
    assert _breed(fast, seed, admits, settings=settings) == want
    assert _breed(sub, seed, admits, settings=settings) == want
    # the general path asks ``seen`` of every child not made this round, in order, as before
    assert sub.asked == general.asked and len(general.asked) > 50


def test_children_asking_a_seen_raise_as_before():
    g = Grammar(params=("a", "b", "c"))
    simp = proposers._simplifier(g.params).core
    parents = [_core.Sites(to_tree("(* a (exp (* b x)))"))]

    class Raising:
        def __contains__(self, src):
            raise KeyError("asked")

    with pytest.raises(KeyError, match="asked"):
        gp.breeder(g).children(_core.Draws(np.random.default_rng(0)), 5, [], {}, Raising(),
                               simp, parents, [1.0], 0, [])


def test_a_parents_draw_is_numpys_integers_and_an_empty_one_raises_as_before():
    # (Draws._below, the operators' bounded draw: inline for spans below 2**32, as numpy draws)
    b = gp.breeder(Grammar())
    for n in (1, 2, 3, 7, 64, 65, 1000, 4097):
        d, want = _core.Draws(np.random.default_rng(n)), np.random.default_rng(n)
        got = [b.pick(d, [1.0] * n, tournament=1) for _ in range(50)]
        assert got == [int(want.integers(n)) for _ in range(50)]
    with pytest.raises(ValueError, match=r"integers: low >= high \(0 >= 0\)"):
        b.pick(_core.Draws(np.random.default_rng(0)), [])
