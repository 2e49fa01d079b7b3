"""Model selection over the Pareto front: k-fold cross-validation and the one-standard-error rule,
widened by the search's optimism.

The search's front trades held-out error against size, but a held-out set of a few points is a
noisy judge (with 20 points the search scores on 6). So every front member is cross-validated on
all the data, or on a seeded subset of CV_POINTS of them when there are more (K = min(5, N)
folds; each fold refitted by Levenberg-Marquardt from the member's fitted parameters and from
independent draws around zero, keeping the lowest loss on the fold's training points), and the chosen model is the smallest one whose CV error is within one
standard error of the lowest CV error (Breiman et al. 1984; Hastie, Tibshirani & Friedman, ESL
7.10), or within the search's optimism when that is wider: the front's members were chosen among
thousands of programs scored on these same points, so the lowest CV error belongs to a program
that fitted their noise best, and sits below what it would be on new points by about
2 sqrt(ln K / n) of itself (``search_optimism``; K programs, n points: 79% for the damped task's
64 points and ~20,000 programs, where one standard error let 33-node models through that beat
the true law only on these points; 14% on 2,000 points). CV errors below 1e-12 of the target's
variance count as exact (rounding decides nothing).
The choice is then refitted on all the data, and parameters that landed on integers (within
1e-6, e.g. 1.0000000002 or 3e-17) are written as those integers and the model simplified again
when that costs no accuracy (``snap``); then parameters within SIMPLE_RTOL of an integer or a
half up to SIMPLE_MAX (a 0.9976 or a 0.4999 fitted through noise) are set to it and the rest refitted, when the
error grows by less than the chosen member's CV standard error (``simple_constants``: a model
with fewer free constants that the data cannot tell apart, by the same rule that chose it) and
by less than the likelihood-ratio test of the constraint allows (chi-square's 95% quantile times
the noise variance: a constant the data pin down away from the simple number keeps its value).
Neither happens with ``simple=False`` (``ndvm.search(simple_constants=False)``, ``ndvm search
--fitted-constants``, ``SymbolicRegressor(simple_constants=False)``): the constants as fitted.
A choice whose final fit cannot tell some of its parameters apart (``unidentifiable``: the
Jacobian in them rank-deficient to machine precision, e.g. sqrt(x + a) sqrt(y + b) - c with a
and b run off to 1e7, where it is a plane) is passed over and the rule applied to the rest.
Likelihood tasks keep the lowest NLL.
"""
import functools
import math

import numpy as np

import ndvm
from ndvm._core._core import record_fitness as fitness  # (the ranking's rule: native)
from ndvm.cosearch.sexpr import atoms as _atoms
from ndvm.cosearch.sexpr import size as tree_size
from ndvm.cosearch.sexpr import substitute, to_source, to_tree
from ndvm.cosearch.simplify import PARAM_MARK, simplify
from ndvm.cosearch.task import SEARCH_LM_SCALING, named_in, predict, r_squared, subset_rows

__all__ = ["cross_validate", "fitness", "refit", "search_optimism", "select", "snap",
           "standard_errors", "start_rows", "starts_around", "unidentifiable"]

RULE = "one-standard-error rule over K-fold cross-validation, widened by the search's optimism"
EXACT = 1e-12
CV_STARTS = 8  # LM starts per fold: the member's fit and 7 independent draws (``starts_around``)
# points the cross-validation uses at most: a seeded subset of larger data (plenty to rank a
# front; the chosen model is then refitted on every point). The selection's cost then stays a
# small share of an estimator's time budget however large the data.
CV_POINTS = 2000
SIMPLE_RTOL = 0.02  # a fitted value this close (relative) to an integer or a half is tried at it
SIMPLE_MAX = 5      # (of magnitude at most this)


def cv_rows(n, seed=0):
    """The rows the cross-validation uses: all n, or a seeded sorted subset of CV_POINTS."""
    return subset_rows(n, CV_POINTS, seed)


_AROUND = np.array([0.3, 1.0, 3.0])  # starts_around's standard deviations, in turn


