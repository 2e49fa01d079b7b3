"""``ndvm.fit``: a whole calibration of a program's constants, run natively in one call.

S starts run as lanes of one evaluation (S x N lanes); each optimizer step is one batched native
evaluation plus a few operations per start in C++, with no Python in between. Every start stops
for a reason (``FitResult.status``), ``converged`` is True only when a tolerance test was met,
and least-squares fits carry the covariance and standard errors of their parameters.
The options are one ``FitOptions`` (``ndvm.fit_options``), checked when built; ``FitPlan`` is the
one place the data and target are checked and a FitResult is built: ``fit`` is a batch of one,
``ndvm.fit_many`` stages a chunk of programs and fits them in one native call.
"""
import functools
import re
import warnings
from dataclasses import MISSING, dataclass, field, fields

import numpy as np

from ndvm._core import AFTER_STATS, FitBatch, FitSpec, Program, after_numbers, bind, parse
from ndvm.evaluator import Evaluator
from ndvm.fit_options import (  # noqa: F401 - OPTIMIZERS, default_* re-exported (public before)
    OPTIMIZERS, FitOptions, default_optimizer, default_steps,
)

__all__ = ["EvaluateAfter", "FitOptions", "FitResult", "fit", "fit_with", "OPTIMIZERS", "STATUS"]

# FitResult.status codes (0..4 as scipy.optimize.least_squares); converged means 1..4.
STATUS = {
    -3: "degenerate",
    -2: "non-finite values",
    -1: "no further progress possible",
    0: "evaluation budget exhausted",
    1: "gtol met",
    2: "ftol met",
    3: "xtol met",
    4: "ftol and xtol met",
}


@dataclass
class FitResult:
    """The outcome of ``ndvm.fit``.

    params: the best start's parameters (name -> float); loss: its loss (the mean squared error,
    or the program's value for loss="value"); all_params: name -> [S] (each start's best point);
    all_losses: [S]; history: [steps, S] loss per evaluation (LM, L-BFGS: the accepted loss after
    each evaluation; Adam: the loss at each step; NaN after a start is retired for a non-finite
    loss or before it started); n_evals: batched evaluations of all starts together;
    converged: [S] bool, True only where a tolerance test (ftol, xtol, gtol) was met;
    status: [S] int, why each start stopped (see ``ndvm.fit.STATUS``: -3 degenerate, -2
    non-finite values, -1 no further progress possible, 0 evaluation budget exhausted, 1 gtol,
    2 ftol, 3 xtol, 4 ftol and xtol); message: the best start's stop reason in words, with any
    warning about its uncertainties; covariance: [P, P] covariance of the best start's
    parameters in ``names`` order (least squares only, else None): s^2 (J^T J)^-1 with
    s^2 = RSS / (N - P) as scipy.optimize.curve_fit's pcov; inf on the diagonal (NaN off it) for a
    parameter the data cannot determine; stderr: name -> standard error (sqrt of the covariance's
    diagonal), or None; all_covariance [S, P, P] and all_stderr [S, P]: the same per start;
    names: the fitted parameters, in order; after: with ``fit_many(..., after=EvaluateAfter(...))``
    the numbers of the fitted model's evaluation after the fit (``EvaluateAfter.read``), else None.
    """

    params: dict
    loss: float
    all_params: dict
    all_losses: np.ndarray
    history: np.ndarray
    n_evals: int
    converged: np.ndarray
    optimizer: str = "lm"
    names: tuple = field(default_factory=tuple)
    status: np.ndarray = None
    covariance: np.ndarray = None
    stderr: dict = None
    all_covariance: np.ndarray = None
    all_stderr: np.ndarray = None
    stop_info: tuple = field(default=None, repr=False)  # (flags [S, P], steps, tols)
    after: np.ndarray = field(default=None, repr=False)  # (see EvaluateAfter.read)

    @property
    def message(self):
        """Why the best start stopped, in words, with any warning about its uncertainties."""
        if self.stop_info is None or self.status is None:
            return ""
        flags, steps, tols = self.stop_info
        b = self.best_start
        return _message(self.status[b], self.optimizer, self.names, flags[b], steps, tols)

    @property
    def undetermined(self):
        """The parameters the data cannot determine at the best start (least squares with a
        covariance: a zero Jacobian column, or a direction of its null space to machine
        precision; their standard errors are inf), in ``names`` order; () when not known."""
        if self.stop_info is None or self.stop_info[0] is None or self.all_losses.size == 0:
            return ()
        return _undetermined(self.names, self.stop_info[0][self.best_start])

    @property
    def best_start(self):
        """Index of the start with the lowest loss."""
        return int(np.nanargmin(np.where(np.isfinite(self.all_losses), self.all_losses, np.inf)))

    @property
    def success(self):
        """Whether the best start converged (a tolerance test was met)."""
        return bool(self.converged[self.best_start])

    def __repr__(self):
        ps = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return (f"FitResult({self.optimizer}, loss={self.loss:.6g}, {ps}, "
                f"starts={self.all_losses.size}, evals={self.n_evals}, {self.message!r})")

    def __getstate__(self):
        # every field, as an eagerly built result holds them (a lazy one reads them now)
        state = {f.name: getattr(self, f.name) for f in _FIELDS}
        state.update((k, v) for k, v in self.__dict__.items() if k not in state and k != "_lazy")
        return state


