"""Real series as search tasks: one-step-ahead forecasting scored against the statistician's model.

A series y[0..n) becomes rows t = max(lags)..n-1 whose target is y[t] and whose inputs are the
lagged values y[t-k] (named ``y1``, ``y2``, ``y12``, ...), so a program sees only the past. The
first 80% of the series trains, the last 20% is held out; every held-out forecast is one step
ahead from observed data. Values are standardized with the training part's mean and standard
deviation (the task's errors are in those units; RMSE is reported in the series' own units).
Missing values: a missing target is never fitted nor scored; a missing lag is carried forward
from the last observation (causal: a forecast never sees a later value). The baseline is
statsmodels' (AutoReg or SARIMAX, order by AIC on the training part) forecasting the same points.
Selection: the search ranks candidates by held-out error, so its "best" is chosen on the held-out
data; ``aic_pick`` chooses by training AIC only, as the baseline's order is chosen.
"""
import hashlib
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import atoms, to_tree
from ndvm.cosearch.task import Task, named_in

__all__ = ["SeriesTask", "from_series", "load", "enso", "sunspots", "co2", "Baseline",
           "fit_baseline", "persistence", "aic_pick", "best_and_simplest", "describe",
           "StartWith", "DATA_EXTRA"]

DATA_EXTRA = "ndvm[data]"
# enough for an AR(9) with an intercept and a few more; none is a local name (s, k, w, u0)
PARAMS = ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "p", "q")


def _statsmodels():
    """The statsmodels package, or an ImportError that names the extra to install."""
    try:
        import statsmodels
        import statsmodels.datasets  # noqa: F401 - the built-in series live here
    except ImportError:
        raise ImportError("the enso, sunspots and co2 tasks and the ARIMA baseline need "
                          f"statsmodels: pip install \"{DATA_EXTRA}\" (or pip install "
                          "statsmodels)") from None
    return statsmodels


def load(name):
    """(values, times in decimal years) of a built-in series: "enso", "sunspots" or "co2".

    All three ship with statsmodels (public domain): ``elnino`` — monthly sea-surface temperature
    (deg C) of the Nino 1+2 region, 1950-2010 (NOAA ERSST.V3B); ``sunspots`` — yearly sunspot
    number, 1700-2008 (NOAA NGDC); ``co2`` — weekly Mauna Loa flask CO2 (ppm), 1958-2001
    (Keeling & Whorf, CDIAC), taken here as monthly means of the weeks measured; a month with no
    measurement is missing (NaN: five months, all in the training part).
    """
    sm = _statsmodels()
    ds = sm.datasets
    if name == "enso":
        d = ds.elnino.load_pandas().data
        y = d.iloc[:, 1:13].to_numpy(dtype=np.float64).reshape(-1)
        t = np.repeat(d["YEAR"].to_numpy(dtype=np.float64), 12) + np.tile(np.arange(12) / 12,
                                                                          len(d))
        return y, t
    if name == "sunspots":
        d = ds.sunspots.load_pandas().data
        return d["SUNACTIVITY"].to_numpy(dtype=np.float64), d["YEAR"].to_numpy(dtype=np.float64)
    if name == "co2":
        weekly = ds.co2.load_pandas().data["co2"]
        monthly = weekly.resample("MS").mean()
        idx = monthly.index
        return (monthly.to_numpy(dtype=np.float64),
                (idx.year + (idx.month - 1) / 12).to_numpy(dtype=np.float64))
    raise ValueError(f"unknown series {name!r}; built-in series: enso, sunspots, co2")


def _carry_forward(y):
    out = np.array(y, dtype=np.float64)
    for i in range(1, out.size):
        if np.isnan(out[i]):
            out[i] = out[i - 1]
    return out


@dataclass
class Baseline:
    """A fitted statsmodels model and its one-step forecasts of the held-out points.

    label: e.g. "SARIMAX(2,0,0)(0,1,1,12)"; forecast: [n] one-step predictions in the series'
    units at every index (NaN where none); aic: label -> AIC of every model tried on the
    training part; seconds: fitting time (0 when read from the cache).
    """

    label: str
    kind: str
    spec: dict
    aic: dict
    params: list
    forecast: np.ndarray
    seconds: float = 0.0
    cached: bool = False