def starts_around(params, names, starts, seed):
    """name -> [starts] LM starting values: ``params`` first, then seeded normal draws with
    standard deviations cycling through 0.3, 1 and 3 (shifts and rates far from the first
    start's basin): the rows of ``start_rows``."""
    out = start_rows(params, names, starts, seed)
    return {n: out[i] for i, n in enumerate(names)}


def start_rows(params, names, starts, seed):
    """``starts_around``'s values as one [len(names), starts] float64 array, a row a name (what
    ``FitSetup.begin`` stages as they are: its ``starts``)."""
    rng = np.random.default_rng(seed)
    out = np.empty((len(names), starts))
    out[:, 0] = [params[n] for n in names]
    # (one call draws, name after name, what a normal(0, scale) call per name drew: the same
    # standard normals in the same order, each times its scale)
    out[:, 1:] = rng.standard_normal((len(names), starts - 1))
    out[:, 1:] *= _around(starts - 1)
    return out


@functools.lru_cache(maxsize=8)
def _around(n):
    """The first n of starts_around's standard deviations (read-only: shared by every call)."""
    a = np.resize(_AROUND, n)
    a.flags.writeable = False
    return a


def refit(prog, names, inputs, target, init, ev, steps=40, starts=1, seed=0, consts=None):
    """Parameters refitted by LM on (inputs, target) from ``init`` (kept if the refit is worse);
    with ``starts`` > 1 also from ``starts_around(init)``'s draws, the lowest loss winning.
    ``consts``: the task's shared constants (here and below: every function that runs a model
    takes them)."""
    with np.errstate(all="ignore"):
        base = float(np.mean((predict(ev, prog, init, inputs, consts) - target) ** 2))
    if not names:
        return dict(init), base
    data = named_in(inputs, prog)
    try:
        r = ndvm.fit(prog, data=data, target=target, params=names, starts=starts,
                     consts=named_in(consts, prog) if consts else None,
                     init=starts_around(init, names, starts, seed),
                     optimizer="lm", steps=steps, evaluator=ev, unused_data="ignore",
                     scaling=SEARCH_LM_SCALING)
    except Exception:  # noqa: BLE001 - a refit that cannot run keeps the given parameters
        return dict(init), base
    if math.isfinite(r.loss) and (not math.isfinite(base) or r.loss <= base):
        return dict(r.params), float(r.loss)
    return dict(init), base


def unidentifiable(model, params, inputs, target, ev, consts=None):
    """The parameters of ``model`` (at ``params``) that the data cannot determine
    (``FitResult.undetermined`` of one LM step from there: the Jacobian in the parameters
    rank-deficient to machine precision, a parameter that moves nothing or two that trade off
    exactly, such as a fit run off to a degenerate limit); [] when the check cannot run."""
    prog = ndvm.parse(model)
    names = tuple(n for n in params if n in prog.free_names)
    if not names:
        return []
    data = named_in(inputs, prog)
    try:
        r = ndvm.fit(prog, data=data, target=target, params=names,
                     consts=named_in(consts, prog) if consts else None,
                     init={n: params[n] for n in names},
                     optimizer="lm", steps=1, evaluator=ev, unused_data="ignore",
                     uncertainty=True, scaling=SEARCH_LM_SCALING)
    except Exception:  # noqa: BLE001 - a check that cannot run flags nothing
        return []
    return list(r.undetermined)


