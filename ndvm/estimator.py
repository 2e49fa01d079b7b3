"""``ndvm.SymbolicRegressor``: the co-search as a scikit-learn estimator.

    m = ndvm.SymbolicRegressor(budget=10).fit(X, y)     # X [N, k], y [N]
    m.predict(X2); m.score(X2, y2); m.program_; m.sympy(); m.latex()

Columns are the inputs x0, x1, ... of the search's programs; when X had string column names
(``feature_names_in_``), ``program_`` reads them by those names (a name that cannot be a
program's variable, or is a parameter's, by one of its position that no column has) and SymPy
and LaTeX show them. The returned model is
the search's selected one (one-SE rule over cross-validation, refitted on all data);
``result_`` keeps the whole front.
"""
import itertools
import warnings

import numpy as np

try:
    from sklearn.base import BaseEstimator, RegressorMixin
    from sklearn.utils import check_random_state
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError:  # (a missing module: callers that skip on one, importorskip among them, do)
    raise ModuleNotFoundError("ndvm.SymbolicRegressor needs scikit-learn (1.6 or newer): "
                              "pip install 'ndvm[sr]'", name="sklearn") from None

from ndvm.cosearch.task import DATA_FIT, FIT_POINTS, decade  # noqa: E402
from ndvm.fit_options import whole_number  # noqa: E402

__all__ = ["SymbolicRegressor"]

PARAMS = ("a", "b", "c", "d", "f", "g")


def _seed(random_state):
    """The search's seed of ``random_state``: an int as it is (>= 0), else one drawn from the
    RandomState scikit-learn's rule makes of it (None: numpy's global one)."""
    if whole_number(random_state):
        if random_state < 0:
            raise ValueError(f"random_state is a seed >= 0, None or a numpy RandomState, got "
                             f"{random_state!r}")
        return int(random_state)
    try:
        rs = check_random_state(random_state)
    except ValueError:
        raise ValueError(f"random_state is a seed >= 0, None or a numpy RandomState, got "
                         f"{random_state!r}") from None
    return int(rs.randint(np.iinfo(np.int32).max))


def _power(scale):
    """A column's scale as a SymPy number (a float: 2.0e+12*x, not 13 digits of an integer)."""
    import sympy
    return sympy.Float(scale)


