"""The reproduction oracle: every number a search or a fit reports is recomputed from what it wrote.

For seeded searches on several tasks and both clients, each record of the run folder (each line
of candidates.jsonl, and summary.json's best, first_good and front) is re-evaluated from its own
(model, params) pair with a fresh ``ndvm.Evaluator`` on the task's data, split by the written
``heldout_rows``; its train error, held-out error and R^2 must match to 1e-9 relative. The oracle
is checked to fail on a planted mismatch. Also: the estimator's predictions against its exported
SymPy expression evaluated with NumPy, ``ndvm fit``'s printed numbers against ``ndvm.fit``, and
the documented JSON Schema of a run folder.
"""
import contextlib
import io
import json
import math
from importlib import resources

import numpy as np
import pytest

import ndvm
from ndvm.cosearch import loop, records, rounds, score
from ndvm.cosearch.tasks import Task, get_task

RTOL = 1e-9
# errors below this fraction of the target's mean square are rounding (an exact fit's MSE of
# 1e-31 recomputed over another lane count is 1.3e-31): compared absolutely there
FLOOR = 1e-14


def _close(got, want, scale, what):
    if want is None or got is None:
        assert want is None and got is None, f"{what}: reported {want}, recomputed {got}"
        return
    if not math.isfinite(want) or not math.isfinite(got):
        assert want == got, f"{what}: reported {want}, recomputed {got}"
        return
    assert abs(got - want) <= RTOL * max(abs(got), abs(want)) + FLOOR * scale, (
        f"{what}: reported {want!r}, recomputed {got!r}")


def _finite_or_none(v):
    return v if v is None or math.isfinite(v) else None


class Oracle:
    """Recomputes a record's numbers from its (model, params) and the task's data alone."""

    def __init__(self, task, summary, client):
        self.task, self.client = task, client
        self.ev = ndvm.Evaluator(client=client)  # fresh: shares nothing with the search
        held = np.zeros(np.size(task.target), dtype=bool)
        held[summary["heldout_rows"]] = True
        self.held, self.train = held, ~held
        self.fit = np.zeros(np.size(task.target), dtype=bool)  # (a candidate's training rows)
        self.fit[summary["fit_rows"]] = True
        assert not (self.fit & held).any()
        y = np.asarray(task.target, dtype=np.float64)
        self.scale = float(np.mean(y ** 2)) if task.objective == "mse" else 1.0

    def errors(self, model, params, train=None):
        """(train error, held-out error, R^2, MSE on all points, R^2 on all points); the train
        error over ``train`` (default: the candidates' fit rows)."""
        prog = ndvm.parse(model)
        params = {k: (math.nan if v is None else v) for k, v in params.items()}
        if self.task.objective == "nll":
            consts = {k: v for k, v in self.task.consts.items() if k in prog.free_names}
            v = float(self.ev.evaluate(prog, params=params, consts=consts).value.sum())
            return v, v, None, None, None
        data = {k: v for k, v in self.task.inputs.items() if k in prog.free_names}
        y = np.asarray(self.task.target, dtype=np.float64)
        with np.errstate(all="ignore"):
            pred = np.broadcast_to(self.ev.evaluate(prog, params=params, data=data).value[0],
                                   y.shape)
            sq = (pred - y) ** 2
            tr, ho, every = (float(np.mean(sq[self.fit if train is None else train])),
                             float(np.mean(sq[self.held])), float(np.mean(sq)))
        r2 = 1.0 - ho / float(np.var(y[self.held])) if math.isfinite(ho) else None
        r2_all = 1.0 - every / float(np.var(y))
        return (_finite_or_none(tr), _finite_or_none(ho), _finite_or_none(r2),
                _finite_or_none(every), _finite_or_none(r2_all))

    def check(self, rec, where):
        """Assert that ``rec``'s reported numbers are its (model, params)'s."""
        # (the selected model, refitted on all the data, reports every training point's error)
        tr, ho, r2, every, r2_all = self.errors(rec["model"], rec["params"],
                                                self.train if "mse_all" in rec else None)
        what = f"{where} id {rec['id']} {rec['model']}"
        _close(tr, rec["train_error"], self.scale, what + ": train_error")
        _close(ho, rec["heldout_error"], self.scale, what + ": heldout_error")
        _close(r2, rec["r2"], 1.0, what + ": r2")
        if "mse_all" in rec:
            _close(every, rec["mse_all"], self.scale, what + ": mse_all")
            _close(r2_all, rec["r2_all"], 1.0, what + ": r2_all")
        if "stderr" in rec:  # (the selected model's on every point; a front member's on the
            # points its calibration used)
            want = self.standard_errors(rec["model"], rec["params"],
                                        None if "mse_all" in rec else self.fit)
            assert set(want) == set(rec["stderr"]), what
            for k, se in want.items():
                got = rec["stderr"][k]
                assert (got is None) == (se is None), f"{what}: stderr {k} {got} != {se}"
                if se is not None:
                    assert got == pytest.approx(se, rel=1e-4), f"{what}: stderr {k}"
        if "front_member" in rec:
            self.check(rec["front_member"], where + " front_member")

    def standard_errors(self, model, params, rows=None):
        """curve_fit's standard errors of (model, params) on every point (or the ``rows``, a
        mask), from a Jacobian of central differences (not the core's derivatives):
        sqrt(diag(s^2 (J^T J)^-1)), None for every parameter when J's condition number is
        beyond 1e10 (the record's: where the data cannot determine one) or there are no more
        points than parameters."""
        prog = ndvm.parse(model)
        names = [k for k in params if k in prog.free_names]
        rows = np.ones(np.size(self.task.target), dtype=bool) if rows is None else rows
        data = {k: v[rows] for k, v in self.task.inputs.items() if k in prog.free_names}
        y = np.asarray(self.task.target, dtype=np.float64)[rows]

        def f(p):
            return np.broadcast_to(self.ev.evaluate(prog, params=p, data=data).value[0], y.shape)

        p0 = {k: float(params[k]) for k in names}
        cols = []
        for k in names:
            h = 1e-6 * max(1.0, abs(p0[k]))
            cols.append((f({**p0, k: p0[k] + h}) - f({**p0, k: p0[k] - h})) / (2 * h))
        J = np.stack(cols, axis=1)
        if y.size <= len(names) or np.linalg.cond(J) > 1e10:
            return dict.fromkeys(params)
        s2 = float(np.sum((f(p0) - y) ** 2)) / (y.size - len(names))
        cov = s2 * np.linalg.inv(J.T @ J)
        at = {k: j for j, k in enumerate(names)}
        return {k: (float(np.sqrt(cov[at[k], at[k]])) if k in at else None) for k in params}