def standard_errors(model, params, inputs, target, ev, consts=None):
    """name -> the standard error of each parameter of the fitted (``model``, ``params``) on
    (``inputs``, ``target``), as scipy.optimize.curve_fit's pcov and ndvm.fit's ``stderr`` give
    it: the square root of the diagonal of s^2 (J^T J)^-1, J the [N, P] Jacobian of the model's
    values at the N points in its P parameters, s^2 = RSS / (N - P); computed from the SVD of J
    with each column scaled to norm 1. None for a parameter the data cannot determine (J
    rank-deficient in it: a null direction of J, singular values up to N eps times the largest,
    has a component above 1e-6 on it) and for every parameter when N <= P or the fit has no
    finite error."""
    prog = ndvm.parse(model)
    names = [n for n in params if n in prog.free_names]
    out = dict.fromkeys(params)
    n = int(np.size(target))
    if not names or n <= len(names):
        return out
    try:
        with np.errstate(all="ignore"):
            r = ev.evaluate(prog, params={k: float(params[k]) for k in names},
                            data=named_in(inputs, prog),
                            consts=named_in(consts, prog) if consts else None, grad=True)
            value = np.broadcast_to(r.value[0], (n,))
            jac = r.jacobian()
            J = np.stack([np.broadcast_to(jac[k][0], (n,)) for k in names], axis=1)
            rss = float(np.sum((value - target) ** 2))
    except Exception:  # noqa: BLE001 - a model that cannot run here has no standard errors
        return out
    if not (math.isfinite(rss) and np.isfinite(J).all()):
        return out
    norms = np.linalg.norm(J, axis=0)
    scale = np.where(norms > 0, norms, 1.0)
    # (the thin SVD: the same singular values and V; the full one also made the N x N matrix U,
    # 450 MB and seconds for 7,500 points, a MemoryError beyond ~50,000: N > P here)
    _, sv, vt = np.linalg.svd(J / scale, full_matrices=False)
    sv = np.concatenate([sv, np.zeros(len(names) - sv.size)])
    floor = sv.max() * np.finfo(float).eps * max(n, len(names)) if sv.size else 0.0
    good = sv > floor
    bad = (norms == 0) | (np.abs(vt[~good]) > 1e-6).any(axis=0)
    s2 = rss / (n - len(names))
    var = (vt[good] ** 2 / sv[good, None] ** 2).sum(axis=0) * s2 / scale ** 2
    for j, k in enumerate(names):
        out[k] = None if bad[j] else float(np.sqrt(var[j]))
    return out


def cross_validate(prog, names, inputs, target, init, ev, k=5, seed=0, consts=None):
    """(CV mean squared error, its standard error) of a program over K folds.

    ``init`` was fitted on points that the folds hold out, so a fold refitted from it alone
    would start in a basin chosen by its own test points: a flexible model (a free frequency,
    say) then keeps a local minimum that passes near them and its CV error is too low. Each
    fold is therefore also fitted from independent draws, and the lowest training loss wins."""
    n = target.size
    k = max(2, min(k, n))
    folds = np.random.default_rng(seed).permutation(n) % k
    sq = np.empty(n)
    for f in range(k):
        tr, te = folds != f, folds == f
        params, _ = refit(prog, names, {a: v[tr] for a, v in inputs.items()}, target[tr],
                          init, ev, starts=CV_STARTS, seed=seed + f, consts=consts)
        with np.errstate(all="ignore"):
            p = predict(ev, prog, params, {a: v[te] for a, v in inputs.items()}, consts)
            sq[te] = (p - target[te]) ** 2
    if not np.all(np.isfinite(sq)):
        return math.inf, math.inf
    return float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0


def search_optimism(structures, n):
    """How far below its expectation the lowest CV error of a front tends to sit, as a share of
    it, when the search chose among ``structures`` programs on the same ``n`` points: a mean of n
    squared Gaussian errors has a relative standard deviation sqrt(2 / n), and the least of K
    such draws falls about sqrt(2 ln K) of those below their mean, so 2 sqrt(ln K / n). 0 for
    one structure; small for large n (64 points and 40,000 structures: 0.81; 2,000 points and
    the same: 0.14)."""
    if structures <= 1 or n <= 0:
        return 0.0
    return 2.0 * math.sqrt(math.log(structures) / n)


def front_stderr(task, front, ev=None):
    """Copies of the ``front``'s records, each with ``stderr``: its parameters' standard errors
    (``standard_errors``) on the points they were fitted on, the search's calibration points
    (``task.split("fit")``); least-squares tasks only (the front as it is otherwise)."""
    if task.objective != "mse" or not task.inputs:
        return list(front)
    ev = ev or ndvm.Evaluator()
    inputs, target = task.split("fit")
    return [dict(r, stderr=standard_errors(r["model"], r["params"], inputs, target, ev,
                                           task.consts)) for r in front]


