"""Search tasks: data, a train / held-out split, the allowed parameters, fit options, a budget.

Built-in tasks carry their data in code (no network): ``damped`` and ``recurrence`` (the paper's
symbolic-regression tasks), ``kalman`` (2x2 Kalman filter NLL, q and r by maximum likelihood) and
``nile`` (local-level model of the Nile flow at Aswan, 1871-1970, by maximum likelihood). Real
series forecast one step ahead against a statsmodels baseline — ``enso``, ``sunspots``, ``co2``
(statsmodels' own data sets) — are built in ndvm.cosearch.series.
"""
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

from ndvm.fit_options import FitOptions

__all__ = ["Task", "TASKS", "get_task", "NILE", "KALMAN_SRC", "NILE_SRC", "DEFAULT_PARAMS",
           "SEARCH_OPTIMIZER", "SEARCH_LM_SCALING"]

DEFAULT_PARAMS = ("a", "b", "c", "d")
# the co-search's calibration (the paper's protocol: 50 Adam steps at lr 0.05, 8 starts); a task
# whose fit options name no optimizer uses it, whatever ndvm.fit's own default is
SEARCH_OPTIMIZER = "adam"
# the search's LM fits (calibrations with optimizer "lm", refits, selection): MINPACK's trust
# region alone, not ndvm.fit's default of both regions as two lanes (twice the work per fit; the
# search already runs many starts and candidates)
SEARCH_LM_SCALING = "jac"


@dataclass
class Task:
    """What a search fits, and how it judges a fit.

    inputs: name -> [N] data inputs; target: [N]; heldout: indices scored but never fitted;
    params: the parameter names a candidate may use (default a b c d, skipping any name an input
    or a constant uses; names given that collide with one are an error); consts: shared constants (vectors, matrices);
    fit: options for ndvm.fit (optimizer, steps, starts, lr; a fit dict that names no optimizer
    keeps the co-search's, SEARCH_OPTIMIZER, not ndvm.fit's own default; "start_scales": see
    ``fit_options``), checked when the task is made; threshold: a held-out
    R^2 above it is a good fit; budget: seconds and/or candidates; objective: "mse" (fit the
    target) or "nll" (the program's value is a negative log-likelihood to minimize;
    ``positive`` names are kept above zero); seeds: sources that start the population (and the
    built-in replay); proposers: the proposers that apply, the first being the default; series:
    for likelihood tasks, params -> {"x", "data", "fitted", "label", "xlabel", "ylabel"} for
    front.png.
    """

    name: str
    inputs: dict
    target: np.ndarray
    heldout: np.ndarray
    params: tuple = None
    consts: dict = field(default_factory=dict)
    fit: dict = field(default_factory=lambda: {"optimizer": SEARCH_OPTIMIZER, "steps": 50,
                                               "starts": 8, "lr": 0.05})
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

    def __post_init__(self):
        self._name_parameters()
        self.target = np.asarray(self.target, dtype=np.float64).reshape(-1)
        self.inputs = {k: np.asarray(v, dtype=np.float64).reshape(-1) for k, v in self.inputs.items()}
        for k, v in self.inputs.items():
            if v.size != self.target.size:
                raise ValueError(f"input {k!r} has {v.size} points but the target has "
                                 f"{self.target.size}")
        self.heldout = np.asarray(self.heldout, dtype=np.int64).reshape(-1)
        mask = np.ones(self.target.size, dtype=bool)
        mask[self.heldout] = False
        self.train = np.flatnonzero(mask)
        if self.objective not in ("mse", "nll"):
            raise ValueError(f"objective must be 'mse' or 'nll', got {self.objective!r}")
        if self.objective == "mse" and (self.train.size == 0 or self.heldout.size == 0):
            raise ValueError("an mse task needs both training and held-out points")
        self.fit_options()  # (bad fit options raise here, not once the search has begun)

    def fit_options(self, overrides=None, client="dmci"):
        """The search's calibration of this task: (FitOptions, start_scales). The options are
        ``fit`` with ``overrides`` (ndvm.fit's names), the co-search's optimizer and LM scaling
        where neither names one, ``client`` and the task's constants; start_scales (from
        "start_scales", None: ndvm.fit's normal(0, 0.3) draws) are the standard deviations the
        search draws each candidate's starts from."""
        fit = dict(self.fit)
        fit.update(overrides or {})
        scales = fit.pop("start_scales", None)
        fit.setdefault("optimizer", SEARCH_OPTIMIZER)
        fit.setdefault("scaling", SEARCH_LM_SCALING)
        fit.setdefault("client", client)
        if self.consts:
            fit.setdefault("consts", self.consts)
        return FitOptions.of(**fit), scales

    def _name_parameters(self):
        """Parameters never share a name with an input or a constant: default names that would
        are replaced by free ones; names the caller chose that collide are an error."""
        taken = set(self.inputs) | set(self.consts)
        if self.params is None:
            pool = list(DEFAULT_PARAMS) + [f"p{i}" for i in range(64)]
            free = [n for n in pool if n not in taken]
            self.params = tuple(free[:len(DEFAULT_PARAMS)])
            return
        self.params = tuple(self.params)
        clash = sorted(taken & set(self.params))
        if clash:
            raise ValueError(f"task {self.name!r}: the name(s) {', '.join(clash)} are both "
                             "parameters and data inputs or constants; rename them, or leave "
                             "params unset to get free default names")

    @classmethod
    def from_arrays(cls, name, inputs, target, heldout=0.3, seed=0, **options):
        """A task whose held-out points are a seeded random fraction (or count) of the data."""
        target = np.asarray(target, dtype=np.float64).reshape(-1)
        n = target.size
        k = int(round(heldout * n)) if heldout < 1 else int(heldout)
        idx = np.sort(np.random.default_rng(seed).permutation(n)[:k])
        return cls(name=name, inputs=inputs, target=target, heldout=idx, **options)

    @classmethod
    def from_series(cls, name, y, lags=(1, 2), test=0.2, **options):
        """A one-step-ahead forecasting task for a series (see ndvm.cosearch.series)."""
        from ndvm.cosearch.series import from_series
        return from_series(name, y, lags=lags, test=test, **options)

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
        """(inputs, target) of the "train" or "heldout" points."""
        idx = self.train if which == "train" else self.heldout
        return {k: v[idx] for k, v in self.inputs.items()}, self.target[idx]

    @property
    def allowed_names(self):
        """Every free name a candidate may use."""
        return set(self.params) | set(self.inputs) | set(self.consts)