def check_run(task, out, client):
    """Every reported number of the run folder ``out`` recomputed; how many records were."""
    summary = json.loads((out / loop.SUMMARY_FILE).read_text())
    records = [json.loads(line) for line in (out / loop.RECORD_FILE).read_text().splitlines()]
    oracle = Oracle(task, summary, client)
    checked = 0
    for rec in records:
        if rec["status"] == "ok":
            oracle.check(rec, "candidates.jsonl")
            checked += 1
    by_id = {r["id"]: r for r in records}
    for where in ("best", "first_good"):
        if summary[where] is not None:
            oracle.check(summary[where], f"summary.json {where}")
    for rec in summary["front"]:
        oracle.check(rec, "summary.json front")
        line = by_id[rec["id"]]  # (its record, with the standard errors of its parameters)
        assert {k: line[k] for k in rec if k != "stderr"} == {
            k: v for k, v in rec.items() if k != "stderr"}, "the front differs from its records"
        assert summary["objective"] != "mse" or set(rec["stderr"]) == set(rec["params"]), (
            "a front member without standard errors")
    return checked, summary


def _two_input_task():
    rng = np.random.default_rng(3)
    x0, x1 = rng.uniform(0.5, 2.0, 60), rng.uniform(-1.0, 1.0, 60)
    y = 1.5 * x0 * np.exp(0.7 * x1) + rng.normal(0.0, 0.01, 60)
    return Task.from_arrays("two-inputs", {"x0": x0, "x1": x1}, y, heldout=0.25, seed=2,
                            params=("a", "b", "c"), loops=False, threshold=0.99)


def _subset_task():
    # more training points than the task calibrates on (fit_points): a candidate's train error
    # is over the subset, summary.json's fit_rows (it was not written: the file's train errors
    # reproduced from heldout_rows alone were off by up to 2% past 2,000 training rows)
    rng = np.random.default_rng(5)
    x0, x1 = rng.uniform(0.5, 2.0, 90), rng.uniform(-1.0, 1.0, 90)
    y = 1.5 * x0 * np.exp(0.7 * x1) + rng.normal(0.0, 0.01, 90)
    return Task.from_arrays("subset", {"x0": x0, "x1": x1}, y, heldout=0.25, seed=2,
                            params=("a", "b", "c"), loops=False, threshold=0.99, fit_points=40)


