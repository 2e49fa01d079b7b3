"""The AI Feynman benchmark (SRBench's ground-truth track): ndvm vs pyoperon (with and without its
local optimizer) vs gplearn on the 100 Feynman I-III equations, equal wall budget, one core each.

Data follow SRBench's protocol: inputs uniform on the published ranges (feynman_equations.csv),
a 75/25 train/test split, Gaussian noise N(0, level * rms(y_train)) on the training target only.
Each run records test R² (solved: > 0.999), whether the model is a symbolic solution (equal to the
true formula up to fitted constants, decided by SymPy), its size in SymPy nodes, its wall time, and
how many of its fitted constants the data cannot tell apart (``redundant_parameters``).
Runs are appended as JSON lines; a rerun with the same --out skips the runs already there.

    python bench/feynman.py --quick 5 --budget 10 --methods ndvm,operon-lm --noise 0,0.01 \\
        --seeds 0 --out bench/results/feynman_quick_10s.jsonl       # 5 equations per stratum
    python bench/feynman.py --budget 30 --seeds 0,1,2 --out bench/results/feynman_30s.jsonl
    python bench/feynman.py --report bench/results/feynman_quick_10s.jsonl
    python bench/feynman.py --report bench/results/feynman_30s.jsonl --plot feynman_30s.png
    python bench/feynman.py --rescore FILE      # the symbolic and redundancy checks again

Method ndvm-units is ndvm given the units of the inputs and the target (the table's units and
target_unit columns: SI units, our assignment for the AI Feynman variables; every formula is
dimensionally consistent with them, tests/test_units.py checks it).
"""
import argparse
import csv
import json
import signal
import sys
import threading
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sr_common import (METHODS, SOLVED_R2, UNIT_METHODS, Sink, fit_and_score,  # noqa: E402
                       read_rows, warm_up)

import numpy as np  # noqa: E402

TABLE = Path(__file__).with_name("feynman_equations.csv")
FEYNMAN_METHODS = METHODS[:1] + UNIT_METHODS + METHODS[1:]  # the default, in the report's order
NOISE_LEVELS = (0.0, 0.001, 0.01, 0.1)
STRATA = (("1-2", 1, 2), ("3-4", 3, 4), ("5+", 5, None))  # by number of inputs
N_SAMPLES = 10_000  # points per data set (SRBench trains on at most 10,000)
TRAIN_FRACTION = 0.75


@dataclass(frozen=True)
class Equation:
    """One equation of the table: its id, formula (SymPy syntax), (name, low, high) inputs, the
    inputs' units (in their order) and the target's unit (unit strings: ndvm.cosearch.units)."""

    id: str
    formula: str
    variables: tuple
    units: tuple = ()
    target_unit: str = None

    @property
    def units_by_column(self):
        """The units as SymbolicRegressor(units=...) takes them: x0, x1, ... and "target"."""
        return {**{f"x{i}": u for i, u in enumerate(self.units)}, "target": self.target_unit}

    @property
    def n_inputs(self):
        return len(self.variables)

    @cached_property
    def symbols(self):
        """The inputs as SymPy symbols (positive: every published range is nonnegative)."""
        import sympy
        return tuple(sympy.Symbol(name, positive=lo >= 0) if lo >= 0 else sympy.Symbol(name,
                                                                                        real=True)
                     for name, lo, _ in self.variables)

    @cached_property
    def expr(self):
        """The true formula as a SymPy expression over ``symbols``."""
        import sympy
        names = {s.name: s for s in self.symbols}  # (shadows SymPy's I, beta, gamma, ...)
        return sympy.sympify(self.formula, locals=names)

    @cached_property
    def function(self):
        """The formula as a numpy function of the columns of X [N, k]."""
        import sympy
        f = sympy.lambdify(self.symbols, self.expr, "numpy")
        return lambda X: np.broadcast_to(np.asarray(f(*X.T), dtype=np.float64), X.shape[:1])