def select(task, front, ev=None, k=5, structures=1, simple=True):
    """(chosen record, table of every candidate's CV score): see the module docstring.
    ``structures``: how many distinct programs the search scored (its selection's optimism).
    ``simple``: False keeps the chosen model's parameters as fitted (no ``snap``, no
    ``simple_constants``).

    The chosen record holds one program and its parameters: ``model`` (the front member's,
    with parameters at integers snapped) and ``params`` refitted on all the data; its
    ``train_error``, ``heldout_error`` and ``r2`` are that (model, params)'s on the search's two
    splits (the held-out points took part in the refit) and ``mse_all``/``r2_all`` on all the
    points. ``front_member`` is the front record it came from (its own model, training-split
    parameters and held-out scores) and ``selection`` explains the choice.
    """
    if not front:
        return None, []
    if task.objective != "mse" or not task.inputs:
        best = min(front, key=lambda r: r["heldout_error"])
        return dict(best, selection={"rule": "lowest value of the objective"}), []
    ev = ev or ndvm.Evaluator()
    inputs, target, consts = task.inputs, task.target, task.consts
    some = cv_rows(target.size)
    cv_inputs, cv_target = {a: v[some] for a, v in inputs.items()}, target[some]
    rows = []
    for rec in front:
        prog = ndvm.parse(rec["model"])
        names = tuple(rec["params"])
        cv, se = cross_validate(prog, names, cv_inputs, cv_target, rec["params"], ev, k=k,
                                consts=consts)
        rows.append({"id": rec["id"], "size": rec["size"], "cv_mse": cv, "cv_se": se})
    finite = [r for r in rows if math.isfinite(r["cv_mse"])]
    if not finite:
        best = min(front, key=lambda r: r["heldout_error"])
        return dict(best, selection={"rule": "lowest held-out error (no finite CV score)"}), rows
    var = float(np.var(target))
    optimism = search_optimism(structures, cv_target.size)
    degenerate = []  # (id, names): members whose final fit cannot tell some parameters apart
    while True:
        low = min(finite, key=lambda r: (r["cv_mse"], r["size"]))
        by_se, by_search = low["cv_mse"] + low["cv_se"], low["cv_mse"] * (1.0 + optimism)
        # errors below 1e-12 of the target's variance are rounding: such fits count as exact
        bar = max(by_se, by_search, EXACT * var)
        pick = min((r for r in finite if r["cv_mse"] <= bar),
                   key=lambda r: (r["size"], r["cv_mse"]))
        rec = next(r for r in front if r["id"] == pick["id"])
        prog = ndvm.parse(rec["model"])
        params, mse = refit(prog, tuple(rec["params"]), inputs, target, rec["params"], ev,
                            steps=100, consts=consts)
        if simple:
            snapped, size, params, mse = snap(rec["model"], params, inputs, target, mse, ev,
                                              tol=EXACT * var, consts=consts)
            model, size, params, mse, set_to = simple_constants(
                snapped, params, inputs, target, mse, ev, slack=pick["cv_se"], consts=consts)
        else:
            snapped = model = rec["model"]
            size, set_to = tree_size(to_tree(model)), {}
        lost = unidentifiable(model, params, inputs, target, ev, consts)
        if not lost or len(finite) == 1:
            break
        degenerate.append((rec["id"], lost))
        finite = [r for r in finite if r is not pick]
    within = (f"one standard error ({low['cv_se']:.3g})"
              if by_se >= by_search else
              f"the search's optimism ({optimism:.0%}, wider than one standard error: the "
              f"least of {structures} programs' errors on {cv_target.size} points sits about "
              f"that far below its expectation)")
    if bar > max(by_se, by_search):  # (the bar is exactness, not the lowest's error)
        why = (f"id {rec['id']} (size {rec['size']}, CV MSE {pick['cv_mse']:.4g}) is the "
               f"smallest front member whose CV MSE is below {EXACT:g} of the target's variance "
               f"({EXACT * var:.4g}: such fits count as exact; the lowest is {low['cv_mse']:.4g}, "
               f"id {low['id']}, size {low['size']}); refitted on all {target.size} points")
    else:
        why = (f"id {rec['id']} (size {rec['size']}, CV MSE {pick['cv_mse']:.4g}) is the "
               f"smallest front member within {within} of the lowest CV MSE "
               f"({low['cv_mse']:.4g}, id {low['id']}, size {low['size']}); refitted on all "
               f"{target.size} points")
    if degenerate:
        why += "; passed over, their fit unable to tell parameters apart: " + ", ".join(
            f"id {i} ({', '.join(names)})" for i, names in degenerate)
    if lost:
        why += f"; its own fit cannot tell {', '.join(lost)} apart (no other member is left)"
    if snapped != rec["model"]:
        why += f"; parameters at integers snapped: {snapped}"
    if set_to:
        why += (f"; {', '.join(f'{n} = {v:g}' for n, v in set_to.items())} set (the error "
                f"within one standard error, and the data unable to tell the value from the "
                f"fit's at 95%), the rest refitted: {model} (size {size})")
    chosen = _scored(task, rec, model, size, params, ev)
    chosen["stderr"] = standard_errors(model, params, inputs, target, ev, consts)
    loose = [n for n, se in chosen["stderr"].items()
             if se is not None and math.isfinite(params[n]) and se > abs(params[n])]
    if loose:  # (e.g. c = 12.25 +- 118: the data hardly tell those parameters' values)
        why += (f"; the data hardly determine {', '.join(loose)} (a standard error above the "
                f"value)")
    chosen["selection"] = {"rule": RULE, "folds": max(2, min(k, target.size)),
                           "cv_mse": pick["cv_mse"], "cv_se": pick["cv_se"],
                           "structures": structures, "optimism": optimism,
                           "lowest_cv_id": low["id"], "explanation": why}
    return chosen, rows