TASKS = {"damped": lambda: get_task("damped"), "recurrence": lambda: get_task("recurrence"),
         "kalman": lambda: get_task("kalman"), "two-inputs": _two_input_task,
         "fit-subset": _subset_task}


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
@pytest.mark.parametrize("name", list(TASKS))
def test_every_reported_number_reproduces_from_the_run_folder(name, client, tmp_path):
    task = TASKS[name]()
    out = tmp_path / "run"
    res = ndvm.search(task, seed=4, max_candidates=48, budget=None, out=out, client=client,
                      refits=1 if task.objective == "mse" else 0, workers=1)
    checked, summary = check_run(task, out, client)
    assert checked >= (1 if task.objective == "nll" else 10)
    if name == "fit-subset":  # (a subset indeed: the records' train errors are not the split's)
        assert len(summary["fit_rows"]) == 40 < task.target.size - len(summary["heldout_rows"])
    assert summary["best"] is not None and res.best["model"] == summary["best"]["model"]
    # the records in memory are the ones written
    lines = [json.loads(x) for x in (out / loop.RECORD_FILE).read_text().splitlines()]
    assert [records._dump(r) for r in res.records] == [json.dumps(x) for x in lines]
    if task.objective == "mse":
        assert any(r["proposer"] == "refit" and r["status"] == "ok" for r in lines)


def test_the_oracle_fails_on_a_planted_mismatch(tmp_path, monkeypatch):
    """R^2 computed on the training rows instead of the held-out ones: the oracle says so.
    (Planted in the scorer's ``Scoring.errors``, which every scored candidate takes: from the
    numbers of its native evaluation after its fit in ``round_scored``, or from its own
    evaluation in ``score``; a Python subclass's method overrides the native one there too.)"""
    class TrainR2(score.Scoring):
        def errors(self, train_sse, held_sse):
            tr, ho, _ = score.Scoring.errors(self, train_sse, held_sse)
            return tr, ho, 1.0 - tr / self.train_var

    real = score.Scorer.__init__

    def planted(self, *args, **kwargs):
        real(self, *args, **kwargs)
        s = self.scoring
        self.scoring = TrainR2(s.spread, s.n, s.m, s.held_var)
        self.scoring.train_var = float(np.var(self.train[1]))

    monkeypatch.setattr(score.Scorer, "__init__", planted)
    task = get_task("damped")
    out = tmp_path / "run"
    ndvm.search(task, seed=4, max_candidates=32, budget=None, out=out, workers=1)
    with pytest.raises(AssertionError, match="r2"):
        check_run(task, out, "dmci")


def test_the_oracle_fails_when_params_belong_to_another_program(tmp_path):
    """The trap the record format closes: the proposed text evaluated with the model's params."""
    task = get_task("damped")
    out = tmp_path / "run"
    cands = tmp_path / "cands.jsonl"  # proposals the simplifier rewrites (params merged, folded)
    cands.write_text("".join(json.dumps({"src": s}) + "\n" for s in (
        "(* a (* b (exp (* c x))) (cos (* 2.0 x)))", "(+ (* a (exp (* (+ b c) x))) (- x x))",
        "(* (+ a (square x) x) x)")))
    ndvm.search(task, proposer="replay", candidates=[str(cands)], budget=None, out=out,
                workers=1)
    check_run(task, out, "dmci")  # (as written, every number reproduces)
    path = out / loop.RECORD_FILE
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    swapped = next(r for r in lines if r["status"] == "ok" and r["params"]
                   and r["model"] != r["proposed"])
    swapped["model"] = swapped["proposed"]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises((AssertionError, ndvm.SchemeError)):
        check_run(task, out, "dmci")