def load_equations(path=TABLE):
    """The equations of the table, in its order."""
    lines = [ln for ln in Path(path).read_text().splitlines() if ln and not ln.startswith("#")]
    eqs = []
    for row in csv.DictReader(lines):
        variables = []
        for spec in row["variables"].split():
            name, lo, hi = spec.split(":")
            variables.append((name, float(lo), float(hi)))
        units = tuple(row["units"].split())
        if len(units) != len(variables):
            raise ValueError(f"{path}: {row['id']}: {len(units)} units for {len(variables)} "
                             "inputs")
        eqs.append(Equation(row["id"], row["formula"], tuple(variables), units,
                            row["target_unit"]))
    return eqs


def stratum(n_inputs):
    """The label of the stratum a number of inputs falls in."""
    for label, lo, hi in STRATA:
        if n_inputs >= lo and (hi is None or n_inputs <= hi):
            return label
    raise ValueError(f"no stratum for {n_inputs} inputs")


def quick_subset(equations, per_stratum, seed=0):
    """``per_stratum`` equations of each stratum, drawn once with a fixed seed (table order)."""
    rng = np.random.default_rng(seed)
    chosen = set()
    for label, _, _ in STRATA:
        ids = [e.id for e in equations if stratum(e.n_inputs) == label]
        chosen.update(rng.choice(ids, size=min(per_stratum, len(ids)), replace=False).tolist())
    return [e for e in equations if e.id in chosen]


def _rng(eq, seed, stream):
    return np.random.default_rng([seed, zlib.crc32(eq.id.encode()), stream])


def make_data(eq, seed, noise=0.0, n=N_SAMPLES):
    """(X_train, y_train, X_test, y_test) by SRBench's protocol: the inputs and the split depend on
    (equation, seed) only, so every noise level sees the same points; the noise, drawn from its
    own stream, is N(0, noise * rms(y_train)) on the training target only."""
    rng = _rng(eq, seed, 0)
    lo = np.array([v[1] for v in eq.variables])
    hi = np.array([v[2] for v in eq.variables])
    X = rng.uniform(lo, hi, (n, eq.n_inputs))
    y = eq.function(X)
    order = rng.permutation(n)
    k = int(round(TRAIN_FRACTION * n))
    tr, te = order[:k], order[k:]
    Xtr, ytr = X[tr], y[tr].copy()
    if noise:
        rms = float(np.sqrt(np.mean(ytr ** 2)))
        ytr += _rng(eq, seed, 1).normal(0.0, noise * rms, ytr.size)
    return Xtr, ytr, X[te], y[te]


# -- symbolic solution --------------------------------------------------------------------------

SNAP_RTOL = 1e-3  # a fitted constant this close to a simple number is that number
SNAP_DENOMINATOR = 60  # simple numbers: +-(p/q) pi^k or +-sqrt((p/q) pi^k), q <= 60, |k| <= 3
NUMERIC_RTOL = 1e-6  # a difference or ratio this flat over the input box may be a constant
DUST_RTOL = 1e-6  # a fitted constant that moves the model less than this (relative) is 0
SYMPY_SECONDS = 20


def simple_number(v, rtol=SNAP_RTOL):
    """The simplest number of the form +-(p/q) pi^k or +-sqrt((p/q) pi^k) within ``rtol`` of
    v, or None. Simplest: smallest max(p, q) + 2|k| (+3 for a root), the closer on a tie, so
    2 pi wins over 44/7 and a noisy pi^2 over 31/pi."""
    import sympy
    best = None
    for root in (False, True):
        w = v * v if root else abs(v)
        if not w <= 1e6:  # (no simple number is this large: p/q pi^k <= 1000 pi^3; inf, nan)
            continue
        for k in range(-3, 4):
            for q in range(1, SNAP_DENOMINATOR + 1):
                p = round(w * q / np.pi ** k)
                if p == 0 or p > 1000:
                    continue
                x = p / q * np.pi ** k
                err = abs((np.sqrt(x) if root else x) - abs(v)) / abs(v)
                cand = (max(p, q) + 2 * abs(k) + 3 * root, err, root, p, q, k)
                if err <= rtol and (best is None or cand[:2] < best[:2]):
                    best = cand
    if best is None:
        return None
    _, _, root, p, q, k = best
    g = sympy.Rational(p, q) * sympy.pi ** k
    return (sympy.sqrt(g) if root else g) * (1 if v > 0 else -1)