def _paper_task(name, truth, seeds, description):
    # The paper's protocol: x = linspace(0.1, 6, 64), noise 0.02 N(0, 1); 44 train, 20 held out.
    x = np.linspace(0.1, 6.0, 64)
    y = truth(x) + 0.02 * np.random.default_rng(0).standard_normal(64)
    return Task.from_arrays(name, {"x": x}, y, heldout=20, seed=1, seeds=seeds,
                            description=description)


def damped():
    """y = exp(-0.3 x) cos(2 x) + noise: symbolic regression (the paper's first task)."""
    return _paper_task("damped", lambda x: np.exp(-0.3 * x) * np.cos(2.0 * x),
                       ("(* a x)", "(* a (sin (* b x)))", "(+ a (* b x))"),
                       "y = exp(-0.3 x) cos(2 x) + 0.02 noise on x in [0.1, 6]")


def recurrence():
    """y = sin(1.2 x) + 0.3 x + noise: iterated maps (the paper's second task)."""
    return _paper_task("recurrence", lambda x: np.sin(1.2 * x) + 0.3 * x,
                       ("(* a x)", "(loop ((s (* a x)) (k 0)) (if (= k 10) s "
                                   "(recur (+ (* b s) c) (+ k 1))))"),
                       "y = sin(1.2 x) + 0.3 x + 0.02 noise on x in [0.1, 6]")


# the 2x2 Kalman-filter NLL program (kalman2d_T80), shipped in ndvm/examples
KALMAN_SRC = (resources.files("ndvm") / "examples" / "kalman2d_T80.scm").read_text()


# A likelihood task's candidates are whole filters; the built-in program is replayed (or the
# user's own, --candidates FILE); the expression grammar of mutate and llm does not describe them.
_LIKELIHOOD_PROPOSERS = ("replay",)


def random_walk_filter(y, q, r, a0, p0):
    """Filtered levels of y[t] = mu[t] + N(0, r), mu[t+1] = mu[t] + N(0, q), per column."""
    y = np.asarray(y, dtype=np.float64)
    a, p = np.full(y.shape[1:], float(a0)), float(p0)
    out = np.empty_like(y)
    for t in range(y.shape[0]):
        g = p / (p + r)
        a = a + g * (y[t] - a)
        out[t] = a
        p = p * (1 - g) + q
    return out


def kalman_observations(q=0.05, r=0.1, T=80, seed=0):
    """Observations of a 2-D random walk (state noise q, observation noise r), seeded."""
    rng = np.random.default_rng(seed)
    x = np.cumsum(np.sqrt(q) * rng.standard_normal((T, 2)), axis=0)
    return x + np.sqrt(r) * rng.standard_normal((T, 2))