@dataclass
class SeriesTask(Task):
    """A Task made from one series (see the module docstring): one-step forecasts, lag inputs.

    series: [n] values (NaN = missing); times: [n]; lags: the lag inputs; n_train: the index
    of the first held-out value; center, scale: the standardization; rows: [N] the index of
    each task row in the series; baseline_grid: the statsmodels models tried (by AIC).
    """

    series: np.ndarray = None
    times: np.ndarray = None
    lags: tuple = ()
    n_train: int = 0
    center: float = 0.0
    scale: float = 1.0
    rows: np.ndarray = None
    units: str = ""
    baseline_grid: dict = None
    _baseline: Baseline = field(default=None, repr=False)

    # --- forecasts in the series' own units -------------------------------------------------
    def to_units(self, z):
        """Task values (standardized) -> the series' units."""
        return np.asarray(z) * self.scale + self.center

    def rmse(self, mse):
        """A task (standardized) mean squared error -> RMSE in the series' units."""
        return math.sqrt(mse) * self.scale if math.isfinite(mse) else math.inf

    def persistence(self):
        """One-step persistence forecasts y[t-1] of every row (series units)."""
        return _carry_forward(self.series)[self.rows - 1]

    def errors_of(self, forecast_rows):
        """(held-out MSE in task units, RMSE in series units) of per-row forecasts."""
        e = (forecast_rows[self.heldout] - self.series[self.rows[self.heldout]]) / self.scale
        mse = float(np.mean(e ** 2))
        return mse, self.rmse(mse)

    def proposer(self, inner):
        """The search's proposer for this task: the seed programs first, then ``inner``."""
        return StartWith(self.seeds, inner)

    def baseline(self, cache=True):
        """The statsmodels baseline (fitted on first use, then kept; see ``fit_baseline``)."""
        if self._baseline is None:
            self._baseline = fit_baseline(self.series, self.n_train, self.baseline_grid,
                                          cache=cache)
        return self._baseline

    # --- hooks read by the search's table, summary and plots ----------------------------------
    def references(self):
        """The baseline and persistence as rows: label, held-out error (task units), R2, RMSE."""
        var = float(np.var(self.target[self.heldout]))
        out = []
        b = self.baseline()
        for label, fc in ((b.label + " (AIC)", b.forecast[self.rows]),
                          ("persistence y[t-1]", self.persistence())):
            mse, rmse = self.errors_of(fc)
            out.append({"label": label, "heldout_error": mse, "r2": 1.0 - mse / var,
                        "rmse": rmse})
        return out

    def extra_summary(self, result):
        """The series' numbers for summary.json: baseline, persistence, best and simplest RMSE."""
        refs = self.references()
        b = self.baseline()
        best, simple = best_and_simplest(result.records)
        pers = refs[1]["heldout_error"]

        def row(r):
            if r is None:
                return None
            return {"id": r["id"], "model": r["model"], "size": r["size"], "params": r["params"],
                    "heldout_rmse": self.rmse(r["heldout_error"]),
                    "skill_vs_persistence": 1.0 - r["heldout_error"] / pers}
        return {"series": {
            "units": self.units, "n": int(self.series.size), "n_train": int(self.n_train),
            "heldout_points": int(self.heldout.size), "lags": list(self.lags),
            "center": self.center, "scale": self.scale,
            "baseline": {"label": b.label, "aic": b.aic, "heldout_rmse": refs[0]["rmse"],
                         "skill_vs_persistence": 1.0 - refs[0]["heldout_error"] / pers,
                         "fit_seconds": round(b.seconds, 3), "cached": b.cached},
            "persistence_rmse": refs[1]["rmse"],
            "best": row(best), "simplest_within_5pct": row(simple),
            "aic_pick": row(aic_pick(result.records, int(self.train.size)))}}

    def forecast(self, record):
        """One-step forecasts of every row (series units) by a search record's program."""
        import ndvm
        prog = ndvm.parse(record["model"])  # (the program its params belong to)
        data = named_in(self.inputs, prog)
        with np.errstate(all="ignore"):
            v = ndvm.Evaluator().evaluate(prog, params=record["params"] or None,
                                          data=data).value[0]
        return self.to_units(np.broadcast_to(v, self.target.shape))

    def extra_plots(self, result, out):
        """forecast.png: the held-out data, the best and simplest programs, the baseline."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return []
        best, simple = best_and_simplest(result.records)
        held = self.rows[self.heldout]
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(self.times[held], self.series[held], "k.", ms=4, label="held-out data")
        b = self.baseline()
        mse, rmse = self.errors_of(b.forecast[self.rows])
        ax.plot(self.times[held], b.forecast[held], c="C0", lw=1,
                label=f"{b.label}: RMSE {rmse:.4g}")
        for r, c, name in ((best, "C3", "best program"), (simple, "C2", "simplest within 5%")):
            if r is None or (name != "best program" and r is best):
                continue
            fc = self.forecast(r)
            label = r["model"] if len(r["model"]) < 50 else r["model"][:47] + "..."
            ax.plot(self.times[held], fc[self.heldout], c=c, lw=1.5 if c == "C3" else 1,
                    label=f"{name}: RMSE {self.rmse(r['heldout_error']):.4g}, {label}")
        ax.set_xlabel("year")
        ax.set_ylabel(self.units or self.name)
        ax.set_title(f"{self.name}: one-step forecasts of the held-out 20%")
        ax.legend(fontsize=6, loc="best")
        fig.tight_layout()
        path = Path(out) / "forecast.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return [path]


def best_and_simplest(records):
    """The best scored record and the smallest one whose RMSE is within 5% of it (or None)."""
    def ok():  # (read again, not kept: a long search's records are read a block at a time)
        return (r for r in records if r.get("status") == "ok" and math.isfinite(r["heldout_error"]))
    best = min(ok(), key=lambda r: (r["heldout_error"], r["size"], r["id"]), default=None)
    if best is None:
        return None, None
    limit = (1.05 * math.sqrt(best["heldout_error"])) ** 2
    return best, min((r for r in ok() if r["heldout_error"] <= limit),
                     key=lambda r: (r["size"], r["heldout_error"], r["id"]))


def aic_pick(records, n):
    """The record with the lowest AIC on the training part, n log(train MSE) + 2k, where k counts
    the fitted parameters and the non-integer literals (constants tuned by mutation): a choice
    that never looks at the held-out data, as the baseline's order is chosen."""
    best, best_aic = None, math.inf
    for r in records:
        if r.get("status") != "ok" or not (r["train_error"] > 0) or not math.isfinite(
                r["train_error"]) or not math.isfinite(r["heldout_error"]):
            continue
        k = len(r["params"]) + sum(1 for a in atoms(to_tree(r["model"]))
                                   if isinstance(a, float) and not a.is_integer())
        aic = n * math.log(r["train_error"]) + 2 * k
        if aic < best_aic:
            best, best_aic = r, aic
    return best


