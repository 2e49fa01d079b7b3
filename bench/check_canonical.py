"""Canonical forms of many trees, written to a file by one build and compared with another's: a
change to the simplifier's code (ndvm/_core/simplify.*) must leave every canonical entry (tree,
source, size, skeleton, None for too many parameters) and every failure (its kind and message)
exactly as it was.

    python bench/check_canonical.py trees T.pkl       (a build with Simplifier.trace: the new)
    python bench/check_canonical.py entries T.pkl OLD.txt     (with the old build active)
    python bench/check_canonical.py entries T.pkl NEW.txt     (with the new build active)
    python bench/check_canonical.py compare OLD.txt NEW.txt

``trees``: the trees of nine searches (damped, recurrence and a Feynman law of 3 to 5 inputs,
seeds 1 to 3), each tree whose entry the search computed (the bred children, the small models,
the shape library; ``Simplifier.trace``), in order, by parameter set; the canonical forms of the
kept children as the breeder made them (lazily: their trees made from the Node when read); the
inputs of tests/simplify_golden.jsonl.gz; and random trees grown, mutated and crossed over from
grammars of random operators. ``entries``: each tree's entry by a Simplifier of its parameter
set (one per set, in order, its memo and its resets as they come), one line each; then the
searches' kept children's lines again, made by this build. ``compare``: the lines that differ.
"""
import gzip
import json
import pickle
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEARCHES = [("damped", s) for s in (1, 2, 3)] + [("recurrence", s) for s in (1, 2, 3)] + [
    ("feynman", s) for s in (1, 2, 3)]
CANDIDATES = 4096
RANDOM_TREES = 60_000


def _feynman_law():
    """The first law of the Feynman table with 3 to 5 inputs, and its data (2,000 rows)."""
    sys.path.insert(0, str(HERE))
    import feynman
    eq = next(e for e in feynman.load_equations() if 3 <= len(e.variables) - 1 <= 5)
    X, y, _, _ = feynman.make_data(eq, 0)
    return eq.id, X[:2000], y[:2000]


def _searches(record_made):
    """Runs SEARCHES; ``record_made(line)`` is given each kept child's canonical entry, as the
    breeder made it, as a line of text (its tree read from the entry)."""
    import ndvm
    from ndvm.cosearch import proposers

    real_breeder = proposers.Mutate._breeder

    class Recording:
        def __init__(self, breeder):
            self.breeder = breeder

        def children(self, rng, n, out, made, *args, **kwargs):
            before = len(out)
            got = self.breeder.children(rng, n, out, made, *args, **kwargs)
            for src in out[before:]:
                record_made(repr(tuple(made[src])))
            return got

    proposers.Mutate._breeder = lambda self, state: Recording(real_breeder(self, state))
    try:
        law, X, y = _feynman_law()
        for task, seed in SEARCHES:
            if task == "feynman":
                ndvm.SymbolicRegressor(max_candidates=CANDIDATES // 2, random_state=seed,
                                       islands=2, migration_every=256, workers=1,
                                       budget=3600).fit(X, y)
            else:
                ndvm.search(task, max_candidates=CANDIDATES, seed=seed, islands=4,
                            migration_every=256, workers=1, budget=3600)
            print(f"  {task} seed {seed}", file=sys.stderr)
    finally:
        proposers.Mutate._breeder = real_breeder
    return law


def _random_trees(n):
    """n trees (params, tree): grown from grammars of random operators and depths, half of them
    then mutated or crossed over with another, all seeded."""
    from ndvm.cosearch import grammar as gp
    rng = np.random.default_rng(20261207)
    unary = ("sin", "cos", "exp", "log", "sqrt", "tanh", "square")
    binary = ("+", "-", "*", "/", "pow")
    out = []
    while len(out) < n:
        g = gp.Grammar(
            inputs=tuple(["x", "y", "z"][:1 + rng.integers(3)]),
            params=tuple(["a", "b", "c", "d", "f", "g"][:2 + rng.integers(5)]),
            unary=tuple(u for u in unary if rng.random() < 0.6) or ("exp",),
            binary=tuple(b for b in binary if rng.random() < 0.7) or ("+",),
            constants=(0.5, 1.0, 2.0, 3.0, -1.0, 0.0),
            let=bool(rng.random() < 0.5), loop=bool(rng.random() < 0.3),
            max_depth=int(2 + rng.integers(5)), max_size=60)
        grown = [gp.grow(rng, g) for _ in range(200)]
        for k, t in enumerate(grown):
            r = rng.random()
            if r < 0.3:
                t = gp.mutate(rng, g, t)
            elif r < 0.5:
                t = gp.crossover(rng, g, t, grown[(k + 1) % len(grown)])
            out.append((tuple(g.params), t))
    return out[:n]


def trees(path):
    """Writes the trees to check (and the kept children's lines) to ``path``."""
    from ndvm.cosearch import proposers
    traced = []
    real_simplifier = proposers._simplifier

    def simplifier(params):
        simp = real_simplifier(params)
        if simp.core.trace is None:
            key = tuple(params)
            simp.core.trace = lambda tree: traced.append((key, tree))
        return simp

    proposers._SIMPLIFIERS.clear()
    proposers._simplifier = simplifier
    made = []
    try:
        law = _searches(made.append)
    finally:
        proposers._simplifier = real_simplifier
    with gzip.open(HERE.parent / "tests" / "simplify_golden.jsonl.gz", "rt") as f:
        sets = [tuple(p) for p in json.loads(f.readline())]
        golden = [(sets[case[1]], case[0]) for case in map(json.loads, f) if case]
    grown = _random_trees(RANDOM_TREES)
    with open(path, "wb") as f:
        pickle.dump({"searched": traced, "golden": golden, "grown": grown, "made": made,
                     "law": law}, f)
    print(f"{len(traced)} searched, {len(golden)} golden, {len(grown)} grown trees; "
          f"{len(made)} kept children ({law})")


def _entry_line(simp, tree):
    try:
        return repr(simp.entry(tree))
    except Exception as e:  # noqa: BLE001 - a failure is an outcome, compared as one
        return f"raised {type(e).__name__}: {e}"


def entries(path, out):
    """One line for each tree of ``path``'s (its entry, or its failure), then one for each kept
    child of the searches run again with this build."""
    from ndvm.cosearch.simplify import Simplifier
    with open(path, "rb") as f:
        data = pickle.load(f)
    lines = []
    for part in ("searched", "golden", "grown"):
        simps = {}
        for params, tree in data[part]:
            simp = simps.get(params)
            if simp is None:
                simp = simps[params] = Simplifier(params)
            lines.append(f"{part} {_entry_line(simp, tree)}")
    made = []
    _searches(made.append)
    lines += [f"made {m}" for m in made]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} lines ({len(made)} kept children)")


def compare(a, b):
    """How many lines of two ``entries`` files differ, in order (the kept children's too: a
    search's order is its own, the same for the same canonical forms)."""
    x = Path(a).read_text().splitlines()
    y = Path(b).read_text().splitlines()
    differ = sum(p != q for p, q in zip(x, y)) + abs(len(x) - len(y))
    failures = sum(line.split(" ", 2)[1] == "raised" for line in x)
    print(f"{len(x)} and {len(y)} lines, {failures} failures among them; {differ} differ")
    return differ


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "trees":
        trees(sys.argv[2])
    elif cmd == "entries":
        entries(sys.argv[2], sys.argv[3])
    else:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
