"""Real series as tasks (ndvm.cosearch.series): loading, the one-step protocol, the statsmodels
baseline, the CLI end to end, and the message when statsmodels is missing."""
import builtins
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import ndvm
from ndvm.cosearch import series
from ndvm.cosearch.tasks import get_task
from ndvm.cosearch.proposers import Replay
from ndvm.cosearch.report import front_table, write_plots

sm = pytest.importorskip("statsmodels", reason="the series tasks need statsmodels (ndvm[data])")
SERIES = ("enso", "sunspots", "co2")


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """Baselines are fitted once per test module into a private cache (never ~/.cache)."""
    path = tmp_path_factory.mktemp("ndvm-cache")
    old = os.environ.get("NDVM_CACHE")
    os.environ["NDVM_CACHE"] = str(path)
    yield path
    if old is None:
        del os.environ["NDVM_CACHE"]
    else:
        os.environ["NDVM_CACHE"] = old


@pytest.mark.parametrize("name", SERIES)
def test_each_series_task_loads_and_splits_deterministically(name):
    a, b = get_task(name), get_task(name)
    assert a.name == name and a.objective == "mse"
    np.testing.assert_array_equal(a.target, b.target)
    for k in a.inputs:
        np.testing.assert_array_equal(a.inputs[k], b.inputs[k])
    y = a.series
    n = y.size
    assert a.n_train == math.floor(0.8 * n)
    # held out: exactly the observed values from n_train on; trained: the observed ones before
    np.testing.assert_array_equal(a.rows[a.heldout], np.flatnonzero(~np.isnan(y[a.n_train:]))
                                  + a.n_train)
    assert np.all(a.rows[a.train] < a.n_train)
    assert np.all(a.rows >= max(a.lags))
    # every input is a past value (carried forward over gaps), standardized on the training part
    filled = series._carry_forward(y)
    for k in a.lags:
        np.testing.assert_allclose(a.to_units(a.inputs[f"y{k}"]), filled[a.rows - k], rtol=1e-12)
    np.testing.assert_allclose(a.to_units(a.target), y[a.rows], rtol=1e-12)
    obs = y[:a.n_train][~np.isnan(y[:a.n_train])]
    assert a.center == pytest.approx(obs.mean()) and a.scale == pytest.approx(obs.std())


def test_co2_missing_months_are_never_targets_and_lags_carry_forward():
    task = get_task("co2")
    missing = np.flatnonzero(np.isnan(task.series))
    assert missing.size == 5 and np.all(missing < task.n_train)
    assert not np.isin(missing, task.rows).any()
    assert not any(np.isnan(v).any() for v in task.inputs.values())
    # a lag that falls on a missing month sees the last month measured before it
    hits = 0
    for k in task.lags:
        for i in np.flatnonzero(np.isin(task.rows - k, missing)):
            before = task.series[:task.rows[i] - k]
            expected = before[~np.isnan(before)][-1]
            assert task.to_units(task.inputs[f"y{k}"][i]) == pytest.approx(expected, rel=1e-12)
            hits += 1
    assert hits > 0


@pytest.mark.parametrize("name", ("sunspots", "co2"))
def test_scores_are_deterministic_and_persistence_matches_its_definition(name):
    task = get_task(name)
    runs = [ndvm.search(task, proposer=Replay(sources=["y1", "(+ (* a y1) b)"]), budget=None)
            for _ in range(2)]
    assert [r["heldout_error"] for r in runs[0].records] == \
        [r["heldout_error"] for r in runs[1].records]
    rec = runs[0].records[0]
    held = task.rows[task.heldout]
    pers = series._carry_forward(task.series)[held - 1]
    rmse = math.sqrt(np.mean((pers - task.series[held]) ** 2))
    assert task.rmse(rec["heldout_error"]) == pytest.approx(rmse, rel=1e-10)
    assert task.references()[1]["rmse"] == pytest.approx(rmse, rel=1e-10)
    # the threshold makes a good fit exactly one that beats persistence
    assert rec["r2"] == pytest.approx(task.threshold, rel=1e-10)


def test_sunspots_baseline_is_statsmodels_autoreg_chosen_by_aic():
    from statsmodels.tsa.ar_model import AutoReg, ar_select_order

    task = get_task("sunspots")
    b = task.baseline(cache=False)
    y, ntr = task.series, task.n_train
    p = max(ar_select_order(y[:ntr], maxlag=12, ic="aic", trend="c").ar_lags)
    assert b.label == f"AR({p})" and p == 9  # the classic AR(9)
    res = AutoReg(y[:ntr], lags=p, trend="c").fit()
    c, phi = res.params[0], res.params[1:]
    # one step ahead by hand from the training fit's coefficients and past data only
    manual = np.array([c + phi @ y[t - 1::-1][:p] for t in range(ntr, y.size)])
    np.testing.assert_allclose(b.forecast[ntr:], manual, rtol=1e-10)
    assert np.all(np.isnan(b.forecast[:ntr]))