class _LazyField:
    """A FitResult field of a result built natively (``FitOutputs.fit_result``), which holds
    only ``_lazy`` (an ``ndvm._core.LazyFit``): the field is read from the native outputs on
    first access and kept in the instance's ``__dict__``, which takes precedence from then on
    (and from the start for a result made by ``FitResult(...)``). On the class, the default."""

    __slots__ = ("default", "name")

    def __init__(self, name, default):
        self.name = name
        self.default = default

    def __get__(self, obj, cls=None):
        d = self.default if obj is None else obj.__dict__.get("_lazy")
        if d is MISSING or (obj is not None and d is None):
            raise AttributeError(f"'FitResult' object has no attribute {self.name!r}")
        if obj is None:
            return d
        value = obj.__dict__[self.name] = d.field(self.name)
        return value


_FIELDS = fields(FitResult)
for _f in _FIELDS:
    setattr(FitResult, _f.name, _LazyField(_f.name, _f.default))
del _f


@functools.lru_cache(maxsize=256)
def _standard_normals(seed, n):
    """The first n standard normals of default_rng(seed) (cached: co-search fits thousands of
    candidates with the same seed, and creating a generator costs more than a small fit)."""
    z = np.random.default_rng(seed).standard_normal(n)
    z.flags.writeable = False
    return z


def edit_distance(a, b):
    """Levenshtein distance between two strings (insertions, deletions, substitutions)."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def did_you_mean(name, candidates):
    """' (did you mean 'x'?)' for the closest candidate within edit distance 2 (and less than
    the name's length), else ''."""
    best = min(candidates, key=lambda c: (edit_distance(name, c), c), default=None)
    d = edit_distance(name, best) if best is not None else 99
    if d <= 2 and d < len(name):
        return f" (did you mean {best!r}?)"
    return ""


def _check_names(what, given, allowed, free_names):
    for name in given:
        if name in allowed:
            continue
        if name in free_names:
            raise ValueError(f"{what} given for {name!r}, which is not a fitted parameter "
                             f"(fitted: {', '.join(allowed) or 'none'})")
        raise ValueError(f"{what} given for {name!r}, which is not a free name of the program"
                         f"{did_you_mean(name, free_names)}; its free names are "
                         f"{', '.join(free_names) or '(none)'}")


def checked_data(data, target, nan_policy="raise", inputs_finite=True):
    """(arrays, y): the data inputs ``data`` (name -> values) as float64 arrays and the target
    (None without one) as a flat one, checked as ``ndvm.fit`` checks them: a target with
    points, each input a number or an array of one value a point, no NaN or inf (ValueError
    naming the input and the index), or with ``nan_policy="omit"`` the points where any is
    dropped. Without
    ``inputs_finite`` the inputs' values are not looked at (fit_many's shared data: a program
    that does not read an input does not care). A DataFrame is its columns; pandas objects of
    different indexes are refused (``_columns``)."""
    arrays = {k: _numbers(f"data input {k!r}", v) for k, v in _columns(data, target).items()}
    y = None
    if target is not None:
        y = _numbers("target", target).reshape(-1)
        if y.size == 0:
            raise ValueError("target is empty")
        for name, a in arrays.items():
            if a.size != y.size and a.ndim:  # (a number, not an array, is every point's value)
                raise ValueError(f"data input {name!r} has {a.size} point{'s' * (a.size != 1)} "
                                 f"but target has {y.size}" + (
                                     " (a value shared by every point is given as a number, "
                                     "not an array of one)" if a.size == 1 else ""))
        if nan_policy == "omit":
            keep = finite_rows(y, arrays if inputs_finite else {})
            if not keep.any():
                raise ValueError("no data point is finite in the target and every data input")
            if not keep.all():
                y = y[keep]
                arrays = {k: (a.reshape(-1)[keep] if a.size > 1 else a)
                          for k, a in arrays.items()}
        _check_finite("target", y)
    for name, a in arrays.items() if inputs_finite else ():
        _check_finite(f"data input {name!r}", a)
    return arrays, y


def _numbers(what, values):
    """``values`` as a float64 array, or a ValueError that names ``what`` (complex values too:
    their imaginary parts were dropped with only numpy's ComplexWarning)."""
    if np.iscomplexobj(values):
        raise ValueError(f"{what} is complex: ndvm fits real numbers (give the real part, "
                         f"the modulus, or the two parts as two inputs)")
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} is not numbers: {e}") from None


