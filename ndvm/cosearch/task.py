"""A search task: data, a train / held-out split, the allowed parameters, fit options, a budget.

``Task`` is what a search fits and how it judges a fit; the built-in tasks are in tasks.py, the
time-series tasks (a Task subclass) in series.py.
"""
import math
import re
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

from ndvm._core._core import r_squared  # (R^2's rule: native, where records are scored)
from ndvm.cosearch.grammar import Grammar
from ndvm.fit_options import FitOptions, whole_number

__all__ = ["Task", "DEFAULT_PARAMS", "SEARCH_OPTIMIZER", "SEARCH_LM_SCALING", "PAPER_FIT",
           "DATA_FIT", "named_in",
           "predict", "r_squared"]

DEFAULT_PARAMS = ("a", "b", "c", "d")
# the co-search's calibration (the paper's protocol: 50 Adam steps at lr 0.05, 8 starts); a task
# whose fit options name no optimizer uses it, whatever ndvm.fit's own default is
SEARCH_OPTIMIZER = "adam"
PAPER_FIT = {"optimizer": SEARCH_OPTIMIZER, "steps": 50, "starts": 8, "lr": 0.05}
# ... and the calibration of a search of one's own data (Task.from_arrays, ndvm search --csv,
# SymbolicRegressor): Levenberg-Marquardt, 30 steps, 4 starts drawn at three scales (a rate or
# shift far from the first start's basin is reached); Adam's 50 steps leave the constants of a
# right structure short of their values (a * x1 * exp(b * x2 / x3) at a = 1.8, b = -0.64 for
# 2.5 and -1), and the search drops it
DATA_FIT = {"optimizer": "lm", "steps": 30, "starts": 4, "start_scales": (0.3, 1.0, 3.0)}
# the search's LM fits (calibrations with optimizer "lm", refits, selection): MINPACK's trust
# region alone, not ndvm.fit's default of both regions as two lanes (twice the work per fit; the
# search already runs many starts and candidates)
SEARCH_LM_SCALING = "jac"


def named_in(values, prog):
    """The entries of ``values`` (inputs or constants) that ``prog`` names."""
    return {k: v for k, v in values.items() if k in prog.free_names}


def _points(what, values):
    """``values`` as a flat float64 array of one value a point: a column ([N] or [N, 1]), or a
    ValueError naming ``what`` (a table of several columns was flattened into one input of
    their N x k values)."""
    from ndvm.fit import _numbers

    a = _numbers(what, values)
    if a.ndim > 1 and a.size != a.shape[0]:
        raise ValueError(f"{what} has shape {a.shape}: one value a point is an [N] array (give "
                         f"each column its own name)")
    return a.reshape(-1)


def predict(ev, prog, params, inputs, consts=None):
    """The values of ``prog`` at ``params`` on the rows of ``inputs`` (name -> [n] arrays), with
    the shared constants ``consts`` (a task's): an [n] array, a model that uses no input
    broadcast to the n rows (n = 1 without inputs), evaluated by the Evaluator ``ev``. The one
    way the search, the selection, the plots and ``SearchResult.predict`` run a model."""
    n = next(iter(inputs.values())).size if inputs else 1
    v = ev.evaluate(prog, params=params or None, data=named_in(inputs, prog),
                    consts=named_in(consts, prog) if consts else None).value[0]
    return np.broadcast_to(v, (n,)) if v.size == 1 else v


# A column of data is of ordinary size when its largest magnitude is in [1e-3, 1e4): the
# search's starts (normal(0, 0.3 | 1 | 3)), its grammar's literals and its off-domain test are
# made for values near 1 (a target near 1e12 came back a polynomial, near 1e100 a constant)
ORDINARY_DECADES = (-3, 3)