def test_a_run_folder_follows_its_json_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(resources.files("ndvm.cosearch").joinpath("run.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert loop.run_schema() == schema
    summary_v = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/summary"})
    record_v = jsonschema.Draft202012Validator({**schema, "$ref": "#/$defs/record"})
    for name in ("damped", "kalman"):
        out = tmp_path / name
        ndvm.search(name, seed=1, max_candidates=40, budget=None, out=out, refits=1)
        summary_v.validate(json.loads((out / loop.SUMMARY_FILE).read_text()))
        for line in (out / loop.RECORD_FILE).read_text().splitlines():
            record_v.validate(json.loads(line))
    # every field the code writes is documented: a record with an unknown field is refused
    rec = json.loads((tmp_path / "damped" / loop.RECORD_FILE).read_text().splitlines()[0])
    with pytest.raises(jsonschema.ValidationError):
        record_v.validate(dict(rec, src=rec["proposed"]))


def test_series_summary_pairs_each_program_with_its_params(tmp_path):
    """The time-series digest names the program its parameters belong to (its ``model``)."""
    pytest.importorskip("statsmodels")
    series = pytest.importorskip("ndvm.cosearch.series")
    res = ndvm.search("co2", seed=0, max_candidates=32, budget=None, workers=1)
    digest = res.task.extra_summary(res)["series"]
    for key in ("best", "simplest_within_5pct", "aic_pick"):
        row = digest[key]
        if row is None:
            continue
        rec = next(r for r in res.records if r["id"] == row["id"])
        assert row["model"] == rec["model"] and row["params"] == rec["params"]
        fc = res.task.forecast(rec)
        assert np.all(np.isfinite(fc[res.task.heldout]))
    assert series is not None


@pytest.mark.parametrize("seed,names", [(0, False), (1, True), (2, False)])
def test_estimator_predict_equals_its_sympy_expression(seed, names):
    sympy = pytest.importorskip("sympy")
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.5, 2.0, (50, 2))
    y = 2.0 * X[:, 0] / (1.0 + X[:, 1]) + 0.3 + rng.normal(0.0, 0.01, 50)
    if names:
        pd = pytest.importorskip("pandas")
        X = pd.DataFrame(X, columns=["mass", "speed"])
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=160, random_state=seed).fit(X, y)
    expr = m.sympy()
    cols = ["mass", "speed"] if names else ["x0", "x1"]
    f = sympy.lambdify([sympy.Symbol(c) for c in cols], expr, "numpy")
    Xa = np.asarray(X, dtype=np.float64)
    want = np.broadcast_to(np.asarray(f(Xa[:, 0], Xa[:, 1]), dtype=np.float64), y.shape)
    got = m.predict(X)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * float(np.max(np.abs(y))))
    # and the estimator's program with its params is that same function (reading the columns
    # by their names when X had them)
    prog = ndvm.parse(m.program_)
    data = {c: Xa[:, i] for i, c in enumerate(cols) if c in prog.free_names}
    v = ndvm.Evaluator().evaluate(prog, params=m.params_ or None, data=data).value[0]
    np.testing.assert_allclose(np.broadcast_to(v, y.shape), got, rtol=0, atol=0)


def test_cli_fit_prints_ndvm_fit_numbers(tmp_path):
    from ndvm import cli
    rng = np.random.default_rng(7)
    x = np.linspace(0.0, 4.0, 40)
    y = 2.5 * np.exp(-0.4 * x) + rng.normal(0.0, 0.01, x.size)
    csv = tmp_path / "d.csv"
    csv.write_text("x,y\n" + "".join(f"{float(a)!r},{float(b)!r}\n" for a, b in zip(x, y)))
    model = tmp_path / "m.scm"
    model.write_text("(* A (exp (* k x)))")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["fit", str(model), str(csv), "--target", "y"]) == 0
    text = buf.getvalue()
    res = ndvm.fit(ndvm.parse(model.read_text(), name=str(model)), data={"x": x}, target=y)
    rows = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines()
            if ln.split() and ln.split()[0] in res.params}
    assert set(rows) == set(res.params) == {"A", "k"}
    for name, v in res.params.items():
        assert float(rows[name][0]) == pytest.approx(v, rel=1e-9)
        if res.stderr:
            assert float(rows[name][1]) == pytest.approx(res.stderr[name], rel=1e-5)
    loss_line = next(ln for ln in text.splitlines() if ln.startswith("loss (MSE)"))
    words = loss_line.split()
    loss, r2 = float(words[2]), float(words[4])
    assert loss == pytest.approx(res.loss, rel=1e-9)
    assert r2 == pytest.approx(1.0 - res.loss / float(np.var(y)), rel=1e-9)
    # the planted mismatch: a value printed to 4 digits would fail the comparison above
    assert float(f"{res.loss:.4g}") != pytest.approx(res.loss, rel=1e-9)
