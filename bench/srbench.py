"""Symbolic regression side by side: ndvm's search vs pyoperon vs gplearn, equal wall budget.

Problems are public formula sets (Nguyen, Keijzer, Vladislavleva, Feynman) generated here from their
published definitions; every run trains on the set's sample and is scored on unseen test points
drawn from the same domain. "Solved" = test R^2 > 0.999. One core: every method runs one thread.

    python bench/srbench.py --budget 10 --seeds 0,1 --out bench/results/srbench.jsonl
    python bench/srbench.py --table bench/results/srbench.jsonl     # print the table again
    python bench/srbench.py --quick          # ndvm alone, seed 0, 3000 candidates a problem: the
                                             # same runs whatever the load (a before/after check)
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sr_common import (METHODS, SOLVED_R2, Sink, fit_and_score, r2,  # noqa: E402,F401
                       read_rows, warm_up)

import numpy as np  # noqa: E402


def _u(lo, hi, n, k=1):
    return ("U", lo, hi, n, k)


def _e(lo, hi, step, k=1):
    return ("E", lo, hi, step, k)


# name -> (formula over columns x[0], x[1], training sample). U = uniform random (lo, hi: one
# range for every input, or one per input), E = even grid.
PROBLEMS = {
    "nguyen1": (lambda x: x[0]**3 + x[0]**2 + x[0], _u(-1, 1, 20)),
    "nguyen2": (lambda x: x[0]**4 + x[0]**3 + x[0]**2 + x[0], _u(-1, 1, 20)),
    "nguyen3": (lambda x: x[0]**5 + x[0]**4 + x[0]**3 + x[0]**2 + x[0], _u(-1, 1, 20)),
    "nguyen4": (lambda x: x[0]**6 + x[0]**5 + x[0]**4 + x[0]**3 + x[0]**2 + x[0],
                _u(-1, 1, 20)),
    "nguyen5": (lambda x: np.sin(x[0]**2) * np.cos(x[0]) - 1, _u(-1, 1, 20)),
    "nguyen6": (lambda x: np.sin(x[0]) + np.sin(x[0] + x[0]**2), _u(-1, 1, 20)),
    "nguyen7": (lambda x: np.log(x[0] + 1) + np.log(x[0]**2 + 1), _u(0, 2, 20)),
    "nguyen8": (lambda x: np.sqrt(x[0]), _u(0, 4, 20)),
    "nguyen9": (lambda x: np.sin(x[0]) + np.sin(x[1]**2), _u(-1, 1, 100, 2)),
    "nguyen10": (lambda x: 2 * np.sin(x[0]) * np.cos(x[1]), _u(-1, 1, 100, 2)),
    "nguyen11": (lambda x: x[0]**x[1], _u(0, 1, 100, 2)),
    "nguyen12": (lambda x: x[0]**4 - x[0]**3 + x[1]**2 / 2 - x[1], _u(-1, 1, 100, 2)),
    "keijzer1": (lambda x: 0.3 * x[0] * np.sin(2 * np.pi * x[0]), _e(-1, 1, 0.1)),
    "keijzer7": (lambda x: np.log(x[0]), _e(1, 100, 1)),
    "keijzer8": (lambda x: np.sqrt(x[0]), _e(0, 100, 1)),
    "keijzer11": (lambda x: x[0] * x[1] + np.sin((x[0] - 1) * (x[1] - 1)), _u(-3, 3, 20, 2)),
    "keijzer12": (lambda x: x[0]**4 - x[0]**3 + x[1]**2 / 2 - x[1], _u(-3, 3, 20, 2)),
    "keijzer13": (lambda x: 6 * np.sin(x[0]) * np.cos(x[1]), _u(-3, 3, 20, 2)),
    "keijzer14": (lambda x: 8 / (2 + x[0]**2 + x[1]**2), _u(-3, 3, 20, 2)),
    "keijzer15": (lambda x: x[0]**3 / 5 + x[1]**3 / 2 - x[1] - x[0], _u(-3, 3, 20, 2)),
    "vlad1": (lambda x: np.exp(-(x[0] - 1)**2) / (1.2 + (x[1] - 2.5)**2), _u(0.3, 4, 100, 2)),
    "damped": (lambda x: np.exp(-0.3 * x[0]) * np.cos(2 * x[0]), _u(0.1, 6, 64)),
    # added after the mechanisms of 2026-12-01 were tuned (unseen while they were built):
    # Vladislavleva 5 and 7 (Vladislavleva, Smits & den Hertog 2009) and Feynman I.6.2
    # (Udrescu & Tegmark 2020, the normal density with its scale, theta and sigma in [1, 3])
    "vlad5": (lambda x: 30 * (x[0] - 1) * (x[2] - 1) / (x[1]**2 * (x[0] - 10)),
              _u((0.05, 1, 0.05), (2, 2, 2), 300, 3)),
    "vlad7": (lambda x: (x[0] - 3) * (x[1] - 3) + 2 * np.sin((x[0] - 4) * (x[1] - 4)),
              _u(0.05, 6.05, 300, 2)),
    "feynman_I_6_2": (lambda x: np.exp(-(x[0] / x[1])**2 / 2) / (np.sqrt(2 * np.pi) * x[1]),
                      _u(1, 3, 100, 2)),
}

N_TEST = 1000


def make_data(name, seed):
    """(X_train, y_train, X_test, y_test) of a problem; the training sample depends on seed."""
    f, (kind, lo, hi, n, k) = PROBLEMS[name]
    rng = np.random.default_rng(1000 + seed)
    if kind == "U":
        X = rng.uniform(lo, hi, (n, k))
    else:
        X = np.arange(lo, hi + n / 2, n).reshape(-1, 1)
    Xt = np.random.default_rng(99_000 + seed).uniform(lo, hi, (N_TEST, k))
    return X, f(X.T), Xt, f(Xt.T)


def run_one(method, problem, seed, budget, max_candidates=None):
    """One run: fit on the training sample within the budget, score on the test points."""
    X, y, Xt, yt = make_data(problem, seed)
    row, _ = fit_and_score(method, X, y, Xt, yt, budget, seed, max_candidates)
    return {"problem": problem, **row}


def table(rows, threshold=SOLVED_R2):
    """Solved counts and median sizes per method, as Markdown."""
    seen = list(dict.fromkeys(r["method"] for r in rows))
    methods = [m for m in METHODS if m in seen] + [m for m in seen if m not in METHODS]
    out = ["| | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]

    def line(label, fn):
        out.append(f"| {label} | " + " | ".join(fn([r for r in rows if r["method"] == m])
                                               for m in methods) + " |")

    line("runs solved (test R² > 0.999)",
         lambda rs: f"{sum(r['test_r2'] > threshold for r in rs)} / {len(rs)}")
    line("median size (own measure)", lambda rs: f"{np.median([r['size'] for r in rs]):g}")
    line("median size (SymPy nodes)", lambda rs: f"{np.median([r['sympy_size'] for r in rs]):g}")
    line("median test R²", lambda rs: f"{np.median([r['test_r2'] for r in rs]):.4f}")
    line("returned models simplified", lambda rs: (
        f"{sum(r['simplified'] for r in rs)} / {len(rs)}" if all("simplified" in r for r in rs)
        else "-"))
    line("median wall s", lambda rs: f"{np.median([r['wall'] for r in rs]):.1f}")
    probs = sorted({r["problem"] for r in rows}, key=list(PROBLEMS).index)
    out.append("")
    out.append("| problem | " + " | ".join(methods) + " |")
    out.append("|---|" + "---|" * len(methods))
    for p in probs:
        cells = []
        for m in methods:
            rs = [r for r in rows if r["method"] == m and r["problem"] == p]
            cells.append(f"{sum(r['test_r2'] > threshold for r in rs)}/{len(rs)}")
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--problems", default="all", help="comma list or 'all'")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds per run")
    ap.add_argument("--out", help="append one JSON line per run here")
    ap.add_argument("--candidates", type=int, help="ndvm and ndvm-islands only: stop after "
                    "that many candidates instead of a time budget")
    ap.add_argument("--quick", action="store_true",
                    help="ndvm alone, seed 0, 3000 candidates a problem")
    ap.add_argument("--table", nargs="*", help="print the table of these result files and exit")
    args = ap.parse_args(argv)
    if args.quick:
        args.methods, args.seeds, args.candidates = "ndvm", "0", args.candidates or 3000
    if args.candidates:
        args.budget = None
    if args.table:
        rows = [r for f in args.table for r in read_rows(f)]
        print(table(rows))
        return 0
    problems = list(PROBLEMS) if args.problems == "all" else args.problems.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    methods = args.methods.split(",")
    warm_up(methods)
    rows = []
    sink = Sink(args.out)
    for problem in problems:  # methods interleaved, so each sees the same machine load
        for seed in seeds:
            for method in methods:
                row = run_one(method, problem, seed, args.budget, args.candidates)
                rows.append(row)
                print(f"{method:10s} {problem:10s} seed {seed}  test R2 {row['test_r2']:.6f}  "
                      f"size {row['size']:3d}  {row['wall']:.1f}s  {row['model'][:80]}",
                      file=sys.stderr, flush=True)
                sink.write(row)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