def finite_rows(y, arrays):
    """The points nan_policy="omit" keeps: finite in the target ``y`` and in every per-point
    data array (a scalar input applies to every point and is checked on its own)."""
    keep = np.isfinite(y)
    for a in arrays.values():
        a = np.asarray(a)
        if a.size == y.size and a.size > 1:
            keep &= np.isfinite(a.reshape(-1))
    return keep


def _all_finite(a):
    """Whether every value of ``a`` is finite (one pass when they are: their sum is finite)."""
    total = float(np.add.reduce(a, axis=None))  # NaN or inf unless every value is finite
    return total - total == 0.0 or bool(np.isfinite(a).all())  # (or the sum overflowed)


def _check_finite(what, a, advice=None):
    if not _all_finite(a):
        i = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
        raise ValueError(f"{what} has a non-finite value ({a.reshape(-1)[i]}) at index {i}; "
                         + (advice or "remove it, or pass nan_policy='omit' (ndvm fit: "
                            "--nan-policy omit) to drop such points"))


def _initial_values(names, S, init, bounds, seed):
    if not init and not bounds and isinstance(seed, (int, np.integer)):
        # every start drawn from normal(0, 0.3): the same stream as the general path below
        return 0.0 + 0.3 * _standard_normals(int(seed), len(names) * S).reshape(len(names), S)
    if init and not bounds and _given_rows(names, S, init):  # (the co-search's per-candidate
        # starts: a row of S drawn values a name, stacked and checked at once)
        out = np.array([init[n] for n in names], dtype=np.float64)
        if _all_finite(out):
            return out
    # (a generator is made only when a draw is needed, where the seed is a valid number: a
    # candidate whose every start is given, as the co-search stages them, makes none)
    lazy = isinstance(seed, (int, np.integer)) and seed >= 0
    rng = None if lazy else np.random.default_rng(seed)
    out = np.empty((len(names), S), dtype=np.float64)
    for i, name in enumerate(names):
        if init is not None and name in init:
            v = np.asarray(init[name], dtype=np.float64)
            if v.ndim > 1 or (v.ndim == 1 and v.size not in (1, S)):
                raise ValueError(f"init[{name!r}] must be a scalar or have {S} values, "
                                 f"got shape {v.shape}")
            out[i] = v.reshape(-1) if v.ndim == 1 and v.size == S else float(v.reshape(-1)[0])
            _check_finite(f"init[{name!r}]", out[i], "a start is a finite number (nan_policy "
                          "drops data points, not starts)")
            continue
        if rng is None:
            rng = np.random.default_rng(seed)
        if bounds is not None and name in bounds and None not in bounds[name] and np.all(
                np.isfinite(bounds[name])):
            lo, hi = bounds[name]
            out[i] = rng.uniform(lo, hi, S)
        else:
            out[i] = rng.normal(0.0, 0.3, S)  # the paper's protocol
    return out


def _given_rows(names, S, init):
    """Whether ``init`` gives every name of ``names`` a float64 row of its S starts (then
    ``_initial_values`` stacks them; a non-finite one takes the general path, which names
    it)."""
    for n in names:
        v = init.get(n)
        if type(v) is not np.ndarray or v.dtype != np.float64 or v.shape != (S,):
            return False
    return True


def _undetermined(names, flags):
    """The names whose flag says the data cannot determine them (bit 1, set by the native
    covariance: fit/lsq.hpp)."""
    return tuple(n for n, f in zip(names, flags) if f & 1)


def _message(status, optimizer, names, flags, steps, tols):
    ftol, xtol, gtol = tols
    text = {
        -3: "degenerate: the fit stopped where {vanished} no longer affect(s) the model (its "
            "Jacobian column is zero there, e.g. an exponential that underflowed); the point "
            "is not a trustworthy fit",
        -2: "non-finite values: the loss or its gradient is not finite at the start point, or "
            "at every point tried next to the returned one",
        -1: "no further progress possible: no step reduces the loss (the line search or the "
            "trust region reached its limit at machine precision)",
        0: ("ran the requested {steps} Adam steps without meeting gtol={gtol:g} (Adam has no "
            "other convergence test)" if optimizer == "adam" else
            "the evaluation budget (steps={steps}) ran out before a tolerance was met; raise "
            "steps or try other starts"),
        1: ("gtol={gtol:g} met: the cosine between the residuals and every Jacobian column is "
            "below it" if optimizer == "lm" else
            "gtol={gtol:g} met: the largest gradient component is below gtol * max(1, |loss|)"),
        2: "ftol={ftol:g} met: the relative reduction of the loss is below it",
        3: "xtol={xtol:g} met: the relative step (trust-region radius) is below it",
        4: "ftol={ftol:g} and xtol={xtol:g} met",
    }[int(status)]
    vanished = ", ".join(n for n, f in zip(names, flags) if f & 2) or "a parameter"
    msg = text.format(steps=steps, ftol=ftol, xtol=xtol, gtol=gtol, vanished=vanished)
    held = [n for n, f in zip(names, flags) if f & 4]
    if held:  # (flag 4, set natively: fit/driver.hpp)
        msg += (f"; {', '.join(held)} ended at a bound (the stop tests leave out a parameter "
                f"held there, and a standard error treats it as free)")
    unident = _undetermined(names, flags)
    if unident:
        msg += (f"; {', '.join(unident)} cannot be determined from the data (the Jacobian is "
                f"rank-deficient there): standard error inf")
    return msg