def persistence(y):
    """y[t-1] (missing values carried forward) as the forecast of y[t]; NaN at t = 0."""
    f = _carry_forward(y)
    return np.concatenate([[np.nan], f[:-1]])


def _lag_name(k):
    return f"y{k}"


def _smoother(items, a="a"):
    """Exponential smoothing over ``items`` (oldest first) as a loop over a vector: the state s
    starts at the window's mean and moves toward each value by the fraction a (a one-parameter
    state-space filter; starting at the mean keeps the truncated window from over-weighting its
    oldest value)."""
    return (f"(let ((w (vec {' '.join(items)}))) (loop ((s (/ (vsum w) {len(items)})) (k 0)) "
            f"(if (= k {len(items)}) s (recur (+ s (* {a} (- (ref w k) s))) (+ k 1)))))")


def _seeds(recent, period, window):
    """Textbook starting structures: persistence, AR(1), AR(2), a smoother over the recent
    values, and with a period the seasonal naive forecast and seasonally smoothed forecasts."""
    y = [_lag_name(k) for k in recent]
    seeds = [y[0], f"(+ (* a {y[0]}) b)"]
    if len(y) > 1:
        seeds.append(f"(+ (* a {y[0]}) (* b {y[1]}) c)")
    if len(y) >= 3 and tuple(recent[:3]) == (1, 2, 3):
        seeds.append(_smoother([_lag_name(k) for k in reversed(recent[:6])]))
    if period and window:
        P = period

        def level(o):  # the smoothed value o months after the same season, window years back
            return _smoother([_lag_name(P * j + o) for j in range(window, 0, -1)])

        def step(o):  # the smoothed seasonal increment y[t-Pj+o] - y[t-Pj+o+1]
            return _smoother([f"(- {_lag_name(P * j + o)} {_lag_name(P * j + o + 1)})"
                              for j in range(window, 0, -1)])
        p, p1 = _lag_name(P), _lag_name(P + 1)
        seeds += [p, f"(+ {p} (* a (- y1 {p1})))", f"(+ y1 (- {p} {p1}))",
                  f"(+ y1 {step(0)})", f"(+ y1 {step(0)} (* b (- (- y1 y2) {step(1)})))",
                  f"(+ {level(0)} (* b (- y1 {level(1)})))",
                  f"(+ {level(0)} (* b (- y1 {level(1)})) (* c (- y2 {level(2)})))"]
    return tuple(seeds)


