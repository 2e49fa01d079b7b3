"""The built-in search tasks (``get_task``; ``Task`` itself is in task.py).

Built-in tasks carry their data in code (no network): ``damped`` and ``recurrence`` (the paper's
symbolic-regression tasks), ``kalman`` (2x2 Kalman filter NLL, q and r by maximum likelihood) and
``nile`` (local-level model of the Nile flow at Aswan, 1871-1970, by maximum likelihood). Real
series forecast one step ahead against a statsmodels baseline — ``enso``, ``sunspots``, ``co2``
(statsmodels' own data sets) — are built in ndvm.cosearch.series.
"""
from importlib import resources

import numpy as np

from ndvm.cosearch.task import (DEFAULT_PARAMS, PAPER_FIT, SEARCH_LM_SCALING,
                               SEARCH_OPTIMIZER, Task)

__all__ = ["Task", "TASKS", "get_task", "NILE", "KALMAN_SRC", "NILE_SRC", "DEFAULT_PARAMS",
           "SEARCH_OPTIMIZER", "SEARCH_LM_SCALING"]


def _paper_task(name, truth, seeds, description):
    # The paper's protocol: x = linspace(0.1, 6, 64), noise 0.02 N(0, 1); 44 train, 20 held out.
    x = np.linspace(0.1, 6.0, 64)
    y = truth(x) + 0.02 * np.random.default_rng(0).standard_normal(64)
    return Task.from_arrays(name, {"x": x}, y, heldout=20, seed=1, seeds=seeds,
                            description=description, fit=dict(PAPER_FIT))


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
