"""``FitOptions``: how ``ndvm.fit`` calibrates, one frozen value checked once.

Every door builds one (``ndvm.fit``, ``ndvm.fit_many`` and ``begin_fits``, the CLI, the estimator,
the search) with ``FitOptions.of``; a candidate with options of its own gets
``options.replace(...)``; ``ndvm.fit.FitPlan`` and the native ``FitSpec`` read its fields and the
values it derives (``solver``, ``tols``, ``want_cov`` and the native codes). ``ndvm.fit``'s
``steps`` counts a different thing per optimizer, so the options keep it under two names:
``adam_steps`` (Adam's steps) and ``max_evals`` (LM's and L-BFGS's budget of batched
evaluations, every trial point counted); the loss history has one row per unit of that budget.
"""
import dataclasses
from collections.abc import Mapping
from numbers import Integral
from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_TOLS", "FitOptions", "LOSSES", "OPTIMIZERS", "OPTION_NAMES", "SCALINGS",
           "default_optimizer", "default_steps"]

OPTIMIZERS = {"adam": 0, "lbfgs": 1, "lm": 2}
LOSSES = {"mse": 0, "value": 1}
# LM's trust-region scaling: MINPACK's (by the Jacobian's column norms), none, or both as lanes
SCALINGS = {"jac": 0, "none": 1, "both": 2}
# per optimizer: (ftol, xtol, gtol) defaults; xtol is used by LM only, ftol by LM and L-BFGS
DEFAULT_TOLS = {"adam": (0.0, 0.0, 1e-10), "lbfgs": (1e-12, 0.0, 1e-10),
                "lm": (1e-10, 1e-10, 1e-10)}
_NAN_POLICIES = ("raise", "omit")
_UNUSED_DATA = ("typo", "error", "ignore")


def default_optimizer(loss):
    """The optimizer ``fit`` uses when none is named: "lm" (MINPACK-grade Levenberg-Marquardt)
    for least squares, "lbfgs" for loss="value" (LM needs residuals)."""
    return "lbfgs" if loss == "value" else "lm"


def default_steps(optimizer, n_params):
    """The default budget: 50 Adam steps; 100 (P + 1) evaluations for LM and L-BFGS (MINPACK's)."""
    return 50 if optimizer == "adam" else 100 * (n_params + 1)


@dataclass(frozen=True, init=False)
class FitOptions:
    """``ndvm.fit``'s options but the program, its data, target and evaluator (see ``ndvm.fit``
    for each one's meaning); None means the default, which may depend on the optimizer.
    adam_steps: Adam's steps (default 50); max_evals: LM's and L-BFGS's budget of batched
    evaluations (default 100 (P + 1)); unused_data None: the caller's default ("typo" for
    ``ndvm.fit``, "ignore" for ``ndvm.fit_many``). Derived once checked: ``solver`` (the
    optimizer that runs), ``tols`` ((ftol, xtol, gtol) in effect), ``want_cov`` (covariance and
    standard errors are computed) and the native codes of the optimizer, loss and scaling.
    Build it with ``FitOptions.of`` (which also takes ``steps`` and ``tol``) or ``FitOptions(...)``
    with field names; ``replace`` gives a copy with some options changed, checked again."""

    params: tuple = None
    starts: int = 1
    init: Mapping = None
    optimizer: str = None
    adam_steps: int = None
    max_evals: int = None
    lr: float = 0.05
    loss: str = "mse"
    bounds: Mapping = None
    seed: object = 0
    client: str = "dmci"
    consts: Mapping = None
    dtype: str = "float64"
    ftol: float = None
    xtol: float = None
    gtol: float = None
    positive: tuple = ()
    uncertainty: bool = None
    nan_policy: str = "raise"
    unused_data: str = None
    scaling: str = "both"

    def __init__(self, **options):
        unknown = options.keys() - _FIELDS
        if unknown:
            raise TypeError(f"unknown fit option(s) {sorted(unknown)}")
        d = self.__dict__  # (frozen: set once here, a fit's hot path, without __setattr__)
        d.update(_DEFAULTS)
        d.update(options)
        _check(d)

    @classmethod
    def of(cls, base=None, *, steps=None, tol=None, **fields):
        """Options from ``ndvm.fit``'s arguments: ``base``'s (or the defaults) with ``fields``
        replaced. ``steps`` is ``adam_steps`` for Adam and ``max_evals`` otherwise; ``tol`` is
        an older name of ``xtol`` (used when xtol is not given). Checks every value."""
        given = fields
        if base is not None:
            b = base.__dict__
            fields = {k: b[k] for k in _DEFAULTS}
            fields.update(given)
        if steps is not None:
            solver = fields.get("optimizer") or default_optimizer(fields.get("loss", "mse"))
            name = "adam_steps" if solver == "adam" else "max_evals"
            if given.get(name) is not None:
                raise TypeError(f"give steps or {name}, not both")
            fields[name] = steps
        if tol is not None and fields.get("xtol") is None:
            fields["xtol"] = tol
        return cls(**fields)

    def replace(self, **changes):
        """These options with ``changes`` (``ndvm.fit``'s names, ``steps`` and ``tol`` too)."""
        return FitOptions.of(self, **changes)

    @property
    def steps(self):
        """The budget given for the optimizer that runs, as ``ndvm.fit``'s ``steps`` counts it
        (Adam's steps or the evaluation budget); None: the default."""
        return self.adam_steps if self.solver == "adam" else self.max_evals

    def budget(self, n_params):
        """The budget of a fit of ``n_params`` parameters: Adam's steps or LM's and L-BFGS's
        batched evaluations (the rows of its loss history)."""
        given = self.steps
        return default_steps(self.solver, n_params) if given is None else given