def test_seasonal_baseline_reproduces_statsmodels_on_the_same_split():
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    y, _ = series.load("co2")  # with missing months, which SARIMAX's filter skips
    ntr = math.floor(0.8 * y.size)
    grid = {"kind": "sarimax", "orders": [((0, 1, 1), (0, 1, 1, 12), "n")]}
    b = series.fit_baseline(y, ntr, grid, cache=False)
    assert b.label == "SARIMAX(0,1,1)(0,1,1,12)"
    res = SARIMAX(y[:ntr], order=(0, 1, 1), seasonal_order=(0, 1, 1, 12)).fit(disp=False)
    # statsmodels' other route: extend the training results by the held-out data
    ext = res.extend(y[ntr:]).get_prediction().predicted_mean
    np.testing.assert_allclose(b.forecast[ntr:], ext, rtol=1e-6)
    np.testing.assert_allclose(b.params, res.params, rtol=1e-6)


def test_baseline_cache_returns_the_fitted_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("NDVM_CACHE", str(tmp_path))
    y = np.sin(np.arange(120) * 0.5) + 0.1 * np.random.default_rng(0).standard_normal(120)
    grid = {"kind": "autoreg", "maxlag": 4}
    first = series.fit_baseline(y, 96, grid)
    again = series.fit_baseline(y, 96, grid)
    assert not first.cached and again.cached and again.label == first.label
    np.testing.assert_array_equal(again.forecast[96:], first.forecast[96:])
    assert len(list(tmp_path.glob("baseline-*.json"))) == 1


def test_from_series_task_searches_and_reports_against_its_baseline(tmp_path):
    rng = np.random.default_rng(3)
    y = np.zeros(300)
    for t in range(2, 300):
        y[t] = 1.2 * y[t - 1] - 0.5 * y[t - 2] + rng.standard_normal()
    y = y + 10.0
    y[[40, 41, 150]] = np.nan
    task = series.from_series("ar2", y, lags=(1, 2, 3), baseline={"kind": "sarimax",
                                 "orders": [((2, 0, 0), (0, 0, 0, 0), "c")]})
    assert isinstance(task, series.SeriesTask) and task.heldout.size == 60
    res = ndvm.search(task, max_candidates=40, budget=None, out=tmp_path, seed=0)
    # the seeds are scored first, as written
    assert [r["proposed"] for r in res.records[:len(task.seeds)]] == list(task.seeds)
    summary = json.loads((tmp_path / "summary.json").read_text())["series"]
    assert summary["baseline"]["label"] == "SARIMAX(2,0,0) trend c"
    best = summary["best"]
    # the AR(2) seed, fitted by least squares, is as good as the ML AR(2) within a few percent
    assert best["heldout_rmse"] < 1.05 * summary["baseline"]["heldout_rmse"]
    assert summary["persistence_rmse"] > best["heldout_rmse"]
    table = front_table(res)
    assert "SARIMAX(2,0,0) trend c (AIC)" in table and "persistence y[t-1]" in table
    assert any(p.name == "forecast.png" for p in write_plots(res, tmp_path))


def test_aic_pick_ignores_heldout_error():
    recs = [{"id": 0, "status": "ok", "proposed": "(* a y1)", "model": "(* a y1)",
             "params": {"a": 1.0},
             "train_error": 1.0, "heldout_error": 0.1, "size": 3},
            {"id": 1, "status": "ok", "proposed": "(+ (* a y1) 0.37)",
             "model": "(+ (* a y1) 0.37)", "params": {"a": 1.0},
             "train_error": 0.5, "heldout_error": 9.0, "size": 5}]
    assert series.aic_pick(recs, 100)["id"] == 1  # 100 log 0.5 + 4 < 100 log 1 + 2
    assert series.aic_pick(recs, 2)["id"] == 0  # with two points the extra constant costs more


def _ndvm_cli(*args, env=None):
    # run outside the checkout so that the installed package is imported, not the source tree
    return subprocess.run([sys.executable, "-m", "ndvm", *args], capture_output=True, text=True,
                          env=env, timeout=900, cwd=tempfile.gettempdir())


@pytest.mark.parametrize("name", SERIES)
def test_search_cli_runs_each_series_end_to_end(name, tmp_path, cache_dir):
    out = tmp_path / "run"
    env = dict(os.environ, NDVM_CACHE=str(cache_dir))
    r = _ndvm_cli("search", "--task", name, "--budget", "5s", "--out", str(out), "--quiet",
                  env=env)
    assert r.returncode in (0, 1), r.stderr  # 1: nothing beat persistence in 5 s
    assert "reference: " in r.stdout and "persistence" in r.stdout
    assert " ref " in r.stdout and "held-out one-step RMSE" in r.stdout
    for f in ("candidates.jsonl", "summary.json", "front.png", "forecast.png"):
        assert (out / f).exists(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["series"]["best"] is not None and s["series"]["baseline"]["heldout_rmse"] > 0


def test_missing_statsmodels_names_the_extra(monkeypatch, capsys):
    real = builtins.__import__

    def no_statsmodels(name, *args, **kwargs):
        if name == "statsmodels" or name.startswith("statsmodels."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_statsmodels)
    with pytest.raises(ImportError, match=r"ndvm\[data\]"):
        series.load("enso")
    with pytest.raises(ImportError, match=r"ndvm\[data\]"):
        get_task("sunspots")
    from ndvm import cli
    assert cli.main(["search", "--task", "co2", "--budget", "1s"]) == 2
    err = capsys.readouterr().err
    assert "ndvm[data]" in err and "Traceback" not in err