class StartWith:
    """A proposer that first offers the task's seed programs as they are, then defers to
    ``inner`` (so the textbook structures are scored before the search mutates them)."""

    def __init__(self, sources, inner):
        self.queue = list(sources)
        self.inner = inner
        self.name = getattr(inner, "name", "custom")
        self.pipelined = getattr(inner, "pipelined", False)

    def propose(self, n, state):
        self.queue = [src for src in self.queue if src not in state.seen]  # a resumed run
        if self.queue:
            out, self.queue = self.queue[:n], self.queue[n:]
            return out
        return self.inner.propose(n, state)


def from_series(name, y, lags=(1, 2), test=0.2, period=None, window=8, times=None,
                baseline=None, units="", description="", **options):
    """A one-step-ahead forecasting task for the series ``y`` (NaN marks a missing value).

    lags: the recent lagged values the grammar grows programs from (inputs ``y1``, ``y2``, ...);
    period: a seasonal period: the lags P, P+1 and, for ``window`` seasons back, every lag
    P*j + 0..2 become inputs too (for the seasonal smoothing loops among the seeds); test: the
    held-out fraction at the end; baseline: the statsmodels models to choose from by AIC on the
    training part — ``{"kind": "autoreg", "maxlag": p}`` or ``{"kind": "sarimax", "orders":
    [(order, seasonal_order, trend), ...]}``; default AutoReg up to max(lags), or with a period
    a small seasonal ARIMA grid. Other options go to Task (fit, budget_seconds, params, ...).
    """
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    n = y.size
    recent = tuple(sorted(int(k) for k in lags))
    if not recent or recent[0] < 1:
        raise ValueError(f"lags must be positive integers, got {recent}")
    window = window if period else 0
    grown = set(recent) | ({period, period + 1} if period else set())
    every = set(grown)
    for j in range(1, window + 1):
        every |= {period * j, period * j + 1, period * j + 2, period * j + 3}
    every = tuple(sorted(every))
    p = every[-1]
    n_train = int(math.floor((1.0 - test) * n))
    if not 0 < test < 1 or n_train <= p + 2 or n - n_train < 2:
        raise ValueError(f"a series of {n} points cannot hold out {test} with lags up to {p}")
    if np.isnan(y[0]):
        raise ValueError("the first value must be observed (trim leading NaNs)")
    observed = y[:n_train][~np.isnan(y[:n_train])]
    center, scale = float(observed.mean()), float(observed.std())
    if not scale > 0:
        raise ValueError("the training part of the series is constant")
    z = (_carry_forward(y) - center) / scale
    rows = np.array([t for t in range(p, n) if not np.isnan(y[t])], dtype=np.int64)
    inputs = {_lag_name(k): z[rows - k] for k in every}
    target = (y[rows] - center) / scale
    heldout = np.flatnonzero(rows >= n_train)
    if baseline is None:
        if period:
            baseline = {"kind": "sarimax", "orders": [((1, 0, 0), (0, 1, 1, period), "n"),
                                                      ((2, 0, 0), (0, 1, 1, period), "n"),
                                                      ((1, 0, 1), (0, 1, 1, period), "n")]}
        else:
            baseline = {"kind": "autoreg", "maxlag": p}
    params = options.get("params", PARAMS)
    grammar = Grammar(inputs=tuple(_lag_name(k) for k in sorted(grown)), params=params,
                      unary=("tanh", "square", "abs", "sqrt"), binary=("+", "-", "*", "/"),
                      constants=(0.5, 1.0, 2.0), loop=True, loop_steps=(3, 6), max_depth=5,
                      max_size=130)
    pers = (persistence(y)[rows] - center) / scale
    pers_mse = float(np.mean((pers[heldout] - target[heldout]) ** 2))
    defaults = dict(params=params, threshold=1.0 - pers_mse / float(np.var(target[heldout])),
                    fit={"optimizer": "lm", "steps": 40, "starts": 4}, budget_seconds=60.0,
                    seeds=_seeds(recent, period, window), grammar=grammar, loops=True)
    defaults.update(options)
    if times is None:
        times = np.arange(n, dtype=np.float64)
    desc = description or f"one-step forecasts of {name} ({n} points)"
    return SeriesTask(name=name, inputs=inputs, target=target, heldout=heldout,
                      description=desc + f"; lags {', '.join(map(str, sorted(grown)))}"
                      + (f" and {window} seasons back" if window else "")
                      + f"; last {n - n_train} values held out; a good fit beats persistence",
                      series=y, times=np.asarray(times, dtype=np.float64), lags=every,
                      n_train=n_train, center=center, scale=scale, rows=rows, units=units,
                      baseline_grid=baseline, **defaults)


