"""Fits you can trust: ndvm.fit at its defaults vs scipy.optimize.least_squares (lm, trf).

    python bench/fit_quality.py [--repeat 3] [--optimizer lm] [--scaling both|jac|none]

The hard problems of tests/nls_problems.py (Moré-Garbow-Hillstrom from x0, 10 x0 and 100 x0;
NIST StRD BoxBOD, Rat42, Rat43 from both certified starts), each method at its defaults, one start.
A fit succeeds when its sum of squares reaches the global minimum (relative 1e-6; a zero minimum:
below 1e-10 times its value at the problem's standard start). Correct digits: the log relative error of the parameters
where the minimizer is known, else of the sum of squares (capped at 15). "false converged": the
method reported success at a point that is neither the global nor a known local minimum.
Timing: total time of all fits of a method (best of --repeat), side by side in one run.
"""
import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import ndvm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from nls_problems import PROBLEMS, judge, starts  # noqa: E402


def run_ndvm(p, x0, optimizer, ev, scaling="both"):
    r = ndvm.fit(p.src, data=p.data, target=p.target, params=p.names,
                 init=dict(zip(p.names, x0)), optimizer=optimizer, evaluator=ev, scaling=scaling)
    return [r.params[n] for n in p.names], bool(r.converged[0]), r.n_evals


def run_scipy(p, x0, method):
    from scipy.optimize import least_squares

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            s = least_squares(lambda z: p.residuals(z, **p.data), np.array(x0, dtype=np.float64),
                              method=method)
        except ValueError:  # e.g. residuals not finite at the start
            return list(x0), False, 0
    return list(s.x), bool(s.success), int(s.nfev)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--optimizer", default="lm", choices=["lm", "lbfgs"])
    ap.add_argument("--scaling", default="both", choices=["both", "jac", "none"],
                    help="LM's trust-region scaling (default: ndvm.fit's default, both)")
    args = ap.parse_args()
    try:
        import scipy  # noqa: F401
    except ImportError:
        print("scipy is not installed: nothing to compare with")
        return
    ev = ndvm.Evaluator()
    cases = [(p, label, x0) for p in PROBLEMS for label, x0 in starts(p)]
    name = f"ndvm {args.optimizer}" + ("" if args.scaling == "both" else f" {args.scaling}")
    methods = {name: lambda p, x0: run_ndvm(p, x0, args.optimizer, ev, args.scaling),
               "scipy lm": lambda p, x0: run_scipy(p, x0, "lm"),
               "scipy trf": lambda p, x0: run_scipy(p, x0, "trf")}
    results, times = {}, {}
    for name, f in methods.items():
        f(*cases[0][::2])  # warm up
        best = math.inf
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            out = [f(p, x0) for p, _, x0 in cases]
            best = min(best, time.perf_counter() - t0)
        results[name], times[name] = out, best
    rows = []
    summary = {m: [0, 0, 0.0, 0] for m in methods}  # successes, false converged, digits, evals
    for i, (p, label, x0) in enumerate(cases):
        row = [f"{p.name} {label}"]
        for m in methods:
            x, conv, nfev = results[m][i]
            ok, known, digits = judge(p, x, x0)
            s = summary[m]
            s[0] += ok
            s[1] += conv and not known
            s[2] += digits if ok else 0.0
            s[3] += nfev
            flag = ("ok " if ok else "-- ") + ("conv" if conv else "stop")
            row.append(f"{flag} {digits:4.1f}d {nfev:5d}")
        rows.append(row)
    width = max(len(r[0]) for r in rows)
    print(f"{'problem':<{width}}  " + "  ".join(f"{m:>20}" for m in methods))
    for r in rows:
        print(f"{r[0]:<{width}}  " + "  ".join(f"{c:>20}" for c in r[1:]))
    print(f"\n{len(cases)} fits; success: global minimum reached; conv: the method reported "
          f"convergence; d: correct digits; then evaluations")
    print(f"{'method':<12} {'successes':>9} {'false conv':>10} {'mean digits':>11} "
          f"{'evaluations':>11} {'total time':>11} {'vs scipy lm':>11}")
    for m, (ok, false_conv, digits, nfev) in summary.items():
        print(f"{m:<12} {ok:>9} {false_conv:>10} {digits / max(ok, 1):>11.1f} {nfev:>11} "
              f"{times[m] * 1e3:>9.1f}ms {times['scipy lm'] / times[m]:>10.1f}x")
    either = sum(1 for i in range(len(cases))
                 if any(judge(cases[i][0], results[m][i][0], cases[i][2])[0]
                        for m in ("scipy lm", "scipy trf")))
    mine = next(iter(methods))
    missed = [f"{p.name} {label}" for i, (p, label, x0) in enumerate(cases)
              if not judge(p, results[mine][i][0], x0)[0]
              and any(judge(p, results[m][i][0], x0)[0] for m in ("scipy lm", "scipy trf"))]
    print(f"\nscipy (lm or trf) succeeds on {either}; {mine} misses "
          f"{len(missed)} of those{': ' + ', '.join(missed) if missed else ''}")


if __name__ == "__main__":
    main()
