"""The mutate proposer's fast paths change nothing it proposes: its seeded sequence is the
recorded one, and its long-lived caches (the holding Simplifier, the canonical forms by content)
give what a fresh computation gives, within their bounds."""
import hashlib

import numpy as np

from ndvm._core import _core
from ndvm.cosearch import grammar as gp
from ndvm.cosearch import proposers, rounds
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import size, skeleton, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.tasks import get_task

PARENTS = ["(* a (exp (* b x)))", "(+ a (* b (cos (* c x))))", "(* a (sin x))", "(/ a (+ b x))"]


def _proposals(seed, batches=6, n=50):
    """300 genetic children of a fixed front on the damped task (no library), with a population
    that grows from them batch by batch."""
    task = get_task("damped")
    g = Grammar(inputs=tuple(task.inputs), params=tuple(task.params), loop=task.loops)
    prop = proposers.Mutate(seed=seed)
    prop._small, prop._shapes = [], []  # (no library: every proposal is a genetic child)
    state = rounds.SearchState(task=task, grammar=g)
    state.front = [{"proposed": s, "model": s, "size": i + 3, "train_error": 1.0 / (i + 1),
                    "heldout_error": 1.0 / (i + 1)} for i, s in enumerate(PARENTS)]
    out = []
    for _ in range(batches):
        srcs = prop.propose(n, state)
        for s in srcs:
            state.seen.add(s)
        state.population = state.population + [
            {"proposed": s, "model": s, "size": prop.made[s][2], "train_error": 1.0 + len(s) % 7,
             "heldout_error": 1.0 + len(s) % 5} for s in srcs[:10]]
        out += srcs
    return out


def test_the_seeded_proposals_are_the_recorded_ones():
    # recorded on main at e205840 (before the proposer's fast paths): a seed proposes what it did
    recorded = {0: ("af445a67e4275a6a0409ef4ac5e66db4d785f9c6bf9082f296b643aae92333a8",
                    "(* (+ a (* b (cos (* c x)))) (sqrt (+ a (cos (* c x)))))"),
                1: ("a481e6c50b0a49f7b0d078640e675f7664999ba26352c6a32bb52cac6a3bfe70", "a")}
    for seed, (digest, first) in recorded.items():
        got = _proposals(seed)
        assert len(got) == 300 and got[0] == first
        assert hashlib.sha256("\n".join(got).encode()).hexdigest() == digest


def _children(seed, n):
    """Random trees as a search makes them: children that share lists with their parents."""
    rng = np.random.default_rng(seed)
    g = Grammar(params=("a", "b", "c"))
    pool = [to_tree(s) for s in PARENTS] + [gp.grow(rng, g) for _ in range(8)]
    out = []
    for _ in range(n):
        r = rng.random()
        a = pool[int(rng.integers(len(pool)))]
        if r < 0.3:
            child = gp.crossover(rng, g, a, pool[int(rng.integers(len(pool)))])
        elif r < 0.4:
            child = gp.grow(rng, g)
        else:
            child = gp.mutate(rng, g, a)
        out.append(child)
        pool.append(child)
    return out


def _fresh(tree, params):
    """The canonical entry of ``tree`` computed from nothing (a new Simplifier, sexpr's skeleton)."""
    try:
        t, src, n = Simplifier(params).canonical_form(tree)
    except TooManyParameters:
        return None
    return t, src, n, skeleton(t, params)


def _held_canonical(simp, tree):
    try:
        return simp.canonical_form(tree, skeleton=True)
    except TooManyParameters:
        return None


def test_a_holding_simplifier_gives_what_a_fresh_one_gives():
    # every parent held, as the proposer holds them: each child's shared lists are met by identity
    params = ("a", "b", "c")
    held = Simplifier(params)
    trees = _children(0, 600)
    for i, tree in enumerate(trees + trees[::7]):
        if type(tree) is list and i % 3 == 0:
            held.hold(tree)
        assert _held_canonical(held, tree) == _fresh(tree, params)
    assert held.canonical_form.__self__.n_held > 0
    assert any(_fresh(t, params) is None for t in trees)  # (both outcomes met)


def test_the_proposers_cached_canonical_forms_equal_uncached_ones(monkeypatch):
    monkeypatch.setattr(proposers, "_SIMPLIFIERS", {})
    params = ("a", "b", "c")
    trees = _children(1, 400)
    first = [proposers._canonical(t, params) for t in trees]
    again = [proposers._canonical(t, params) for t in trees]  # (cache hits)
    copies = [proposers._canonical(_copy(t), params) for t in trees]  # (new lists, same content)
    for t, a, b, c in zip(trees, first, again, copies):
        expect = _fresh(t, params)
        if expect is None:
            assert a is b is c is None
        else:
            assert a == b == c == expect and a[2] == size(a[0])


def _copy(t):
    return [_copy(x) for x in t] if isinstance(t, list) else t


def test_the_holding_simplifier_keeps_a_bounded_number_of_lists(monkeypatch):
    monkeypatch.setattr(_core, "SIMPLIFY_HOLD_LIMIT", 50)
    params = ("a", "b", "c")
    held = Simplifier(params)
    core = held.canonical_form.__self__
    peak = 0
    for tree in _children(2, 300):
        if type(tree) is list:
            held.hold(tree)
        assert _held_canonical(held, tree) == _fresh(tree, params)  # (after each forgetting too)
        peak = max(peak, core.n_held)
    assert 0 < peak <= 50
    assert Simplifier(params).canonical_form.__self__.n_held == 0  # (holds only when asked)