_MEMBER = ("id", "proposer", "island", "model", "params", "size", "train_error",
           "heldout_error", "r2")


def _scored(task, rec, model, size, params, ev):
    """The record of (``model``, ``params``), every error computed for that pair: on the
    search's training and held-out points and on all of them; ``rec`` (the front member it
    comes from) kept whole under ``front_member``."""
    y = task.target
    with np.errstate(all="ignore"):  # (one evaluation on every point, then each split's mean)
        sq = (predict(ev, ndvm.parse(model), params, task.inputs, task.consts) - y) ** 2
    train, held, every = (_finite(float(np.mean(sq[rows]))) for rows in
                          (task.train, task.heldout, slice(None)))
    var_held, var = float(np.var(y[task.heldout])), float(np.var(y))
    return {"id": rec["id"], "proposer": rec.get("proposer"), "proposed": rec.get("proposed"),
            **({"island": rec["island"]} if "island" in rec else {}),
            "model": model, "params": dict(params), "status": "ok", "size": size,
            "skeleton": rec.get("skeleton"), "train_error": train, "heldout_error": held,
            "r2": r_squared(held, var_held),
            "mse_all": every, "r2_all": 1.0 - every / var if var > 0 else None,
            "front_member": {k: rec[k] for k in _MEMBER if k in rec}}


def _finite(e):
    return e if math.isfinite(e) else math.inf


def _mse(prog, params, inputs, target, ev, consts):
    with np.errstate(all="ignore"):
        return _finite(float(np.mean((predict(ev, prog, params, inputs, consts) - target) ** 2)))