def sunspots():
    """Yearly sunspot numbers 1700-2008 from AR-style lags 1..9; baseline AutoReg by AIC."""
    y, t = load("sunspots")
    return from_series("sunspots", y, lags=range(1, 10), times=t, units="sunspot number",
                       baseline={"kind": "autoreg", "maxlag": 12},
                       description="yearly sunspot number 1700-2008 (NOAA, via statsmodels)")


def enso():
    """Monthly Nino 1+2 sea-surface temperature 1950-2010; baseline seasonal ARIMA by AIC."""
    y, t = load("enso")
    return from_series("enso", y, lags=(1, 2, 3, 24), period=12, times=t,
                       units="deg C", description="monthly Nino 1+2 sea-surface temperature "
                       "1950-2010 (NOAA ERSST, via statsmodels)")


def co2():
    """Monthly Mauna Loa CO2 1958-2001 (5 months missing); baseline trend + seasonal ARIMA."""
    y, t = load("co2")
    grid = [((0, 1, 1), (0, 1, 1, 12), "n"), ((1, 1, 1), (0, 1, 1, 12), "n"),
            ((1, 1, 0), (0, 1, 1, 12), "n")]
    return from_series("co2", y, lags=(1, 2, 3, 24), period=12, times=t, units="ppm",
                       baseline={"kind": "sarimax", "orders": grid},
                       description="monthly mean Mauna Loa CO2 1958-2001, 5 months missing "
                       "(Keeling & Whorf, via statsmodels)")


# --- the statistician's baseline ---------------------------------------------------------------

def _cache_dir():
    return Path(os.environ.get("NDVM_CACHE") or Path.home() / ".cache" / "ndvm")


def _key(y, n_train, grid, version):
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(y, dtype=np.float64).tobytes())
    h.update(json.dumps([int(n_train), grid, version], sort_keys=True, default=list).encode())
    return h.hexdigest()[:24]


def _label(order, seasonal, trend):
    text = "SARIMAX(" + ",".join(map(str, order)) + ")"
    if seasonal and any(seasonal[:3]):
        text += "(" + ",".join(map(str, seasonal)) + ")"
    return text + (f" trend {trend}" if trend not in (None, "n") else "")


def _fit_autoreg(y, n_train, maxlag):
    from statsmodels.tsa.ar_model import AutoReg, ar_select_order

    if np.isnan(y).any():
        raise ValueError("the AutoReg baseline needs a series without missing values; give a "
                         "sarimax grid instead")
    sel = ar_select_order(y[:n_train], maxlag=maxlag, ic="aic", trend="c")
    lags = sel.ar_lags or []
    p = max(lags) if lags else 0
    aic = {f"AR({k})": float(v) for k, v in sorted(
        ((max(key) if key else 0, val) for key, val in sel.aic.items()), key=lambda kv: kv[0])}
    res = AutoReg(y[:n_train], lags=p, trend="c").fit()
    full = res.apply(y)
    fc = np.full(y.size, np.nan)
    fc[n_train:] = full.predict(start=n_train, end=y.size - 1)
    return f"AR({p})", {"kind": "autoreg", "lags": p}, aic, [float(v) for v in res.params], fc