def decade(v):
    """The power of ten a column of data is best divided by before a search: 1.0 for a column
    of ordinary size (ORDINARY_DECADES) or of zeros, else 10**k, its largest magnitude then in
    [1, 10) (SymbolicRegressor divides by it, and multiplies the model back)."""
    v = np.asarray(v, dtype=np.float64)
    most = float(np.max(np.abs(v))) if v.size else 0.0
    if most == 0.0 or not np.isfinite(most):
        return 1.0
    k = int(np.floor(np.log10(most)))
    return 1.0 if ORDINARY_DECADES[0] <= k <= ORDINARY_DECADES[1] else float(10.0 ** k)


def _check_names(kind, names):
    """Raise ValueError unless each name reads as one free variable of a program: not a number,
    not two tokens, not a special form, and not a procedure the language already binds (a data
    column named ``length`` or ``exp`` would be read as the procedure, and every candidate using
    it would fail)."""
    for name in names:
        if not _a_variable(name):
            plain = re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_")
            rename = plain if plain and _a_variable(plain) else f"x_{plain}"
            raise ValueError(f"the {kind} name {name!r} cannot be a variable of a program (it "
                             f"is a built-in procedure, a special form, a number or not one "
                             f"symbol); rename it, e.g. to {rename}")


def _a_variable(name):
    """Whether ``name`` reads as one free variable of a program."""
    from ndvm import parse

    try:
        return parse(name, name="<name>").free_names == (name,)
    except Exception:  # noqa: BLE001 - a special form, an unbalanced bracket, ...
        return False


# A least-squares search of fewer data points says that they are too few (Task.size_warnings)
FEW_POINTS = 20

# Training points a candidate is calibrated on at most: a seeded subset of larger data (the
# calibrations' cost grows with the points, and 2,000 pin a few constants down well enough to
# rank candidates; the chosen model is refitted on every point by the selection, select.py).
FIT_POINTS = 2000


def subset_rows(n, k, seed):
    """All n row indices, or a seeded sorted subset of k of them when there are more (the rows
    the search calibrates on, Task.fit_rows, and those the selection cross-validates on,
    select.cv_rows)."""
    if k is None or n <= k:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, k, replace=False))