def snap(src, params, inputs, target, mse, ev, tol=0.0, consts=None):
    """(model, size, params, mse) with parameters within 1e-6 (absolute) of an integer written
    as that integer and the model simplified, kept only if its error stays within 1e-6 relative
    (+tol)."""
    # (absolute: past ~5e5 every double is within 1e-6 relative of an integer, and a fitted
    # 769475.3 or 9.17e13 lost its standard error as a literal)
    near = {n: float(round(v)) for n, v in params.items()
            if math.isfinite(v) and abs(v - round(v)) <= 1e-6}
    if not near:
        return src, tree_size(to_tree(src)), params, mse
    names = frozenset(params)
    for trial in [near] + [{n: v} for n, v in near.items()]:
        out = _substituted(src, trial, names - set(trial))
        if out is None:
            continue
        model = to_source(out)
        prog = ndvm.parse(model)
        kept = {n: v for n, v in params.items() if n in prog.free_names}
        e = _mse(prog, kept, inputs, target, ev, consts)
        if e <= mse * (1 + 1e-6) + tol:
            return model, tree_size(out), kept, e
    return src, tree_size(to_tree(src)), params, mse


def _simple_value(v):
    """The nonzero integer or half of magnitude at most SIMPLE_MAX within SIMPLE_RTOL
    (relative) of v, else None (a 28.3 is not a 28 any more than a 28.3 is: only small numbers
    are simpler written out)."""
    for c in (float(round(v)), round(2.0 * v) / 2.0):
        if c != 0 and abs(c) <= SIMPLE_MAX and abs(v - c) <= SIMPLE_RTOL * abs(c):
            return c
    return None


# chi-square's 95% quantiles for 1..10 degrees of freedom (constants set at once)
_CHI2_95 = (3.841, 5.991, 7.815, 9.488, 11.070, 12.592, 14.067, 15.507, 16.919, 18.307)


def _chi2_95(k):
    """chi-square's 95% quantile for k degrees of freedom (Wilson-Hilferty past the table)."""
    if k <= len(_CHI2_95):
        return _CHI2_95[k - 1]
    return k * (1.0 - 2.0 / (9 * k) + 1.6449 * math.sqrt(2.0 / (9 * k))) ** 3


def simple_constants(src, params, inputs, target, mse, ev, slack, consts=None):
    """(model, size, params, mse, {name: value set}): parameters near an integer or a half
    (_simple_value) written as it, the model simplified and its other parameters refitted by LM,
    one change at a time (all of them first, then each alone, greedily) while the error on
    (inputs, target) stays within ``slack`` of ``mse`` and the data cannot tell the values set
    from the fitted ones: the n points' squared error grows by less than chi-square's 95%
    quantile for that many constants times the noise variance ``mse`` (the likelihood-ratio
    test of the constraint; a 2.04 +- 0.005 on 2,000 points, 8.7 standard errors from 2, was
    set to 2 within the CV standard error, its partner refitted 2% off its value)."""
    n = int(np.size(target))
    fixed = {}
    size = tree_size(to_tree(src))
    while True:
        near = {n: c for n, v in params.items() if (c := _simple_value(v)) is not None
                and c != v}
        if not near:
            return src, size, params, mse, fixed
        for trial in [near] + ([{n: c} for n, c in near.items()] if len(near) > 1 else []):
            out = _substituted(src, trial, frozenset(params) - set(trial))
            if out is None:
                continue
            prog = ndvm.parse(to_source(out))
            rest = tuple(n for n in params if n in prog.free_names)
            new, e = refit(prog, rest, inputs, target, {n: params[n] for n in rest}, ev,
                           consts=consts)
            if e <= mse + min(slack, mse * _chi2_95(len(trial)) / max(n, 1)):
                src, size, params, mse = to_source(out), tree_size(out), new, e
                fixed.update(trial)
                break
        else:
            return src, size, params, mse, fixed


def _substituted(src, values, names):
    """The simplified tree of ``src`` with ``values`` written for their parameters (``names``
    the parameters left), or None when it does not parse or constants would merge into a new
    parameter (that needs a new fit, not a substitution)."""
    out = simplify(substitute(to_tree(src), values), names)
    if any(a == PARAM_MARK for a in _atoms(out)):
        return None
    try:
        ndvm.parse(to_source(out))
    except Exception:  # noqa: BLE001 - a substituted text that does not parse is not used
        return None
    return out
