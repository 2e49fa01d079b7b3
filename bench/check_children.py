"""The children ``Breeder.children`` breeds, recorded under one build and compared with another's:
a change to the genetic operators must breed the same children, draw for draw.

    python bench/check_children.py run OUT.pickle        # (this build: ~1 minute)
    python bench/check_children.py compare A.pickle B.pickle

``run`` breeds rounds of children over several grammars (the damped and recurrence tasks', a
four-input Feynman-like grammar with and without its units' ``admits``, a three-input one
without let or loops, skewed mutation rates) and settings (fresh, crossover, tournament,
front_rate, seeds or none, a front or none), each round's kept children becoming parents of
the next (their Sites made of their canonical entries, as the search makes them). It records,
for each round: the sources kept in order, their entries' sizes, the children bred (kept or
not), the sources asked of ``seen`` in order (a recording ``seen`` in half the cases, the
search's Seen in the others) and the draw the stream gives next. ``compare`` prints how many
rounds and children differ between two recordings (0 when the builds breed alike).
"""
import pickle
import sys

import numpy as np

from ndvm._core._core import Draws, Seen, Sites
from ndvm.cosearch import grammar as gp
from ndvm.cosearch import proposers
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.tasks import get_task
from ndvm.cosearch.units import TARGET, Dimensions, Units

LAW = {"x0": "kg", "x1": "m", "x2": "s", "x3": "A", TARGET: "kg*m/(s*A^2)"}
SKEWED = {"subtree": 0.1, "constant": 0.25, "operator": 0.15, "hoist": 0.1, "extend": 0.2,
          "shift": 0.2}


class _Asked:
    """A ``seen`` that records every source asked of it (a set's answers)."""

    def __init__(self):
        self.held, self.asked = set(), []

    def __contains__(self, src):
        self.asked.append(src)
        return src in self.held

    def add(self, src):
        self.held.add(src)


def grammars():
    """(name, grammar, admits or None) of each grammar checked."""
    out = []
    for name in ("damped", "recurrence"):
        t = get_task(name)
        out.append((name, Grammar(inputs=tuple(t.inputs), params=tuple(t.params),
                                  loop=t.loops), None))
    xs = tuple(f"x{i}" for i in range(4))
    law = Grammar(inputs=xs, params=("a", "b", "c", "d"), loop=False)
    out.append(("law", law, None))
    out.append(("law+units", law, Dimensions(Units.of(LAW, list(xs)), law).admits))
    out.append(("three", Grammar(inputs=("m", "v", "r"), let=False, loop=False), None))
    out.append(("skewed", Grammar(inputs=("x", "y"), mutation_rates=SKEWED), None))
    return out


SETTINGS = [{}, {"fresh": 0.3, "crossover": 0.5}, {"fresh": 0.0, "crossover": 0.9,
                                                    "tournament": 1, "front_rate": 0.6},
            {"fresh": 0.05, "crossover": 0.1, "tournament": 5, "front_rate": 0.0}]


def breed_case(g, admits, seed, settings, recording, rounds=8, n=40):
    """The rounds of one case: a list of (kept sources, their sizes, children bred, sources
    asked of seen, the stream's next draw) a round."""
    breed = gp.breeder(g)
    canonical = proposers._simplifier(g.params).core
    rng = Draws(np.random.default_rng(seed))
    start = Draws(np.random.default_rng(seed + 10_000))
    parents = [Sites(breed.grow(start)) for _ in range(6)]
    seeds = [Sites(breed.grow(start, 2))] if seed % 2 else []
    seen = _Asked() if recording else Seen()
    out = []
    for k in range(rounds):
        errors = [0.1 + (i * 7 + k) % 11 for i in range(len(parents))]
        n_front = min(len(parents), seed % 3)
        kept, made, before = [], {}, breed.n_tries
        breed.children(rng, n, kept, made, seen, canonical, parents, errors, n_front, seeds,
                       admits=admits, hold_parents=True, **settings)
        asked = list(seen.asked) if recording else None
        if recording:
            seen.asked.clear()
        out.append((kept, [made[s][2] for s in kept], breed.n_tries - before, asked,
                     rng.random()))
        for s in kept:
            seen.add(s)
        parents = parents[-4:] + [Sites(made[s][0], made[s]) for s in kept[:12]]
    return out


def run(path):
    """Every case's rounds, pickled to ``path``; prints the children bred."""
    cases, bred = {}, 0
    for name, g, admits in grammars():
        for i, settings in enumerate(SETTINGS):
            for seed in range(5):
                rounds = breed_case(g, admits, seed, settings, recording=seed % 2 == 0)
                cases[(name, i, seed)] = rounds
                bred += sum(r[2] for r in rounds)
    with open(path, "wb") as f:
        pickle.dump(cases, f)
    print(f"{len(cases)} cases, {sum(len(r) for r in cases.values())} rounds, {bred} children "
          f"bred, {sum(len(x[0]) for r in cases.values() for x in r)} kept")


def compare(a, b):
    """Prints the rounds and children that differ between two recordings."""
    with open(a, "rb") as f:
        old = pickle.load(f)
    with open(b, "rb") as f:
        new = pickle.load(f)
    rounds = differ = bred = 0
    for key in sorted(set(old) | set(new)):
        for x, y in zip(old.get(key, []), new.get(key, [])):
            rounds += 1
            bred += x[2]
            if x != y:
                differ += 1
                print("differs:", key, x[0][:3], y[0][:3])
        if len(old.get(key, [])) != len(new.get(key, [])):
            differ += 1
            print("differs:", key, "rounds", len(old.get(key, [])), len(new.get(key, [])))
    print(f"{len(old)} / {len(new)} cases, {rounds} rounds, {bred} children bred: "
          f"{differ} rounds differ")
    return differ


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2])
    else:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