def _check(d):
    """Checks the options in ``d`` (a FitOptions' __dict__), normalizes them and adds what
    they imply (solver, tols, want_cov, the native codes)."""
    loss, optimizer = d["loss"], d["optimizer"]
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; choose 'mse' or 'value'")
    solver = default_optimizer(loss) if optimizer is None else optimizer
    if solver not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {solver!r}; choose one of {sorted(OPTIMIZERS)}")
    if loss == "value" and solver == "lm":
        raise ValueError("loss='value' needs optimizer 'lbfgs' or 'adam' (LM fits residuals)")
    if d["nan_policy"] not in _NAN_POLICIES:
        raise ValueError(f"nan_policy must be 'raise' or 'omit', got {d['nan_policy']!r}")
    if d["scaling"] not in SCALINGS:
        raise ValueError(f"scaling must be one of {sorted(SCALINGS)}, got {d['scaling']!r}")
    if d["unused_data"] is not None and d["unused_data"] not in _UNUSED_DATA:
        raise ValueError(f"unused_data must be 'typo', 'error' or 'ignore', "
                         f"got {d['unused_data']!r}")
    d["starts"] = _whole("starts", d["starts"])
    seed = d["seed"]
    if isinstance(seed, (bool, float)) or (whole_number(seed) and seed < 0):
        raise ValueError(f"seed is a whole number >= 0 or a numpy Generator, got {seed!r}")
    if not (d["lr"] > 0):
        raise ValueError(f"lr must be positive, got {d['lr']}")
    d["lr"] = float(d["lr"])
    for name, meaning in _BUDGETS:
        v = d[name]
        if v is not None:
            d[name] = _whole("steps", v, f" ({name}: {meaning})")
    f0, x0, g0 = DEFAULT_TOLS[solver]
    ftol, xtol, gtol = d["ftol"], d["xtol"], d["gtol"]
    tols = (f0 if ftol is None else float(ftol), x0 if xtol is None else float(xtol),
            g0 if gtol is None else float(gtol))
    if not (tols[0] >= 0 and tols[1] >= 0 and tols[2] >= 0):
        raise ValueError(f"ftol, xtol and gtol must be non-negative, got {tols}")
    if d["params"] is not None and type(d["params"]) is not tuple:
        d["params"] = tuple(d["params"])
    if type(d["positive"]) is not tuple:
        d["positive"] = tuple(d["positive"] or ())
    uncertainty = d["uncertainty"]
    uncertainty = solver != "adam" if uncertainty is None else bool(uncertainty)
    # derived (not fields: replace() derives them anew)
    d["solver"] = solver
    d["tols"] = tols
    d["want_cov"] = uncertainty and loss == "mse"
    d["optimizer_code"] = OPTIMIZERS[solver]
    d["loss_code"] = LOSSES[loss]
    d["scaling_code"] = SCALINGS[d["scaling"]]


def whole_number(v):
    """Whether ``v`` is an integer, Python's or numpy's, and not a bool (True is no count): the
    one test of the whole-number options (counts, seeds, limits) wherever they are checked."""
    return isinstance(v, Integral) and not isinstance(v, bool)


def _whole(name, v, what=""):
    """A count option as an int >= 1 (1.5 was taken as 1, True as 1)."""
    if isinstance(v, bool) or not isinstance(v, (int, np.integer, float, np.floating)) or (
            isinstance(v, (float, np.floating)) and not float(v).is_integer()):
        raise TypeError(f"{name} must be a whole number, got {v!r}{what}")
    if v < 1:
        raise ValueError(f"{name} must be at least 1, got {v!r}{what}")
    return int(v)


_BUDGETS = (("adam_steps", "Adam's steps"), ("max_evals", "the budget of batched evaluations"))
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(FitOptions)}
_FIELDS = frozenset(f.name for f in dataclasses.fields(FitOptions))
# every name FitOptions.of and replace take
OPTION_NAMES = _FIELDS | {"steps", "tol"}
