"""What each search mechanism contributes: ndvm's SymbolicRegressor with one mechanism switched off
at a time, on srbench.py's problems (same data, budget and scoring).

    python bench/srbench_ablate.py --budget 5 --seeds 0 --problems nguyen1,nguyen5,...
"""
import argparse
import inspect
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import srbench  # noqa: E402

import ndvm  # noqa: E402
from ndvm.cosearch import grammar as gp  # noqa: E402
from ndvm.cosearch import loop, proposers, rounds  # noqa: E402
from ndvm.cosearch.sexpr import canonical, size, skeleton, to_source  # noqa: E402


def _unsimplified(tree, params):
    """The proposer's (tree, source, size, skeleton) of a child without the simplifier: only
    grammar.simplify's constant folding and the parameters' renaming."""
    out = canonical(gp.simplify(tree), params)
    return out, to_source(out), size(out), skeleton(out, params)


def _lowest_heldout(task, front, ev=None):
    best = min(front, key=lambda r: r["heldout_error"]) if front else None
    return (dict(best, selection={"rule": "lowest held-out error"}) if best else None), []


ABLATIONS = {
    "full": {},
    "no-selection": {"patch": [(loop, "select", _lowest_heldout)]},
    "no-simplify": {"patch": [(proposers, "_canonical_uncached",
                               lambda simp, t, p: _unsimplified(t, p))]},
    "no-pole-probe": {"patch": [(rounds._Scorer, "off_domain", lambda self, prog, p, v=None: None)]},
    "no-small-models": {"options": {}, "small": False},
    "adam": {"options": {"optimizer": "adam", "steps": 50, "starts": 8}},
    "old-grammar": {"options": {"unary": ("sin", "cos", "exp", "tanh", "square"),
                                "binary": ("+", "-", "*", "/")}},
}


def run(name, problems, seeds, budget):
    spec = ABLATIONS[name]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in spec.get("patch", [])]
    for obj, attr, new in spec.get("patch", []):
        setattr(obj, attr, new)
    init = proposers.Mutate.__init__.__defaults__
    if spec.get("small") is False:
        names = list(inspect.signature(proposers.Mutate.__init__).parameters)
        d = list(init)
        d[names.index("small") - (len(names) - len(d))] = False  # (defaults end the list)
        proposers.Mutate.__init__.__defaults__ = tuple(d)
    proposers._SIMPLIFIERS.clear()  # (canonical forms remembered from another variant)
    rows = []
    try:
        for p in problems:
            for seed in seeds:
                X, y, Xt, yt = srbench.make_data(p, seed)
                m = ndvm.SymbolicRegressor(budget=budget, random_state=seed,
                                           **spec.get("options", {})).fit(X, y)
                rows.append((p, seed, srbench.r2(yt, m.predict(Xt)), m.size_))
                print(f"{name:16s} {p:10s} {seed}  R2 {rows[-1][2]:.6f}  size {m.size_}",
                      file=sys.stderr, flush=True)
    finally:
        for obj, attr, old in saved:
            setattr(obj, attr, old)
        proposers.Mutate.__init__.__defaults__ = init
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="all")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--ablations", default=",".join(ABLATIONS))
    args = ap.parse_args()
    problems = list(srbench.PROBLEMS) if args.problems == "all" else args.problems.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    srbench.warm_up(["ndvm"])
    print("| variant | solved | median size | median test R² |\n|---|---|---|---|")
    for name in args.ablations.split(","):
        rows = run(name, problems, seeds, args.budget)
        solved = sum(r[2] > 0.999 for r in rows)
        r2s = [r[2] if math.isfinite(r[2]) else -1e9 for r in rows]
        print(f"| {name} | {solved} / {len(rows)} | {np.median([r[3] for r in rows]):g} | "
              f"{np.median(r2s):.4f} |", flush=True)


if __name__ == "__main__":
    main()