def snap_constants(expr, rtol=SNAP_RTOL):
    """The model with each float that lies within ``rtol`` of a simple number (see
    simple_number) replaced by it, and every other float by its exact rational value: a fitted
    0.15915 inside an exponential is 1/(2 pi) there, a fitted 0.49998 exponent is 1/2."""
    import sympy
    reps = {}
    for f in expr.atoms(sympy.Float):
        v = float(f)
        g = sympy.Integer(0) if v == 0 else simple_number(v, rtol)
        reps[f] = sympy.Rational(v) if g is None else g
    return expr.xreplace(reps)


def exp_form(expr):
    """The model with each power of a positive number written as an exponential, b**e ->
    exp(log(b) e): a fitted 0.6065**(x**2) is exp(-0.5 x**2), whose fitted -0.5 then snaps."""
    import sympy
    return expr.replace(
        lambda a: a.is_Pow and a.base.is_Float and a.base > 0 and not a.exp.is_number,
        lambda a: sympy.exp(sympy.log(a.base) * a.exp))


def _values(expr, symbols, points):
    """expr at every point (complex), or None when numpy cannot evaluate it."""
    import sympy
    try:
        f = sympy.lambdify(symbols, expr, "numpy")
        with np.errstate(all="ignore"):
            return np.broadcast_to(np.asarray(f(*points.T), dtype=np.complex128),
                                   points.shape[:1])
    except Exception:  # noqa: BLE001 (an expression numpy cannot evaluate is undecided)
        return None


def drop_dust(expr, symbols, points, rtol=DUST_RTOL):
    """The model with each fitted constant that changes none of its values by more than
    ``rtol`` of their scale over ``points`` set to 0 (a fit's 1e-8 offsets, which no
    units-free absolute threshold could tell from a small true constant)."""
    import sympy
    base = _values(expr, symbols, points)
    if base is None or not np.all(np.isfinite(base)):
        return expr
    scale = max(float(np.sqrt(np.mean(np.abs(base) ** 2))), 1e-300)
    for f in sorted(expr.atoms(sympy.Float), key=lambda f: abs(float(f))):
        trial = expr.xreplace({f: sympy.Integer(0)})
        v = _values(trial, symbols, points)
        if v is not None and np.all(np.isfinite(v)) and np.max(np.abs(v - base)) <= rtol * scale:
            expr = trial
    return expr


def _numerically_constant(expr, symbols, points):
    """True when expr takes (nearly) one finite value at every point; False when it does not;
    None when it cannot be evaluated."""
    v = _values(expr, symbols, points)
    if v is None or not np.all(np.isfinite(v)):
        return None
    return bool(np.ptp(v.real) + np.ptp(v.imag) <= NUMERIC_RTOL * max(1.0, np.max(np.abs(v))))


def redundant_parameters(expr, symbols, points, rtol=1e-9):
    """How many of the model's fitted constants (its floats, each taken as a parameter at its
    value) the data cannot tell apart: their count less the numerical rank of the Jacobian of
    the model's values in them at ``points`` (columns scaled to unit norm, singular values
    below ``rtol`` of the largest dropped). A product a*b of two parameters of one group, or
    a*(b x - c) in place of (b x - c), counts 1; None when the model cannot be evaluated."""
    import sympy
    floats = sorted(expr.atoms(sympy.Float), key=lambda f: (abs(float(f)), float(f)))
    if not floats:
        return 0
    ps = sympy.symbols(f"p0:{len(floats)}")
    general = expr.xreplace(dict(zip(floats, ps)))
    at = [float(f) for f in floats]
    cols = []
    for p in ps:
        v = _values(sympy.diff(general, p), list(symbols) + list(ps),
                    np.concatenate([points, np.tile(at, (len(points), 1))], axis=1))
        if v is None or not np.all(np.isfinite(v)):
            return None
        cols.append(v.real)
    J = np.stack(cols, axis=1)
    norms = np.linalg.norm(J, axis=0)
    J = J[:, norms > 0] / norms[norms > 0]
    if J.size == 0:
        return len(floats)
    sv = np.linalg.svd(J, compute_uv=False)
    return len(floats) - int(np.sum(sv > rtol * sv[0]))


class _Timeout(Exception):
    pass