def _kalman_series(params):
    obs = kalman_observations()
    q, r = params.get("q"), params.get("r")
    if q is None or r is None:
        return None
    # the program starts from x = 0, P = I and adds Q before each update
    level = random_walk_filter(obs, q, r, 0.0, 1.0 + q)
    return {"x": np.arange(obs.shape[0]), "data": obs[:, 0], "fitted": level[:, 0],
            "data_label": "observations (first coordinate)",
            "label": f"filtered state, q={q:.3g}, r={r:.3g}", "xlabel": "step",
            "ylabel": "first coordinate", "title": "kalman: the filtered state of the best fit"}


def kalman():
    """Calibrate q and r of a 2x2 Kalman filter by maximum likelihood on 80 simulated steps."""
    return Task(name="kalman", inputs={}, target=np.zeros(1), heldout=np.zeros(0),
                params=("q", "r"), consts={"obs": kalman_observations()}, objective="nll",
                positive=("q", "r"), init={"q": 1.0, "r": 1.0}, seeds=(KALMAN_SRC,),
                threshold=None, loops=False, budget_seconds=10.0, proposers=_LIKELIHOOD_PROPOSERS,
                series=_kalman_series,
                description="2-D random walk observed in noise (true q = 0.05, r = 0.1), T = 80")


# Annual flow of the Nile at Aswan, 1871-1970, in 1e8 m^3 (Durbin & Koopman; public domain).
NILE = np.array([
    1120, 1160, 963, 1210, 1160, 1160, 813, 1230, 1370, 1140,
    995, 935, 1110, 994, 1020, 960, 1180, 799, 958, 1140,
    1100, 1210, 1150, 1250, 1260, 1220, 1030, 1100, 774, 840,
    874, 694, 940, 833, 701, 916, 692, 1020, 1050, 969,
    831, 726, 456, 824, 702, 1120, 1100, 832, 764, 821,
    768, 845, 864, 862, 698, 845, 744, 796, 1040, 759,
    781, 865, 845, 944, 984, 897, 822, 1010, 771, 676,
    649, 846, 812, 742, 801, 1040, 860, 874, 848, 890,
    744, 749, 838, 1050, 918, 986, 797, 923, 975, 815,
    1020, 906, 901, 1170, 912, 746, 919, 718, 714, 740,
], dtype=np.float64)

NILE_SRC = """\
; Local-level model y[t] = mu[t] + eps (variance r), mu[t+1] = mu[t] + eta (variance q):
; the exact-diffuse Gaussian negative log-likelihood by the Kalman filter (the first observation
; fixes the level, the other n - 1 are predicted).
(let ((n (vlen y)))
  (loop ((t 1) (a (ref y 0)) (p (+ r q)) (nll 0.0))
    (if (= t n)
        (* 0.5 (+ nll (* (- n 1) (log (* 2 3.141592653589793)))))
        (let* ((f (+ p r))
               (v (- (ref y t) a))
               (g (/ p f)))
          (recur (+ t 1) (+ a (* g v)) (+ (* p (- 1 g)) q)
                 (+ nll (log f) (/ (* v v) f)))))))
"""


def _nile_series(params):
    q, r = params.get("q"), params.get("r")
    if q is None or r is None:
        return None
    # as NILE_SRC: the first observation fixes the level, then P = q + r at the second
    level = np.concatenate([[NILE[0]], random_walk_filter(NILE[1:], q, r, NILE[0], q + r)])
    return {"x": np.arange(1871, 1971), "data": NILE, "fitted": level,
            "data_label": "annual flow", "label": f"filtered level, q={q:.4g}, r={r:.4g}",
            "xlabel": "year", "ylabel": "flow at Aswan (1e8 m³)",
            "title": "nile: the filtered level of the local-level model"}


def nile():
    """The Nile flow as a local-level model: level (q) and irregular (r) variances by ML."""
    v = float(np.var(NILE))
    return Task(name="nile", inputs={}, target=np.zeros(1), heldout=np.zeros(0),
                params=("q", "r"), consts={"y": NILE}, objective="nll", positive=("q", "r"),
                init={"q": v / 2, "r": v / 2}, seeds=(NILE_SRC,), threshold=None, loops=False,
                budget_seconds=10.0, proposers=_LIKELIHOOD_PROPOSERS, series=_nile_series,
                description="Nile flow at Aswan 1871-1970, local-level model by maximum likelihood")


def _series(name):
    def make():
        from ndvm.cosearch import series
        return getattr(series, name)()
    make.__doc__ = f"The {name} series task (ndvm.cosearch.series; needs statsmodels)."
    return make


TASKS = {"damped": damped, "recurrence": recurrence, "kalman": kalman, "nile": nile,
         "enso": _series("enso"), "sunspots": _series("sunspots"), "co2": _series("co2")}


def get_task(name):
    """A fresh built-in task by name."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; built-in tasks: {', '.join(TASKS)}")
    return TASKS[name]()