@dataclass
class Task:
    """What a search fits, and how it judges a fit.

    inputs: name -> [N] data inputs; target: [N]; heldout: indices scored but never fitted;
    params: the parameter names a candidate may use (default a b c d, skipping any name an input,
    a constant or the target uses; names given that collide with an input or a constant are an
    error); consts: shared constants (vectors, matrices);
    fit: options for ndvm.fit (optimizer, steps, starts, lr; default PAPER_FIT, the paper's
    protocol; ``from_arrays`` gives DATA_FIT; a fit dict that names no optimizer
    keeps the co-search's, SEARCH_OPTIMIZER, not ndvm.fit's own default; "start_scales": see
    ``fit_options``), checked when the task is made; threshold: a held-out
    R^2 above it is a good fit; budget: seconds and/or candidates; objective: "mse" (fit the
    target) or "nll" (the program's value is a negative log-likelihood to minimize;
    ``positive`` names are kept above zero); seeds: sources that start the population (and the
    built-in replay); proposers: the proposers that apply, the first being the default; series:
    for likelihood tasks, params -> {"x", "data", "fitted", "label", "xlabel", "ylabel"} for
    front.png; data_units: the inputs' and the target's units (a dict input -> unit string with the
    target's under "target", e.g. {"x": "m", "t": "s", "target": "m/s"}; checked when the task is
    made, held as a units.Units): the mutate proposer then proposes only dimensionally
    consistent candidates and starts from the Buckingham Pi models (units.py); fit_points: the
    training points each candidate is calibrated and scored on at most (``split("fit")``: a
    seeded subset when there are more; None: all of them); target_name: the target's own name
    (a CSV column's), which no default parameter takes.
    """

    name: str
    inputs: dict
    target: np.ndarray
    heldout: np.ndarray
    params: tuple = None
    consts: dict = field(default_factory=dict)
    fit: dict = field(default_factory=lambda: dict(PAPER_FIT))
    threshold: float = 0.9
    budget_seconds: float = 60.0
    budget_candidates: int = None
    objective: str = "mse"
    positive: tuple = ()
    init: dict = None
    seeds: tuple = ()
    loops: bool = True
    description: str = ""
    proposers: tuple = ("mutate", "replay", "llm")
    series: object = None
    grammar: object = None  # a Grammar for this task (default: one built from inputs and params)
    data_units: object = None  # (SeriesTask's ``units`` is its series' unit label)
    fit_points: int = FIT_POINTS
    target_name: str = None

    def search_grammar(self):
        """The grammar a search of this task grows programs from: ``grammar``, else one over
        its inputs and parameters (with loop forms when ``loops``)."""
        return self.grammar or Grammar(inputs=tuple(self.inputs), params=tuple(self.params),
                                       loop=self.loops)

    def __post_init__(self):
        _check_names("input", self.inputs)
        _check_names("constant", self.consts)
        self._name_parameters()
        self.target = _points("the target", self.target)
        self.inputs = {k: _points(f"input {k!r}", v) for k, v in self.inputs.items()}
        for k, v in self.inputs.items():
            if v.size != self.target.size:
                raise ValueError(f"input {k!r} has {v.size} points but the target has "
                                 f"{self.target.size}")
        if self.objective == "mse":  # (a NaN makes every candidate's error NaN, silently)
            for what, v in [("the target", self.target)] + [(f"input {k!r}", v)
                                                            for k, v in self.inputs.items()]:
                bad = np.flatnonzero(~np.isfinite(v))
                if bad.size:
                    raise ValueError(f"{what} has a non-finite value ({v[bad[0]]}) at index "
                                     f"{bad[0]} ({bad.size} in all): a search needs finite "
                                     "data; remove or fill those rows")
        self.heldout = np.asarray(self.heldout, dtype=np.int64).reshape(-1)
        mask = np.ones(self.target.size, dtype=bool)
        mask[self.heldout] = False
        self.train = np.flatnonzero(mask)
        if self.objective not in ("mse", "nll"):
            raise ValueError(f"objective must be 'mse' or 'nll', got {self.objective!r}")
        if self.objective == "mse" and (self.train.size == 0 or self.heldout.size == 0):
            raise ValueError("an mse task needs both training and held-out points")
        self.fit_options()  # (bad fit options raise here, not once the search has begun)
        if self.fit_points is not None and not (isinstance(self.fit_points, (int, np.integer))
                                                and self.fit_points >= 1):
            raise ValueError(f"fit_points must be a positive integer or None, got "
                             f"{self.fit_points!r}")
        if self.data_units is not None:
            from ndvm.cosearch.units import Units
            self.data_units = Units.of(self.data_units, self.inputs)

    def fit_options(self, overrides=None, client="dmci"):
        """The search's calibration of this task: (FitOptions, start_scales). The options are
        ``fit`` with ``overrides`` (ndvm.fit's names), the co-search's optimizer and LM scaling
        where neither names one, ``client`` and the task's constants, and no covariance (unless
        ``uncertainty`` asks for it); start_scales (from "start_scales", None: ndvm.fit's
        normal(0, 0.3) draws) are the standard deviations the search draws each candidate's
        starts from."""
        fit = dict(self.fit)
        fit.update(overrides or {})
        scales = fit.pop("start_scales", None)
        if scales is not None and not (
                np.ndim(scales) == 1 and np.size(scales)
                and all(isinstance(v, Real) and math.isfinite(v) and v > 0 for v in scales)):
            raise ValueError(f"start_scales are the standard deviations the starts are drawn "
                             f"with: positive numbers, got {scales!r}")
        fit.setdefault("optimizer", SEARCH_OPTIMIZER)
        fit.setdefault("scaling", SEARCH_LM_SCALING)
        fit.setdefault("client", client)
        fit.setdefault("uncertainty", False)  # (a candidate's covariance is never read)
        if self.consts:
            fit.setdefault("consts", self.consts)
        return FitOptions.of(**fit), scales

    def _name_parameters(self):
        """Parameters never share a name with an input or a constant: default names that would
        are replaced by free ones; names the caller chose that collide are an error."""
        taken = set(self.inputs) | set(self.consts) | {self.target_name}
        if self.params is None:
            pool = list(DEFAULT_PARAMS) + [f"p{i}" for i in range(64)]
            free = [n for n in pool if n not in taken]
            self.params = tuple(free[:len(DEFAULT_PARAMS)])
            return
        self.params = tuple(self.params)
        _check_names("parameter", self.params)
        clash = sorted(taken & set(self.params))
        if clash:
            raise ValueError(f"task {self.name!r}: the name(s) {', '.join(clash)} are both "
                             "parameters and data inputs or constants; rename them, or leave "
                             "params unset to get free default names")

    @classmethod
    def from_arrays(cls, name, inputs, target, heldout=0.3, seed=0, **options):
        """A task whose held-out points are a seeded random fraction (or count) of the data,
        calibrated as a search of one's own data is (``fit``: DATA_FIT unless given; a Task made
        directly keeps the paper's protocol, PAPER_FIT)."""
        options.setdefault("fit", dict(DATA_FIT))
        target = _points("the target", target)
        n = target.size
        fraction = isinstance(heldout, Real) and not isinstance(heldout, bool) and 0 < heldout < 1
        # (a count is an int: 1.0 was taken for one point held out, not for a share)
        if not fraction and not (whole_number(heldout) and 1 <= heldout < n):
            raise ValueError(f"heldout is the share of the points held out, a number between 0 "
                             f"and 1 (exclusive), or their number, an int from 1 to {n - 1}; "
                             f"got {heldout!r}")
        k = int(round(heldout * n)) if fraction else int(heldout)
        idx = np.sort(np.random.default_rng(seed).permutation(n)[:k])
        return cls(name=name, inputs=inputs, target=target, heldout=idx, **options)

    def proposer(self, inner):
        """The proposer a search of this task runs (default: ``inner`` unchanged)."""
        return inner

    def references(self):
        """Reference models to print and draw beside the front (label, heldout_error, r2)."""
        return []

    def extra_summary(self, result):
        """Task-specific entries for summary.json."""
        return {}

    def extra_plots(self, result, out):
        """Task-specific plots written into ``out``; the paths written."""
        return []

    def split(self, which):
        """(inputs, target) of the "train", "heldout" or "fit" points ("fit": the training
        points the search calibrates candidates on, ``fit_points`` of them at most, a subset
        seeded by the data's size alone)."""
        idx = {"train": self.train, "heldout": self.heldout, "fit": self.fit_rows}[which]
        return {k: v[idx] for k, v in self.inputs.items()}, self.target[idx]

    @property
    def fit_rows(self):
        """The training rows of ``split("fit")``, in order."""
        return self.train[subset_rows(self.train.size, self.fit_points, self.train.size)]

    def size_warnings(self):
        """A search's warnings for the data of a least-squares task: too few points to tell a
        law from a fit of them (fewer than FEW_POINTS), and the columns of extreme size
        (``decade``), which it searches as given and may miss the law on."""
        if self.objective != "mse" or not self.inputs:
            return []
        out = []
        n = int(np.size(self.target))
        if n < FEW_POINTS:
            out.append(f"only {n} data points ({self.train.size} training, {self.heldout.size} "
                       f"held out): among thousands of programs some fit so few points closely "
                       f"by chance, and the selected model may be one of them; give more data "
                       f"(at least {FEW_POINTS} points), or fit a model you choose (ndvm fit, "
                       f"ndvm.fit)")
        for what, v in [("the target", self.target)] + [(f"input {k!r}", v)
                                                         for k, v in self.inputs.items()]:
            scale = decade(v)
            if scale != 1.0:
                out.append(f"{what} reaches {float(np.max(np.abs(v))):.3g}: the search's starts, "
                           f"literals and off-domain test are made for values near 1, and it "
                           f"may miss the law on such values; divide it by {scale:g} (as "
                           f"ndvm.SymbolicRegressor does itself)")
        return out

    @property
    def allowed_names(self):
        """Every free name a candidate may use."""
        return set(self.params) | set(self.inputs) | set(self.consts)