def fit(prog, data=None, target=None, params=None, starts=1, init=None, optimizer=None,
        steps=None, lr=0.05, loss="mse", bounds=None, seed=0, client="dmci", consts=None,
        dtype="float64", evaluator=None, tol=None, ftol=None, xtol=None, gtol=None,
        positive=(), uncertainty=None, nan_policy="raise", unused_data="typo", scaling="both"):
    """Calibrate ``prog``'s parameters over ``starts`` starts, natively; returns a FitResult.

    prog: an ndvm.Program or source text. data: name -> [N] inputs (one value per data point; a
    number is every point's value), or a pandas DataFrame of such columns;
    target: [N] values to match (loss="mse"). consts: name -> number, vector or matrix shared
    by all lanes. params: names to fit (default: every free name not in data or consts).
    starts: number of starts S, run together as lanes. init: name -> scalar or [S] starting
    values (others drawn from a seeded normal(0, 0.3), or uniformly within finite ``bounds``);
    seed: for those draws. optimizer: "lm" (Levenberg-Marquardt, MINPACK's trust region: the
    choice for least squares), "lbfgs" (L-BFGS with a strong-Wolfe line search) or "adam"
    (torch.optim.Adam's update); default "lm" for loss="mse" and "lbfgs" for loss="value".
    steps: Adam: the number of steps; LM and L-BFGS: the budget of batched evaluations (every
    trial point counts), default 100 (P + 1) as MINPACK's (kept as ``FitOptions.adam_steps`` or
    ``FitOptions.max_evals``, which name what it counts). lr: Adam's learning rate.
    loss: "mse" (mean squared error against ``target``) or "value" (minimize the program's own
    value summed over data points, e.g. a negative log-likelihood; no target). bounds:
    name -> (low, high), None for an open side; every start stays inside the box (Adam and LM
    project onto it; L-BFGS holds variables on an active bound and never steps outside).
    positive: names optimized as logarithms, so they stay above zero (their init must be > 0).
    Stop tests (MINPACK's meanings for LM): ftol: the relative reduction of the loss (actual
    and predicted, LM; actual, L-BFGS) is at most ftol; xtol (LM): the trust-region radius is at
    most xtol times the scaled norm of the parameters (``tol`` is an older name for it); gtol:
    LM, the cosine of the angle between the residuals and every Jacobian column is at most gtol;
    L-BFGS and Adam, the largest projected gradient component is at most gtol * max(1, |loss|).
    scaling (LM): the shape of the trust region. "jac": MINPACK's, an ellipsoid scaled by the
    running maximum of the Jacobian's column norms, shrunk after a rejected step by Moré's
    interpolation (to 1/10..1/2 of it); "none": a sphere in the parameters, shrunk to 1/4 of a
    rejected step (scipy's least_squares "trf" without bounds); "both" (the default): every
    start runs both, as two lanes of the same batched evaluations, and keeps the one of lower
    loss (on a tie, the one that converged), with its status, history and uncertainties. The
    two regions take different paths across ridges and flat valleys, and which side of a ridge
    a shrunk step lands on is a matter of luck (Moré-Garbow-Hillstrom Beale from 100 x0: only
    "none" reaches the minimum; with a shrink to 0.3 instead of 0.25 of the step, "none" alone
    loses three fits that "jac" solves), so "both" succeeds wherever either does, for twice the
    lanes; n_evals counts the shared batched evaluations (until both lanes have stopped).
    uncertainty: compute the covariance and standard errors (loss="mse" only; default True for
    LM, which has the Jacobian at its optimum, and L-BFGS, which spends one more evaluation on
    it; False for Adam, whose few steps rarely end at an optimum). nan_policy: "raise" (NaN or inf in data or target is
    a ValueError) or "omit" (such points are dropped). unused_data: what a data name that is not
    a free name of the program does: "typo" (the default: a ValueError with a "did you mean" when
    it is within edit distance 2 of a free name, else ignored, so that one data dict can serve
    many candidate programs), "error" (always a ValueError) or "ignore". client, dtype, evaluator: how
    the program is evaluated (an Evaluator is reused when given).

    Returns a FitResult (see its docstring): ``params`` and ``loss`` of the best start, every
    start's point, loss and stop ``status``, ``converged``, ``message`` and, for least squares,
    ``covariance`` and ``stderr``. A fit that did not meet a tolerance says so in ``message``.
    """
    prog = _program(prog)
    args = (params, starts, init, optimizer, steps, lr, loss, bounds, seed, client, consts, dtype,
            tol, ftol, xtol, gtol, positive, uncertainty, nan_policy, unused_data, scaling)
    return fit_with(prog, _options(args), data, target, evaluator)