def _limited(fn, seconds):
    """fn() cut off after ``seconds`` (raises _Timeout); unlimited off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return fn()

    def ring(signum, frame):
        raise _Timeout

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def symbolic_solution(model, eq, seconds=SYMPY_SECONDS):
    """SRBench's symbolic solution: True when the model (SymPy, over x0, x1, ...) equals the true
    formula up to fitted constants, i.e. model - truth or model / truth (nonzero) simplifies to a
    constant (constants that do not move the model are 0 first, powers of a fitted number are
    exponentials, and constants near a simple number are that number: drop_dust, exp_form,
    snap_constants); None when SymPy did not decide within
    ``seconds``."""
    import sympy
    xs = {sympy.Symbol(f"x{i}"): s for i, s in enumerate(eq.symbols)}
    m = sympy.sympify(model).xreplace(xs)
    t = eq.expr
    if m.free_symbols - set(eq.symbols):
        raise ValueError(f"the model mentions unknown symbols {m.free_symbols - set(eq.symbols)}")
    lo = np.array([v[1] for v in eq.variables])
    hi = np.array([v[2] for v in eq.variables])
    points = np.random.default_rng(0).uniform(lo, hi, (64, eq.n_inputs))
    m = snap_constants(exp_form(drop_dust(m, eq.symbols, points)))
    candidates = [(m - t, False), (m / t, True)]
    # a quick numeric screen: neither flat means neither is a constant, whatever SymPy says
    flat = [_numerically_constant(c, eq.symbols, points) for c, _ in candidates]
    if not any(f is not False for f in flat):
        return False

    def decide():
        for (c, is_ratio), f in zip(candidates, flat):
            if f is False:
                continue
            s = sympy.simplify(c)
            if not s.free_symbols and s.is_finite is not False and not (is_ratio and s == 0):
                return True
        return False

    try:
        return _limited(decide, seconds)
    except _Timeout:
        return None


# -- runs and the report ------------------------------------------------------------------------

def run_one(method, eq, seed, noise, budget, n=N_SAMPLES):
    """One run: fit on the (noisy) training set within the budget, score on the clean test set."""
    X, y, Xt, yt = make_data(eq, seed, noise, n)
    units = {"units": eq.units_by_column} if method in UNIT_METHODS else {}
    row, expr = fit_and_score(method, X, y, Xt, yt, budget, seed, **units)
    return {"equation": eq.id, "n_inputs": eq.n_inputs, "noise": noise, "samples": n, **row,
            "symbolic": symbolic_solution(expr, eq), "redundant": _redundant(expr, eq, X)}


REDUNDANCY_POINTS = 500  # training points the redundancy check evaluates the model at


def _redundant(expr, eq, X):
    import sympy
    xs = sympy.symbols(f"x0:{eq.n_inputs}")
    return redundant_parameters(expr, xs, X[:REDUNDANCY_POINTS])


def rescore(path):
    """Recompute every run's ``symbolic`` and ``redundant`` from its recorded model (on its
    training data, made again from the run's seed) and rewrite the file."""
    import sympy
    eqs = {e.id: e for e in load_equations()}
    rows = read_rows(path)
    for r in rows:
        eq, expr = eqs[r["equation"]], sympy.sympify(r["model"])
        r["symbolic"] = symbolic_solution(expr, eq)
        X = make_data(eq, r.get("seed", 0), float(r.get("noise", 0.0)),
                      r.get("samples", N_SAMPLES))[0]
        r["redundant"] = _redundant(expr, eq, X)
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _key(r):
    return (r["method"], r["equation"], r["seed"], float(r["noise"]), float(r["budget"]),
            r.get("samples", N_SAMPLES))


def summary(rows):
    """(runs, solved, symbolic, median SymPy size, median wall) of a group of runs."""
    n = len(rows)
    return (n, sum(r["test_r2"] > SOLVED_R2 for r in rows), sum(bool(r["symbolic"]) for r in rows),
            float(np.median([r["sympy_size"] for r in rows])) if n else float("nan"),
            float(np.median([r["wall"] for r in rows])) if n else float("nan"))


def _methods(rows):
    """The methods of ``rows``, in the report's order."""
    seen = {r["method"] for r in rows}
    return [m for m in FEYNMAN_METHODS if m in seen] + sorted(seen - set(FEYNMAN_METHODS))