def _fit_sarimax(y, n_train, orders):
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    best, aic = None, {}
    for order, seasonal, trend in orders:
        m = SARIMAX(y[:n_train], order=tuple(order), seasonal_order=tuple(seasonal), trend=trend)
        res = m.fit(disp=False, cov_type="none")
        label = _label(order, seasonal, trend)
        aic[label] = float(res.aic)
        if best is None or res.aic < best[0]:
            best = (res.aic, label, (order, seasonal, trend), res)
    _, label, (order, seasonal, trend), res = best
    full = res.apply(y)  # the training fit's parameters, filtered over the whole series
    fc = full.get_prediction(start=0, end=y.size - 1, dynamic=False).predicted_mean
    fc = np.asarray(fc, dtype=np.float64)
    return (label, {"kind": "sarimax", "order": list(order), "seasonal_order": list(seasonal),
                    "trend": trend}, aic, [float(v) for v in res.params], fc)


def fit_baseline(y, n_train, grid, cache=True):
    """Fit the grid's statsmodels models on y[:n_train], keep the lowest AIC, forecast one step.

    The forecasts for t >= n_train apply the training fit's parameters to the whole series, so
    each uses only y[:t]. With ``cache``, the result is kept under $NDVM_CACHE (default
    ~/.cache/ndvm), keyed by the data, the split, the grid and the statsmodels version.
    """
    sm = _statsmodels()
    y = np.asarray(y, dtype=np.float64)
    grid = json.loads(json.dumps(grid, default=list))
    path = _cache_dir() / f"baseline-{_key(y, n_train, grid, sm.__version__)}.json"
    if cache and path.exists():
        d = json.loads(path.read_text())
        return Baseline(label=d["label"], kind=d["spec"]["kind"], spec=d["spec"], aic=d["aic"],
                        params=d["params"], forecast=np.array(d["forecast"], dtype=np.float64),
                        seconds=0.0, cached=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter from statsmodels' optimizers
        if grid["kind"] == "autoreg":
            label, spec, aic, params, fc = _fit_autoreg(y, n_train, int(grid["maxlag"]))
        elif grid["kind"] == "sarimax":
            label, spec, aic, params, fc = _fit_sarimax(y, n_train, grid["orders"])
        else:
            raise ValueError(f"unknown baseline kind {grid['kind']!r}; autoreg or sarimax")
    b = Baseline(label=label, kind=spec["kind"], spec=spec, aic=aic, params=params, forecast=fc,
                 seconds=time.perf_counter() - t0)
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"label": label, "spec": spec, "aic": aic,
                                        "params": params,
                                        "forecast": [None if np.isnan(v) else float(v)
                                                     for v in fc]}))
        except OSError:
            pass  # a read-only home: the baseline is simply refitted next time
    return b


def describe(summary):
    """Lines for the CLI: RMSE of the best and simplest programs vs the baseline and persistence."""
    s, u = summary, f" {summary['units']}" if summary["units"] else ""
    b = s["baseline"]
    lines = [f"held-out one-step RMSE ({s['heldout_points']} points){u and ', in' + u}:",
             f"  baseline {b['label']}: {b['heldout_rmse']:.4g} (skill vs persistence "
             f"{b['skill_vs_persistence']:.3f}; fitted in {b['fit_seconds']:.1f}s"
             f"{', cached' if b['cached'] else ''})",
             f"  persistence: {s['persistence_rmse']:.4g}"]
    for key, name in (("best", "best program"), ("simplest_within_5pct", "simplest within 5%"),
                      ("aic_pick", "lowest training AIC")):
        r = s[key]
        if r is not None:
            lines.append(f"  {name}: {r['heldout_rmse']:.4g} (skill {r['skill_vs_persistence']:.3f}"
                         f", size {r['size']}) {r['model']}")
    return "\n".join(lines)