# ndvm.fit's option arguments, in the order fit passes them to _options
_FIT_ARGS = ("params", "starts", "init", "optimizer", "steps", "lr", "loss", "bounds", "seed",
             "client", "consts", "dtype", "tol", "ftol", "xtol", "gtol", "positive",
             "uncertainty", "nan_policy", "unused_data", "scaling")
_MADE = {}  # the FitOptions of recent arguments, with their types (equal keys of other types,
_MADE_KEPT = 256  # starts=True and 1, seed 0 and numpy's 0, are checked on their own)


def _options(args):
    """The FitOptions of ndvm.fit's arguments (``_FIT_ARGS``), made once for the same hashable
    arguments: a fit called in a loop checks its options once."""
    try:
        key = (args, tuple(map(type, args)))
        made = _MADE.get(key)
    except TypeError:  # (an unhashable argument: a dict of init values, bounds, a list, ...)
        key = made = None
    if made is None:
        made = FitOptions.of(**dict(zip(_FIT_ARGS, args)))
        if key is not None:
            if len(_MADE) >= _MADE_KEPT:
                _MADE.clear()
            _MADE[key] = made
    return made


def _columns(data, target):
    """``data`` as a dict of its inputs (a pandas DataFrame: its columns). pandas matches rows
    by index and ndvm by position: a target or input whose index differs from the others' (a
    shuffled Series) is a ValueError, not a fit of mismatched rows."""
    if data is None:
        return None
    data = dict(data)
    indexed = [(k, v.index) for k, v in data.items() if hasattr(v, "index")
               and hasattr(v.index, "equals")]
    if hasattr(target, "index") and hasattr(target.index, "equals"):
        indexed.append(("the target", target.index))
    def named(k):
        return k if k == "the target" else f"data input {k!r}"

    for k, index in indexed[1:]:
        if not index.equals(indexed[0][1]):
            raise ValueError(f"{named(k)} and {named(indexed[0][0])} have different indexes: "
                             f"ndvm matches points by position, not by index (align them, e.g. "
                             f"target.loc[data.index], or pass .to_numpy() arrays)")
    return data


def fit_with(prog, options, data=None, target=None, evaluator=None, quiet_inputs=False):
    """``ndvm.fit`` with its options as one ``FitOptions`` (built by the caller, e.g. the CLI).
    A free name fitted as a parameter that looks like a data input left out (``missing_inputs``)
    is a UserWarning, unless ``quiet_inputs`` (a caller that says so itself)."""
    prog = _program(prog)
    free = prog.free_names
    data = _columns(data, target)
    if (data and options.params is None and options.unused_data in (None, "typo")
            and not any(k in free or did_you_mean(k, free) for k in data)):
        # (one program, and none of the data in it: a fit of constants to the target, the
        # program's inputs fitted as parameters; fit_many's shared data may serve others; with
        # the parameters named, an input left unbound is an UnboundError of its own; a name
        # near a free name gets its "did you mean" from the plan)
        raise ValueError(f"none of the data inputs ({', '.join(map(str, data))}) is a free name "
                         f"of the program, whose free names are {', '.join(free) or '(none)'}: "
                         f"the fit would use no data and fit every free name as a constant; "
                         f"name the data as the program names its inputs, or pass "
                         f"unused_data='ignore'")
    if data and options.params is None and not quiet_inputs:
        for name, siblings in missing_inputs(free, data, options.consts or {}):
            warnings.warn(f"{name!r} is fitted as a parameter: the data has "
                          f"{', '.join(siblings)} but no {name} (give data[{name!r}], or "
                          f"params= to fit it on purpose)", UserWarning, stacklevel=3)
    plan = FitPlan(options, data, target, evaluator)
    batch = FitBatch()
    staged = plan.stage(batch, prog)
    plan.evaluator.calibrate(batch, interruptible=True)  # (a long fit stops on Ctrl-C)
    return plan.result(staged, batch)


def missing_inputs(free, data, consts=()):
    """[(name, [data names])]: the free names a fit would take for parameters (in neither
    ``data`` nor ``consts``) that look like data inputs left out: a stem and a number, as
    data names of the same stem are (x3 beside data x1, x2; not b1 beside x1)."""
    out = []
    for name in free:
        m = re.fullmatch(r"(.*?[^0-9])([0-9]+)", name)
        if name in data or name in consts or m is None:
            continue
        siblings = [k for k in data if isinstance(k, str)
                    and re.fullmatch(re.escape(m.group(1)) + r"[0-9]+", k)]
        if siblings:
            out.append((name, siblings))
    return out