def _group(rows, method, label):
    """The runs of ``method`` in the stratum ``label`` of inputs ("all": every stratum)."""
    return [r for r in rows if r["method"] == method
            and (label == "all" or stratum(r["n_inputs"]) == label)]


def report(rows):
    """Markdown tables: per noise level, each method by stratum of inputs and overall."""
    methods = _methods(rows)
    out = []
    for noise in sorted({float(r["noise"]) for r in rows}):
        at = [r for r in rows if float(r["noise"]) == noise]
        budgets = sorted({r["budget"] for r in at})
        out += [f"noise {noise:g} (budget {', '.join(f'{b:g}' for b in budgets)} s, "
                f"{len({r['equation'] for r in at})} equations, "
                f"seeds {', '.join(str(s) for s in sorted({r['seed'] for r in at}))})", "",
                "| inputs | method | runs | solved (R² > 0.999) | symbolic solution | "
                "median size | median wall s | redundant parameter |",
                "|---|---|--:|--:|--:|--:|--:|--:|"]
        for label in [s[0] for s in STRATA] + ["all"]:
            for m in methods:
                rs = _group(at, m, label)
                if not rs:
                    continue
                n, solved, sym, size, wall = summary(rs)
                checked = [r["redundant"] for r in rs if r.get("redundant") is not None]
                red = f"{sum(k > 0 for k in checked)} of {len(checked)}" if checked else "-"
                out.append(f"| {label} | {m} | {n} | {solved} ({solved / n:.0%}) | "
                           f"{sym} ({sym / n:.0%}) | {size:g} | {wall:.1f} | {red} |")
        out.append("")
    return "\n".join(out)


METHOD_COLORS = {"ndvm": "#1f77b4", "ndvm-units": "#17becf", "operon-lm": "#d62728",
                 "operon": "#ff7f0e", "gplearn": "#7f7f7f"}