class SymbolicRegressor(RegressorMixin, BaseEstimator):
    """Symbolic regression by ndvm's co-search (genetic programming + native calibration).

    budget: seconds of search, a number or text such as "90s" or "2m" (None: no time limit;
    then set max_candidates); max_candidates:
    stop after that many proposals; random_state: the search's seed, an int (the same data,
    settings and seed give the same model when the search ends at max_candidates; a time
    budget ends it after as many candidates as the machine made in that time), None (a seed
    drawn from numpy's global random state: each fit searches afresh) or a numpy RandomState
    (a seed drawn from it); the seed a fit used is ``random_seed_``; workers: the threads the
    search runs on (1: all on the calling thread; more: the proposer works beside the
    calibrations, which every thread shares; the same candidates either way); optimizer,
    steps, starts: the calibration of each candidate (see ndvm.fit); heldout: the fraction of
    points the search scores but does not fit (between 0 and 1); max_size: the most atoms a
    program the genetic operators grow or change may have (the models proposed from the data's
    structure, such as a product of powers of many inputs, are not held to it and may be
    larger); unary, binary: the grammar's operators, lists of the core's numeric primitives
    taking one and two arguments (None: the default grammar's); parsimony: the proposer's size pressure (relative error added per atom in parent tournaments);
    refits: per round of the search, that many of the best programs are refitted once from
    many LM starts (a right structure stuck in a poor local optimum gets a second chance);
    start_scales: each candidate's starts are drawn from normal(0, s), s cycling through these
    (None: ndvm.fit's normal(0, 0.3) for every start); islands: populations searched apart,
    passing their best members on every migration_every candidates (``ndvm.search``); with
    islands > 1, workers counts worker processes. One population proposes on one thread: on
    more than a few cores, give as many islands as workers (README, "Using many cores").
    units: the units of the inputs and of the target, a dict name -> unit string, the inputs
    under their feature names (X's column names, else x0, x1, ...) and the target's under the key
    "target", e.g. {"m": "kg", "v": "m/s", "target": "J"} (every input needs one; "1" for a
    dimensionless one; see ndvm.cosearch.units.parse_unit for the unit syntax); the search then
    proposes only dimensionally consistent models and starts from the Buckingham Pi ones
    (c * M * h(pi_1, ..)). None: no units.
    fit_points: the training points each candidate is calibrated on at most (a seeded subset of
    larger data; None: all); the chosen model is refitted on every point.
    simple_constants: True (the default): a chosen constant within the data's uncertainty of a
    small integer or a half (|c| <= 5: a fitted 5.07 +- 0.07 for g/2) is written as that number
    and the rest refitted, when the error grows by less than the cross-validation's standard
    error and the data cannot tell the two apart at 95% (``result_.best["selection"]`` says
    which were set; ``result_.best["front_member"]`` is the model as the search fitted it);
    False: the constants as fitted, each with its standard error in ``stderr_``.
    stderr_: the standard errors of ``params_`` (as scipy's curve_fit gives them; None where
    the data cannot determine a parameter).
    target_scale_, input_scales_: a column whose largest magnitude is outside [1e-3, 1e4) is
    searched divided by the power of ten at or below it (values near 1, for which the search's
    starts and literals are made): ``program_``, ``predict``, ``sympy`` and ``latex`` multiply
    it out again; ``result_`` (its records, front and errors) is the search of the divided
    columns (1.0: a column searched as it is).
    Ctrl-C ends the search early: ``fit`` returns the best model of the candidates made, with a
    UserWarning that says so (``result_.stopped == "interrupted"``).
    verbose: a status line on stderr while the search runs (candidates, rate, best model),
    and the search's warnings as they happen; without it, ``fit`` passes each warning of the
    search (``result_.warnings``: islands a time budget left unrun, workers that died, a note
    that the proposing thread held the workers back, ...) on as a ``UserWarning``.
    """

    def __init__(self, budget=10.0, max_candidates=None, random_state=0, workers=1,
                 optimizer=DATA_FIT["optimizer"], steps=DATA_FIT["steps"],
                 starts=DATA_FIT["starts"], heldout=0.3, max_size=25, unary=None, binary=None,
                 parsimony=0.05, refits=1, start_scales=DATA_FIT["start_scales"],
                 islands=1, migration_every=256, units=None, fit_points=FIT_POINTS,
                 simple_constants=True, verbose=False):
        self.budget = budget
        self.max_candidates = max_candidates
        self.random_state = random_state
        self.workers = workers
        self.optimizer = optimizer
        self.steps = steps
        self.starts = starts
        self.heldout = heldout
        self.max_size = max_size
        self.unary = unary
        self.binary = binary
        self.parsimony = parsimony
        self.refits = refits
        self.start_scales = start_scales
        self.simple_constants = simple_constants
        self.islands = islands
        self.migration_every = migration_every
        self.units = units
        self.fit_points = fit_points
        self.verbose = verbose

    def _inputs(self, X):
        return {f"x{i}": np.ascontiguousarray(X[:, i], dtype=np.float64)
                for i in range(X.shape[1])}

    def _units(self, n_features):
        """``units`` checked against the feature names, held under the program's x0, x1, ..."""
        if self.units is None:
            return None
        from ndvm.cosearch.units import Units
        names = getattr(self, "feature_names_in_", None)
        names = ([str(n) for n in names] if names is not None
                 else [f"x{i}" for i in range(n_features)])
        u = Units.of(self.units, names)
        return Units({f"x{i}": u.inputs[n] for i, n in enumerate(names)}, u.target)

    def fit(self, X, y):
        """Search programs for y ~ f(X); returns self."""
        from ndvm.cosearch.grammar import Grammar
        from ndvm.cosearch.loop import parse_budget, search
        from ndvm.cosearch.tasks import Task

        budget = parse_budget(self.budget)  # (seconds; None: no time limit)
        if budget is None and self.max_candidates is None:
            raise ValueError("set a time budget or max_candidates")
        if not 0 < self.heldout < 1:
            raise ValueError(f"heldout is the fraction of points held out, between 0 and 1 "
                             f"(exclusive), got {self.heldout!r}")
        X, y = validate_data(self, X, y, y_numeric=True, dtype=np.float64)
        n = y.size
        if n < 2:
            raise ValueError(f"SymbolicRegressor needs at least 2 samples, got n_samples={n}")
        k = int(min(n - 1, max(1, round(self.heldout * n))))
        self.random_seed_ = seed = _seed(self.random_state)
        # a column of extreme size is searched divided by a power of ten (the model handed back
        # multiplies it out again): the search's starts, literals and off-domain test are made
        # for values near 1, and a target near 1e12 came back a polynomial, near 1e100 a
        # constant with R^2 -3.7
        self.input_scales_ = np.array([decade(X[:, i]) for i in range(X.shape[1])])
        self.target_scale_ = decade(y)
        inputs = self._inputs(X / self.input_scales_)
        y = y / self.target_scale_
        fit = {"optimizer": self.optimizer, "steps": self.steps, "starts": self.starts}
        if self.start_scales:
            fit["start_scales"] = tuple(self.start_scales)
        if self.optimizer == "adam":
            fit["lr"] = 0.05
        task = Task.from_arrays("symbolic-regression", inputs, y, heldout=k,
                                seed=seed, params=PARAMS, fit=fit,
                                loops=False, threshold=None, budget_seconds=None,
                                data_units=self._units(X.shape[1]), fit_points=self.fit_points)
        # (a string is passed on whole, for the search's Grammar.check to refuse by name)
        ops = {k: (v if isinstance(v, str) else tuple(v))
               for k, v in (("unary", self.unary), ("binary", self.binary)) if v is not None}
        g = Grammar(inputs=tuple(inputs), params=PARAMS, loop=False, max_size=self.max_size,
                    **ops)
        # the final cross-validated selection runs after the search: keep ~10% of the budget
        budget = None if budget is None else 0.9 * budget
        res = search(task, proposer="mutate", budget=budget, max_candidates=self.max_candidates,
                     seed=seed, workers=self.workers, grammar=g,
                     parsimony=self.parsimony, refits=self.refits, islands=self.islands,
                     migration_every=self.migration_every, progress=bool(self.verbose),
                     simple_constants=self.simple_constants)
        if not self.verbose:  # (verbose: the search showed each on stderr as it happened)
            for w in dict.fromkeys(res.warnings):
                warnings.warn(f"ndvm search: {w}", UserWarning, stacklevel=2)
        if res.stopped == "interrupted":  # (Ctrl-C ends the search, not the program: say so)
            warnings.warn(f"ndvm search: interrupted (Ctrl-C) after {len(res.records)} "
                          f"candidates: the model is the best of those; a loop of fits goes on "
                          f"to its next one (press Ctrl-C again to stop it there)", UserWarning,
                          stacklevel=2)
        if res.best is None:  # (why, when the search said: its workers died, its cluster was
            # lost, its proposer failed; else the budget ended before a model was calibrated)
            why = "its warnings say why" if res.warnings else "raise the budget"
            raise RuntimeError(f"the search calibrated no model (stopped: {res.stopped}); {why}")
        self.result_ = res
        self.program_ = self._as_data(res.best["model"])
        self.params_ = dict(res.best["params"])
        self.stderr_ = dict(res.best.get("stderr") or dict.fromkeys(self.params_))
        self.size_ = int(res.best["size"])
        return self

    def predict(self, X):
        """The selected model's prediction for every row of X."""
        check_is_fitted(self, "result_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.result_.predict(self._inputs(X / self.input_scales_)) * self.target_scale_

    def _scaled(self):
        """Whether the search ran on columns divided by a power of ten (``task.decade``)."""
        return self.target_scale_ != 1.0 or bool(np.any(self.input_scales_ != 1.0))

    def _names(self):
        """The names the programs handed back use for x0, x1, ...: each column's own name (X's,
        ``feature_names_in_``) where it can be a program's variable and is no parameter's name,
        else one of its position (x<i>, x_<i>, col<i>: the first that no column and no
        parameter is named), so that no name in the program is another column's (``(* a x0)``
        of columns x1, x2, ... read x0 as the column x1; and all of them fell back to x0, x1,
        ... for one column named c, x1 then naming the column x2). None without column names
        (x0, x1, ...)."""
        from ndvm.cosearch.task import _check_names
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return None
        names = [str(n) for n in names]

        def usable(n):
            try:
                _check_names("input", [n])
            except ValueError:
                return False
            return n not in PARAMS

        own = [usable(n) for n in names]
        taken = {n for n, ok in zip(names, own) if ok} | set(PARAMS)
        out = []
        for i, (n, ok) in enumerate(zip(names, own)):
            if not ok:
                n = next(c for c in itertools.chain((f"x{i}", f"x_{i}", f"col{i}"),
                                                    (f"col{i}_{k}" for k in itertools.count()))
                         if c not in taken)
                taken.add(n)
            out.append(n)
        return out

    def _as_data(self, model):
        """``model`` (a source over the searched columns x0, x1, ...) as a program of the data's
        own: each input under its feature name (``_names``), divided by its scale when it was
        scaled, and the whole times the target's scale."""
        names = self._names()
        if not self._scaled() and names is None:
            return model
        from ndvm.cosearch.sexpr import to_source, to_tree

        put = {}
        for i, s in enumerate(self.input_scales_):
            name = f"x{i}" if names is None else names[i]
            put[f"x{i}"] = name if s == 1.0 else ["/", name, float(s)]

        def rename(t):
            if isinstance(t, list):
                return [rename(x) for x in t]
            return put.get(t, t) if isinstance(t, str) else t

        tree = rename(to_tree(model))
        if self.target_scale_ != 1.0:
            tree = ["*", float(self.target_scale_), tree]
        return to_source(tree)

    def _symbols(self):
        import sympy
        names = getattr(self, "feature_names_in_", None)
        if names is None:
            return {}
        return {sympy.Symbol(f"x{i}"): sympy.Symbol(str(n)) for i, n in enumerate(names)}

    def sympy(self, which=None, digits=None):
        """The selected model (``which`` None), or the front member ``result_.front[which]``
        (an index into the front, smallest first: not a record id), as a SymPy expression."""
        import sympy
        check_is_fitted(self, "result_")
        e = self.result_.sympy(which, digits=digits)
        if self._scaled():  # (the searched columns divided by powers of ten: multiplied out)
            e = e.xreplace({sympy.Symbol(f"x{i}"): sympy.Symbol(f"x{i}") / _power(s)
                            for i, s in enumerate(self.input_scales_) if s != 1.0})
            e = _power(self.target_scale_) * e
        return e.xreplace(self._symbols())

    def latex(self, which=None, digits=6):
        """The selected model (or a front member) as LaTeX (a column name that is not one
        symbol, such as ``mass kg``, set as text)."""
        from ndvm.cosearch.export import latex
        check_is_fitted(self, "result_")
        return latex(self.sympy(which, digits=digits))