def _program(prog, name="<program>"):
    """``prog`` as an ndvm.Program (source text is parsed as ``name``)."""
    if not isinstance(prog, Program):
        if not isinstance(prog, str):
            raise TypeError(f"expected an ndvm.Program or source text, got {type(prog).__name__}")
        prog = parse(prog, name=name)
    return prog


class EvaluateAfter:
    """An evaluation of each fitted model after its fit, in the fit's own native call (on the
    thread that fitted it, without the GIL): the model at its best start's parameters (a
    FitResult's ``params``) on the M ``points`` (name -> [M]; the inputs a program does not use
    are ignored), reduced per segment ``(start, stop, ref)`` of the points (``ref``: [stop -
    start] values, or one number) to three numbers: how many values are not finite, max |value -
    ref| (NaN when a value is NaN) and the sum of (value - ref)^2, summed in numpy's pairwise
    order (so that ``sum / n`` is ``np.mean((value - ref) ** 2)`` bit for bit). Give it to
    ``fit_many`` or ``begin_fits`` as ``after=``; ``read(result)`` gives each result's numbers.
    The values are those ``Evaluator.evaluate(prog, params=result.params, data=points,
    consts=consts)`` gives (``consts``: the fit's when None)."""

    __slots__ = ("consts", "points", "segments", "size")

    def __init__(self, points, segments, consts=None):
        self.consts = None if consts is None else dict(consts)
        self.points = {k: np.ascontiguousarray(v, dtype=np.float64).reshape(-1)
                       for k, v in points.items()}
        sizes = {a.size for a in self.points.values()}
        if len(sizes) > 1:
            raise ValueError(f"EvaluateAfter's points differ in size: {sorted(sizes)}")
        self.size = sizes.pop() if sizes else 1
        self.segments = tuple((int(a), int(b), r if np.ndim(r) == 0 else
                               np.ascontiguousarray(r, dtype=np.float64).reshape(-1))
                              for a, b, r in segments)
        for a, b, r in self.segments:
            if not 0 <= a <= b <= self.size:
                raise ValueError(f"segment ({a}, {b}) is not within the {self.size} points")
            if np.ndim(r) and r.size != b - a:
                raise ValueError(f"segment ({a}, {b}) has {r.size} reference values")

    def __reduce__(self):
        return EvaluateAfter, (self.points, self.segments, self.consts)

    @staticmethod
    def read(result):
        """(status, stats) of a FitResult: status "ok" with stats [segments, 3] (non-finite
        count, max |value - ref|, sum of squares), "failed" (the evaluation raised: evaluate
        it again to see why) or None (no evaluation after this fit), stats None then."""
        status, stats = after_numbers(getattr(result, "after", None))
        return status, None if stats is None else np.array(stats).reshape(-1, AFTER_STATS)

    def bind(self, prog, names, consts):
        """The inputs of ``prog`` at the points, its fitted ``names`` as placeholders (the
        fit's ``consts`` unless this evaluation has its own)."""
        free = prog.free_names
        consts = consts if self.consts is None else self.consts
        return bind(prog, dict.fromkeys(names, 0.0), {k: v for k, v in self.points.items()
                                                      if k in free},
                    {k: v for k, v in consts.items() if k in free}, self.size)


_NO_STARTS = np.empty((0, 1))  # (the starting values of a fit without parameters)


class _Shared:
    """What a plan computes once for all programs with the same free names."""

    __slots__ = ("after", "budget", "data", "fitted", "inputs", "lower", "meta", "names",
                 "params", "pos", "spec", "unknown", "upper", "x0", "y")

    def __init__(self):
        # the bound inputs and the native setup of the fit (FitSpec), once a program with these
        # free names has been bound and has passed the checks
        self.inputs = self.spec = self.after = None