def plot(rows, path):
    """A figure of a run file (needs matplotlib), one row of panels per noise level: (left) the
    share of runs solved (R² > 0.999, light bar) and symbolic (dark part of the bar) for each
    method, by number of inputs and overall, with the counts written over the bars; (right) each
    run's model size in SymPy nodes against its test error 1 - R² (log scale; the dotted line is
    the solved threshold). Returns the matplotlib Figure; writes it to ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    methods = _methods(rows)
    levels = sorted({float(r["noise"]) for r in rows})
    if not levels:
        raise ValueError("no runs to plot")
    labels = [s[0] for s in STRATA] + ["all"]
    fig, axes = plt.subplots(len(levels), 2, figsize=(12, 4.2 * len(levels)), squeeze=False,
                             gridspec_kw={"width_ratios": [1.15, 1]})
    width = 0.8 / len(methods)
    for (bars, scatter), noise in zip(axes, levels):
        at = [r for r in rows if float(r["noise"]) == noise]
        budgets = ", ".join(f"{b:g}" for b in sorted({r["budget"] for r in at}))
        for j, m in enumerate(methods):
            color = METHOD_COLORS.get(m, f"C{j}")
            for i, label in enumerate(labels):
                rs = _group(at, m, label)
                if not rs:
                    continue
                n, solved, sym, _, _ = summary(rs)
                x = i + (j - (len(methods) - 1) / 2) * width
                bars.bar(x, solved / n, width * 0.92, color=color, alpha=0.35,
                         label=f"{m}: solved" if i == 0 else None)
                bars.bar(x, sym / n, width * 0.92, color=color,
                         label=f"{m}: symbolic" if i == 0 else None)
                bars.text(x, solved / n + 0.015, f"{solved}/{sym}\nof {n}", ha="center",
                          va="bottom", fontsize=7)
            pts = [(max(1.0 - r["test_r2"], 1e-16), r["sympy_size"]) for r in at
                   if r["method"] == m and np.isfinite(r["test_r2"])]
            if pts:
                err, size = np.array(pts).T
                scatter.scatter(size, err, s=14, alpha=0.6, color=color, label=m,
                                edgecolors="none")
        bars.set_xticks(range(len(labels)), [f"{lab} inputs" if lab != "all" else "all"
                                             for lab in labels])
        bars.set_ylim(0, 1.4)
        bars.set_yticks(np.linspace(0, 1, 6))
        bars.set_ylabel("share of runs")
        bars.set_title(f"noise {noise:g}, {budgets} s a run: solved (light), symbolic (dark); "
                       "counts solved/symbolic of runs",
                       fontsize=10)
        bars.legend(fontsize=7, ncol=len(methods), loc="upper center", frameon=False)
        scatter.axhline(1 - SOLVED_R2, color="k", lw=0.8, ls=":")
        scatter.set_yscale("log")
        scatter.set_xscale("log")
        scatter.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([2, 5, 10, 20, 50, 100]))
        scatter.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        scatter.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        scatter.set_xlabel("model size (SymPy nodes)")
        scatter.set_ylabel("test error 1 - R² (exact fits drawn at 1e-16)")
        scatter.set_title(f"noise {noise:g}: size against error, one point a run", fontsize=10)
        scatter.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return fig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(FEYNMAN_METHODS))
    ap.add_argument("--equations", default="all", help="comma list of ids, or 'all'")
    ap.add_argument("--quick", type=int, metavar="K",
                    help="a stratified subset: K equations per stratum of inputs (1-2, 3-4, 5+)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--noise", default=",".join(f"{v:g}" for v in NOISE_LEVELS))
    ap.add_argument("--budget", type=float, default=30.0, help="wall seconds per run")
    ap.add_argument("--samples", type=int, default=N_SAMPLES, help="points per data set")
    ap.add_argument("--out", help="append one JSON line per run here (runs already there are "
                    "skipped)")
    ap.add_argument("--report", nargs="*", help="print the tables of these result files and exit")
    ap.add_argument("--plot", metavar="PNG", help="with --report: also draw the runs "
                    "(solved and symbolic shares by inputs, size against error) to this file "
                    "(needs matplotlib: pip install ndvm[plot])")
    ap.add_argument("--rescore", nargs="*", help="decide again whether each run's model is a "
                    "symbolic solution (after a change to the check) and rewrite these files")
    args = ap.parse_args(argv)
    if args.plot and not args.report:
        ap.error("--plot draws the runs of --report FILE ...: give the result files")
    if args.report:
        rows = [r for f in args.report for r in read_rows(f)]
        print(report(rows))
        if args.plot:
            try:
                plot(rows, args.plot)
            except ImportError:
                print("the plot needs matplotlib: pip install ndvm[plot]", file=sys.stderr)
                return 1
            print(f"wrote {args.plot}", file=sys.stderr)
        return 0
    if args.rescore:
        for path in args.rescore:
            rescore(path)
        return 0
    eqs = load_equations()
    if args.equations != "all":
        wanted = args.equations.split(",")
        unknown = set(wanted) - {e.id for e in eqs}
        if unknown:
            ap.error(f"unknown equations: {', '.join(sorted(unknown))}")
        eqs = [e for e in eqs if e.id in wanted]
    if args.quick:
        eqs = quick_subset(eqs, args.quick)
    seeds = [int(s) for s in args.seeds.split(",")]
    levels = [float(v) for v in args.noise.split(",")]
    methods = args.methods.split(",")
    done = {_key(r) for r in read_rows(args.out)} if args.out else set()
    warm_up(methods)
    sink = Sink(args.out)
    rows = [r for r in read_rows(args.out)] if args.out else []
    try:
        for eq in eqs:  # methods interleaved, so each sees the same machine load
            for seed in seeds:
                for noise in levels:
                    for method in methods:
                        key = (method, eq.id, seed, noise, args.budget, args.samples)
                        if key in done:
                            continue
                        row = run_one(method, eq, seed, noise, args.budget, args.samples)
                        rows.append(row)
                        sink.write(row)
                        print(f"{method:10s} {eq.id:10s} k={eq.n_inputs} seed {seed} noise "
                              f"{noise:g}  R2 {row['test_r2']:.6f}  symbolic {row['symbolic']}  "
                              f"size {row['sympy_size']:3d}  {row['wall']:.1f}s  "
                              f"{row['model'][:70]}", file=sys.stderr, flush=True)
    finally:
        sink.close()
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
