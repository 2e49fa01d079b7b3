"""The runner the symbolic-regression benches share (srbench.py, feynman.py): one fit of one
method within a wall budget on one core, scored the same way for every method (test R², size in
SymPy nodes, wall and CPU time), and the JSON-lines files their runs are appended to.

Import this module before numpy: it pins the BLAS/OpenMP pools to one thread.
"""
import json
import math
import os
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

METHODS = ("ndvm", "operon", "operon-lm", "gplearn")
UNIT_METHODS = ("ndvm-units",)  # given the units of the inputs and the target (feynman.py)
SOLVED_R2 = 0.999


def r2(y, p):
    """Coefficient of determination; -inf when the prediction is not finite."""
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    if p.size != y.size or not np.all(np.isfinite(p)):
        return -math.inf
    return 1.0 - float(np.sum((y - p) ** 2)) / float(np.sum((y - y.mean()) ** 2))


def sympy_size(expr):
    """A common size for every method: the nodes of the SymPy expression tree."""
    import sympy
    return sum(1 for _ in sympy.preorder_traversal(expr))


ISLANDS = 4  # ndvm-islands: populations (one core: their epochs one after the other)
ISLAND_EPOCH = 64  # candidates an island proposes between migrations


def run_ndvm(X, y, budget, seed, max_candidates=None, islands=1, units=None):
    import ndvm
    m = ndvm.SymbolicRegressor(budget=budget, max_candidates=max_candidates, random_state=seed,
                               workers=1, islands=islands, migration_every=ISLAND_EPOCH,
                               units=units).fit(X, y)
    return m, m.size_, m.sympy


def is_simplified(model, params):
    """True when ndvm's simplifier leaves the returned model as it is (a fixpoint)."""
    from ndvm.cosearch.sexpr import to_source, to_tree
    from ndvm.cosearch.simplify import simplify
    return to_source(simplify(to_tree(model), params)) == model


OPERON_SYMBOLS = "add,sub,mul,div,constant,variable,sin,cos,exp,log,sqrt,square,tanh"


def run_operon(X, y, budget, seed, iterations=0):
    import sympy
    from pyoperon.sklearn import SymbolicRegressor
    m = SymbolicRegressor(allowed_symbols=OPERON_SYMBOLS, n_threads=1,
                          max_time=max(1, int(round(budget))), random_state=seed,
                          optimizer_iterations=iterations)
    m.fit(X, y)
    text = m.get_model_string(m.model_, 16)
    names = {f"X{i + 1}": sympy.Symbol(f"x{i}") for i in range(X.shape[1])}
    return m, int(m.model_.Length), lambda: sympy.sympify(text.replace("^", "**"), locals=names)


def run_gplearn(X, y, budget, seed):
    """gplearn has no time limit: grow the run one generation at a time until the budget."""
    import sympy
    from gplearn.genetic import SymbolicRegressor
    fs = ("add", "sub", "mul", "div", "log", "sqrt", "sin", "cos")  # SRBench's set (+ protected)
    m = SymbolicRegressor(population_size=1000, generations=1, function_set=fs,
                          random_state=seed, warm_start=True, n_jobs=1, parsimony_coefficient=0.001)
    t0 = time.perf_counter()
    gen = 1
    while True:
        m.set_params(generations=gen)
        m.fit(X, y)
        gen += 1
        if time.perf_counter() - t0 >= budget or m._program.raw_fitness_ < 1e-12:
            break
    ops = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b, "log": lambda a: sympy.log(sympy.Abs(a)),
           "sqrt": lambda a: sympy.sqrt(sympy.Abs(a)), "sin": sympy.sin, "cos": sympy.cos}
    ops.update({f"X{i}": sympy.Symbol(f"x{i}") for i in range(X.shape[1])})
    return m, int(m._program.length_), lambda: sympy.sympify(str(m._program), locals=ops)


RUNNERS = {
    "ndvm": run_ndvm,
    "ndvm-islands": lambda X, y, budget, seed: run_ndvm(X, y, budget, seed, islands=ISLANDS),
    "ndvm-units": lambda X, y, budget, seed, units: run_ndvm(X, y, budget, seed, units=units),
    "operon": run_operon,
    "operon-lm": lambda X, y, budget, seed: run_operon(X, y, budget, seed, iterations=10),
    "gplearn": run_gplearn,
}


def fit_and_score(method, X, y, Xt, yt, budget, seed, max_candidates=None, units=None):
    """Fit ``method`` on (X, y) within ``budget`` seconds and score it on (Xt, yt): (row, expr),
    the row's fields JSON-ready and expr the model as SymPy over x0, x1, ...
    ``max_candidates`` (ndvm and ndvm-islands only; budget None): a search of that many
    candidates, the same whatever the machine's load. ``units`` (the UNIT_METHODS' only, which
    need it): the units of the columns of X and of y, {"x0": unit, ..., "target": unit}."""
    if method not in RUNNERS:
        raise ValueError(f"unknown method {method!r} (one of {', '.join(RUNNERS)})")
    if (units is not None) != (method in UNIT_METHODS):
        raise ValueError(f"{method!r} takes units" if units is None else
                         f"{method!r} takes no units (only {', '.join(UNIT_METHODS)} do)")
    if max_candidates is not None and method not in ("ndvm", "ndvm-islands"):
        raise ValueError(f"max_candidates is ndvm's only, not {method!r}'s")
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if units is not None:
        m, size, expr = RUNNERS[method](X, y, budget, seed, units)
    elif max_candidates is None:
        m, size, expr = RUNNERS[method](X, y, budget, seed)
    else:
        m, size, expr = run_ndvm(X, y, budget, seed, max_candidates,
                                 islands=ISLANDS if method == "ndvm-islands" else 1)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    expr = expr()
    with np.errstate(all="ignore"):
        p_test, p_train = m.predict(Xt), m.predict(X)
    row = {"method": method, "seed": seed, "budget": budget, "wall": round(wall, 2),
           "cpu": round(cpu, 2), "train_r2": r2(y, p_train), "test_r2": r2(yt, p_test),
           "size": size, "sympy_size": sympy_size(expr), "model": str(expr)}
    if max_candidates is not None:
        row["max_candidates"] = max_candidates
    if method.startswith("ndvm"):
        from ndvm.estimator import PARAMS
        row["simplified"] = is_simplified(m.program_, PARAMS)
    return row, expr


def warm_up(methods):
    """Imports and first-call costs are paid once, before any timed run."""
    import sympy  # noqa: F401
    X = np.linspace(0.1, 1, 10).reshape(-1, 1)
    if any(m.startswith("ndvm") for m in methods):
        import ndvm
        ndvm.SymbolicRegressor(budget=None, max_candidates=16).fit(X, X[:, 0])
    if any(m.startswith("operon") for m in methods):
        import pyoperon.sklearn  # noqa: F401
    if "gplearn" in methods:
        import gplearn.genetic  # noqa: F401


def read_rows(path):
    """The runs recorded in a JSON-lines file (none when it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


class Sink:
    """Appends one JSON line per run and flushes it, so an interrupted run keeps what it did."""

    def __init__(self, path):
        self.f = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.f = open(path, "a", encoding="utf-8")

    def write(self, row):
        if self.f:
            self.f.write(json.dumps(row) + "\n")
            self.f.flush()

    def close(self):
        if self.f:
            self.f.close()