class FitPlan:
    """A fit's options (a FitOptions), data and target checked once, and its data and target
    converted once per set of free names: what every program of a batch shares (``ndvm.fit``
    is a batch of one, ``ndvm.fit_many`` stages a chunk at a time).

    ``stage(batch, prog)`` runs one program's own checks, binds its inputs and stages its
    calibration in an ``ndvm._core.FitBatch``; after ``evaluator.calibrate(batch)``,
    ``result(staged, batch)`` builds its FitResult. Errors are those ``ndvm.fit`` raises, in the
    same order.
    """

    def __init__(self, options, data=None, target=None, evaluator=None, after=None):
        o = self.options = options
        self.after = after  # an EvaluateAfter or None
        if o.loss == "value":
            if target is not None:
                raise ValueError("loss='value' minimizes the program's value: "
                                 "do not pass a target")
        elif target is None:
            raise ValueError("fit needs a target "
                             "(or loss='value' to minimize the program's value)")
        self.data = {} if data is None else dict(data)
        self.consts = {} if o.consts is None else dict(o.consts)
        self.target = target
        self.unused_data = o.unused_data or "typo"
        # the starting points depend only on the names when the seed is a number (a Generator
        # or None draws anew for every program)
        self._same_starts = isinstance(o.seed, (int, np.integer))
        # whether a candidate's own init may stand in for this plan's (``takes_init``): the
        # options have no init, bounds or positive names to check it against, and the seed is
        # a number (decided once: the options do not change)
        self.init_alone = (not o.init and not o.bounds and not o.positive
                           and self._same_starts)
        self._shared = {}  # free names -> _Shared
        # free names -> (meta, FitSpec) of those whose programs ``stage`` has staged: every
        # check passed and the inputs bound, another program having them is a copied request
        # (``stage_ready``)
        self._ready = {}
        self._checked = {}  # the data inputs a program uses (in data order) -> checked_data's
        # (nan_policy="omit"); else each input checked (name -> array), and the target (y,)
        self._inputs, self._target = {}, None
        self._ev = evaluator
        self._evaluations = {}  # free names -> the FitSpec of stage_evaluation
        # (what ``result`` reads of an evaluation alone: no parameters, one step, no covariance)
        self._evaluated = ((), self.options.solver, 1, self.options.tols, False)

    @property
    def evaluator(self):
        """The Evaluator the fits run on (the one given, else the shared one for ``client`` and
        ``dtype``)."""
        if self._ev is None:
            self._ev = Evaluator.shared(self.options.client, self.options.dtype)
        return self._ev

    def _data(self, free, sh):
        """The data inputs a program with free names ``free`` uses, and the target: converted
        and checked (``checked_data``). Each check reads every point, so an input and the target
        are checked once: a set of inputs of which each has passed is made of the checked
        arrays (a search's candidates meet hundreds of sets of a few inputs; with
        nan_policy="omit" the points kept depend on the set: each set is checked, and kept)."""
        sh.unknown = [k for k in self.data if k not in free]
        used = tuple(k for k in self.data if k in free)
        checked = self._checked.get(used)
        if checked is None and self._target is not None and self._inputs.keys() >= set(used):
            checked = {k: self._inputs[k] for k in used}, self._target[0]
        if checked is None:  # (a set with an input not yet checked: its errors, if any, are
            # checked_data's for the set, in its order)
            checked = checked_data({k: self.data[k] for k in used}, self.target,
                                   self.options.nan_policy)
            if self.options.nan_policy == "omit":
                if len(self._checked) < 64:
                    self._checked[used] = checked
            else:
                self._inputs.update(checked[0])
                self._target = (checked[1],)
        sh.data, sh.y = checked

    def _names(self, free):
        """Everything about a program's fit that follows from its free names, checked."""
        o, sh = self.options, _Shared()
        S = o.starts
        self._data(free, sh)
        data, consts = sh.data, self.consts
        init, bounds, seed = o.init, o.bounds, o.seed
        if o.params is None:
            names = tuple(n for n in free if n not in data and n not in consts)
        else:
            names = o.params
            missing = [n for n in names if n not in free]
            if missing:
                n = missing[0]
                raise ValueError(f"parameter(s) {missing} do not occur in the program"
                                 f"{did_you_mean(n, free)} (its free names are {free})")
        if not names:
            raise ValueError("there is nothing to fit: the program has no free parameters")
        if init:
            _check_names("init", init, names, free)
        if bounds:
            _check_names("bounds", bounds, names, free)
        positive = o.positive
        _check_names("positive", positive, names, free)
        lower = upper = None
        if bounds:
            lower = np.array([(bounds.get(n) or (None, None))[0] for n in names], dtype=object)
            upper = np.array([(bounds.get(n) or (None, None))[1] for n in names], dtype=object)
            lower = np.array([-np.inf if v is None else v for v in lower], dtype=np.float64)
            upper = np.array([np.inf if v is None else v for v in upper], dtype=np.float64)
            if np.any(np.isnan(lower)) or np.any(np.isnan(upper)) or np.any(lower > upper):
                raise ValueError("each bound must be (low, high) with low <= high")
        x0 = _initial_values(names, S, init, bounds, seed)
        if lower is not None:
            x0 = np.clip(x0, lower[:, None], upper[:, None])
        pos = None
        if positive:
            pos = np.array([n in positive for n in names], dtype=np.uint8)
            for i, n in enumerate(names):
                if pos[i] and np.any(x0[i] <= 0):
                    raise ValueError(f"positive parameter {n!r} needs initial values above zero "
                                     f"(init or bounds)")
        budget = o.budget(len(names))
        sh.names, sh.budget, sh.lower, sh.upper = names, budget, lower, upper
        sh.x0, sh.pos = x0, pos
        # what a FitResult reads besides the native outputs (FitOutputs.fit_result)
        sh.meta = (names, o.solver, budget, o.tols, o.want_cov)
        sh.fitted = [free.index(n) for n in names]
        # the fitted parameters are rebound per step natively (placeholders here)
        sh.params = dict.fromkeys(names, np.zeros(S))
        return sh

    def takes_init(self, extra):
        """Whether a candidate's own options ``extra`` are an ``init`` alone that ``stage`` can
        take in place of this plan's (its starting values are then all that differs from a plan
        of its own: the options have no init, bounds or positive names to check it against, and
        the seed is a number: ``init_alone``)."""
        return self.init_alone and extra.keys() == {"init"}

    def stage(self, batch, prog, init=None, starts=None):
        """Check ``prog`` against the arguments, bind its inputs and stage its calibration in
        ``batch``; returns what ``result`` needs. ``init``: this program's own starting values
        (only where ``takes_init``): the same fit as a plan of options with that init.
        ``starts``: in place of ``init``, (names, [P, S] finite float64 values, a row a name):
        staged as they are when the names are the fitted ones in their order (the fit of that
        init, without a dict of rows to check and stack again), else taken as that init."""
        prog = _program(prog)
        free = prog.free_names
        sh = self._shared.get(free)
        if sh is None:
            sh = self._names(free)
            if self._same_starts:
                self._shared[free] = sh
        x0 = None
        if starts is not None:
            names, x0 = starts
            if names != sh.names or x0.shape != (len(names), self.options.starts):
                init, x0 = dict(zip(names, x0)), None
        if init is not None:  # (checked where _names checks a plan's own init)
            if init:
                _check_names("init", init, sh.names, free)
            x0 = _initial_values(sh.names, self.options.starts, init, None, self.options.seed)
        client = self.evaluator.client
        spec = sh.spec
        if spec is None:
            y = sh.y
            # scalar data must still cover N lanes when the target has N points. The binding
            # follows from the free names alone, so programs sharing them share it (it is only
            # read: the native fit rebinds the parameters in its own copy of the bindings)
            inputs = sh.inputs
            if inputs is None:
                inputs = sh.inputs = bind(prog, sh.params, sh.data, self.consts,
                                          None if y is None else y.size)
        unknown = sh.unknown
        if unknown and self.unused_data != "ignore":  # (after bind: an unbound name is first)
            if self.unused_data == "typo":
                unknown = [k for k in unknown if did_you_mean(k, free)]
            _check_names("data", unknown, (), free)
        if spec is None:
            after = segments = None
            if self.after is not None:
                after = sh.after = self.after.bind(prog, sh.names, self.consts)
                segments = self.after.segments
            spec = sh.spec = FitSpec(client.entry, inputs, sh.fitted, y, sh.x0, sh.lower,
                                     sh.upper, sh.pos, self.options, sh.budget, after,
                                     segments or ())
        staged = sh.meta, batch.add_spec(prog, prog.compiled(client), spec, x0)
        if self._same_starts and free not in self._ready:
            self._ready[free] = sh.meta, spec
        return staged

    def stage_ready(self, batch, items, start, staged, starts=False):
        """``stage`` of ``items[start:]`` (``ndvm.parallel._stage``'s (index, program, extra)
        items, staged as (position, this plan, what ``result`` needs) in ``staged``) in one
        native call (``FitBatch.add_ready``), as far as they are programs whose free names
        ``stage`` has staged before, each with this plan's starting values or (with ``starts``:
        ``takes_init``) the rows ``stage`` takes as they are, or (an extra that is a string:
        ``FitSetup.begin``'s ``evaluated``) programs whose free names ``stage_evaluation`` has
        staged before; returns the position of the first item it did not stage (len(items):
        none)."""
        return batch.add_ready(items, start, self._ready, self.evaluator.client, staged, self,
                               starts, self._evaluations, self._evaluated)

    def stage_evaluation(self, batch, prog):
        """Stage ``prog``'s evaluation after a fit (``after``), with no fit before it: a program
        without parameters, whose numbers (``EvaluateAfter``) are all its caller wants, then
        come from the batch's native call as a fitted program's do; returns what ``result``
        needs (its FitResult has no parameters, NaN losses and no evaluations)."""
        if self.after is None:
            raise ValueError("an evaluation alone is the evaluation after a fit: the plan has "
                             "no after=")
        prog = _program(prog)
        free = prog.free_names
        spec = self._evaluations.get(free)
        client = self.evaluator.client
        if spec is None:
            after = self.after.bind(prog, (), self.consts)
            spec = self._evaluations[free] = FitSpec(
                client.entry, after, (), None, _NO_STARTS, None, None, None, self.options, 1,
                after, self.after.segments, evaluate_only=True)
        return self._evaluated, batch.add_spec(prog, prog.compiled(client), spec)

    def result(self, staged, batch):
        """The FitResult of a staged program once ``batch`` has run (its error, if it failed).
        Its fields (see ``ndvm._core.LazyFit``) are read from the batch's outputs on first
        access: making it costs no numpy view and no dict."""
        meta, k = staged
        return batch.fit_result(k, FitResult, meta)
