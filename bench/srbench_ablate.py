"""What each search mechanism contributes: ndvm's SymbolicRegressor with one mechanism switched off
at a time, on srbench.py's problems or on the Feynman equations (same data, budget and scoring).

    python bench/srbench_ablate.py --budget 5 --seeds 0 --problems nguyen1,nguyen5,...
    python bench/srbench_ablate.py --suite feynman --quick 5 --noise 0,0.01 --budget 10 \
        --ablations full,no-blocks --out runs.jsonl

With --out, every run is appended as a JSON line (feynman.py's fields plus ``method`` =
the variant's name), so ``python bench/feynman.py --report runs.jsonl`` tabulates them by number
of inputs.
"""
import argparse
import inspect
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import feynman  # noqa: E402
import srbench  # noqa: E402

import ndvm  # noqa: E402
from ndvm.cosearch import grammar as gp  # noqa: E402
from ndvm.cosearch import proposers, result, rounds, score  # noqa: E402
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
    "no-selection": {"patch": [(result, "select", _lowest_heldout)]},
    "no-simplify": {"patch": [(proposers, "_canonical_uncached",
                               lambda simp, t, p: _unsimplified(t, p))]},
    "no-pole-probe": {"patch": [(score.Scorer, "off_domain", lambda self, prog, p, v=None: None)]},
    "no-small-models": {"mutate": {"small": False}},
    "no-blocks": {"mutate": {"blocks": False}},  # structure.building_blocks
    "adam": {"options": {"optimizer": "adam", "steps": 50, "starts": 8}},
    "old-grammar": {"options": {"unary": ("sin", "cos", "exp", "tanh", "square"),
                                "binary": ("+", "-", "*", "/")}},
}


def _patched_mutate(options):
    """Set Mutate's defaults named in ``options``; returns the old defaults."""
    init = proposers.Mutate.__init__.__defaults__
    names = list(inspect.signature(proposers.Mutate.__init__).parameters)
    d = list(init)
    for key, value in options.items():
        d[names.index(key) - (len(names) - len(d))] = value  # (defaults end the list)
    proposers.Mutate.__init__.__defaults__ = tuple(d)
    return init


def _srbench_run(name, spec, problem, seed, budget, noise):
    X, y, Xt, yt = srbench.make_data(problem, seed)
    m = ndvm.SymbolicRegressor(budget=budget, random_state=seed,
                               **spec.get("options", {})).fit(X, y)
    return {"problem": problem, "method": name, "seed": seed, "budget": budget,
            "test_r2": srbench.r2(yt, m.predict(Xt)), "size": m.size_}


def _feynman_run(name, spec, eq, seed, budget, noise):
    if spec.get("options"):
        raise ValueError(f"{name}: estimator options are not run on the Feynman suite")
    row = feynman.run_one("ndvm", eq, seed, noise, budget)
    return dict(row, method=name)


def run(name, problems, seeds, budget, suite="srbench", noises=(0.0,), out=None):
    spec = ABLATIONS[name]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in spec.get("patch", [])]
    for obj, attr, new in spec.get("patch", []):
        setattr(obj, attr, new)
    init = _patched_mutate(spec.get("mutate", {}))
    proposers._SIMPLIFIERS.clear()  # (canonical forms remembered from another variant)
    one = _srbench_run if suite == "srbench" else _feynman_run
    rows = []
    try:
        for p in problems:
            for noise in noises:
                for seed in seeds:
                    row = one(name, spec, p, seed, budget, noise)
                    rows.append(row)
                    if out is not None:
                        out.write(json.dumps(row) + "\n")
                        out.flush()
                    label = row.get("problem") or row["equation"]
                    print(f"{name:16s} {label:10s} {noise:g} {seed}  R2 {row['test_r2']:.6f}  "
                          f"size {row['size']}", file=sys.stderr, flush=True)
    finally:
        for obj, attr, old in saved:
            setattr(obj, attr, old)
        proposers.Mutate.__init__.__defaults__ = init
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=("srbench", "feynman"), default="srbench")
    ap.add_argument("--problems", default="all", help="srbench problems or Feynman ids")
    ap.add_argument("--quick", type=int, default=None,
                    help="feynman: a stratified subset of K equations per stratum of inputs")
    ap.add_argument("--noise", default="0", help="feynman: comma list of noise levels")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--ablations", default=",".join(ABLATIONS))
    ap.add_argument("--out", default=None, help="append one JSON line per run here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    noises = [float(v) for v in args.noise.split(",")]
    if args.suite == "srbench":
        problems = list(srbench.PROBLEMS) if args.problems == "all" else args.problems.split(",")
    else:
        eqs = feynman.load_equations()
        if args.quick:
            eqs = feynman.quick_subset(eqs, args.quick)
        elif args.problems != "all":
            wanted = set(args.problems.split(","))
            eqs = [e for e in eqs if e.id in wanted]
        problems = eqs
    srbench.warm_up(["ndvm"])
    out = open(args.out, "a", encoding="utf-8") if args.out else None
    print("| variant | solved | median size | median test R² |\n|---|---|---|---|")
    for name in args.ablations.split(","):
        rows = run(name, problems, seeds, args.budget, args.suite, noises, out)
        solved = sum(r["test_r2"] > 0.999 for r in rows)
        r2s = [r["test_r2"] if math.isfinite(r["test_r2"]) else -1e9 for r in rows]
        print(f"| {name} | {solved} / {len(rows)} | {np.median([r['size'] for r in rows]):g} | "
              f"{np.median(r2s):.4f} |", flush=True)


if __name__ == "__main__":
    main()
