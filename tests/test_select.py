"""Model selection, the pole probe, task names, SearchResult.predict/sympy."""
import math

import numpy as np
import pytest

import ndvm
from ndvm.cosearch.score import Scorer
from ndvm.cosearch.select import cross_validate, select, start_rows, starts_around, unidentifiable
from ndvm.cosearch.sexpr import to_source, to_tree
from ndvm.cosearch.simplify import simplify
from ndvm.cosearch.tasks import Task


def test_default_parameter_names_never_collide_with_inputs():
    x = np.linspace(0, 1, 10)
    t = Task.from_arrays("t", {"c": x, "x": x}, x, heldout=3)
    assert not set(t.params) & {"c", "x"} and len(t.params) == 4
    with pytest.raises(ValueError, match="both parameters and data inputs"):
        Task.from_arrays("t", {"c": x}, x, heldout=3, params=("a", "b", "c"))
    with pytest.raises(ValueError, match=r"name\(s\) obs are"):
        Task("t", {}, np.zeros(1), [], params=("obs",), consts={"obs": x}, objective="nll")


def test_get_task_is_exported():
    assert ndvm.get_task("damped").name == "damped"


def test_a_search_with_an_input_named_c_rejects_nothing_for_it():
    x = np.linspace(0.1, 3, 30)
    task = Task.from_arrays("t", {"c": x}, 1.5 * x, heldout=9)
    res = ndvm.search(task, proposer=ndvm.cosearch.Replay(sources=["(* a c)"]), budget=None)
    assert res.records[0]["status"] == "ok" and res.records[0]["r2"] > 0.9999


def test_the_dense_probe_rejects_a_pole_between_the_data_points():
    x = np.concatenate([np.linspace(0, 1, 10), np.linspace(2, 3, 10)])
    task = Task.from_arrays("gap", {"x": x}, 1.0 / (x - 1.5), heldout=5)
    scorer = Scorer(task)
    prog = ndvm.parse("(/ 1 (- x a))")
    # exact at every data point, but its pole at 1.5 sits in the gap between them
    assert "pole" in scorer.off_domain(prog, {"a": 1.5})
    assert scorer.off_domain(prog, {"a": 4.0}) is None
    assert "not finite" in scorer.off_domain(ndvm.parse("(sqrt (- x a))"), {"a": 0.5})


def _noisy_linear(n=20, seed=0):
    rng = np.random.default_rng(seed)
    x = np.linspace(-1, 1, n)
    y = 2.0 * x + 1.0 + 0.3 * rng.standard_normal(n)
    return Task.from_arrays("lin", {"x": x}, y, heldout=0.3, seed=seed,
                            params=("a", "b", "c", "d", "f", "g", "h")), x, y


def _record(task, i, src):
    prog = ndvm.parse(src)
    names = [n for n in prog.free_names if n in task.params]
    (tr_in, tr_y), (ho_in, ho_y) = task.split("train"), task.split("heldout")
    fit = ndvm.fit(prog, data=tr_in, target=tr_y, optimizer="lm", starts=8, steps=100,
                   unused_data="ignore")  # the constant model does not use x
    pred = ndvm.Evaluator().evaluate(prog, params=fit.params, data=ho_in).value[0]
    tree = to_tree(src)
    return {"id": i, "proposed": src, "model": src, "params": dict(fit.params),
            "heldout_error": float(np.mean((pred - ho_y) ** 2)),
            "size": sum(1 for s in src.replace("(", " ").replace(")", " ").split()),
            "status": "ok", "tree": tree, "names": names}


def test_one_standard_error_rule_prefers_the_simple_model_and_refits_on_all_data():
    task, x, y = _noisy_linear()
    front = [_record(task, 0, "a"), _record(task, 1, "(+ a (* b x))"),
             _record(task, 2, "(+ a (* b x) (* c x x x) (* d (sin (* f x))) (* g (cos (* h x))))")]
    chosen, rows = select(task, front)
    assert chosen["id"] == 1 and [r["id"] for r in rows] == [0, 1, 2]
    lo = min(r["cv_mse"] for r in rows)
    se = next(r for r in rows if r["cv_mse"] == lo)["cv_se"]
    assert next(r for r in rows if r["id"] == 1)["cv_mse"] <= lo + se
    assert rows[0]["cv_mse"] > lo + se               # the constant is clearly worse
    # refitted on every point: the least-squares line through all the data
    slope, icept = np.polyfit(x, y, 1)
    assert chosen["params"]["a"] == pytest.approx(icept, rel=1e-6)
    assert chosen["params"]["b"] == pytest.approx(slope, rel=1e-6)
    assert chosen["front_member"]["params"] == front[1]["params"]
    assert chosen["front_member"]["model"] == front[1]["model"]
    assert "one standard error" in chosen["selection"]["explanation"]


def test_a_choice_whose_fit_cannot_tell_its_parameters_apart_is_passed_over():
    # (+ a b x): a and b trade off exactly, the data see only a + b. It is the smallest member
    # within one standard error, so the rule used to return it (as I.18.4 came back as
    # sqrt(x + a) sqrt(y + b) - c with a, b ~ 1.7e7, a plane: tests/test_feynman_bench.py)
    rng = np.random.default_rng(0)
    x = np.linspace(1, 5, 40)
    y = x + 1.37 + 0.01 * rng.standard_normal(40)
    task = Task.from_arrays("shift", {"x": x}, y, heldout=0.3, params=("a", "b", "c"))
    flat = _record(task, 0, "(+ a b x)")
    flat["params"] = {"a": 0.3, "b": 1.07}  # (away from the integers and halves select tries)
    front = [flat, _record(task, 1, "(+ a (* b x))")]
    assert flat["size"] < front[1]["size"]
    chosen, rows = select(task, front)
    assert chosen["id"] == 1
    assert "passed over" in chosen["selection"]["explanation"]
    assert "id 0 (a, b)" in chosen["selection"]["explanation"]
    ev = ndvm.Evaluator()
    assert unidentifiable(chosen["model"], chosen["params"], task.inputs, task.target, ev) == []
    # (parameters the model does not name are ignored, not a reason to flag nothing)
    assert unidentifiable("(+ a b x)", {"a": 0.3, "b": 1.07, "c": 2.0}, task.inputs,
                          task.target, ev) == ["a", "b"]
    # alone on the front it is still returned, and the explanation says what is wrong with it
    alone, _ = select(task, [flat])
    assert alone["id"] == 0 and "cannot tell a, b apart" in alone["selection"]["explanation"]


@pytest.mark.parametrize("seed", [0, 26, 1, 2])
def test_cv_folds_do_not_start_only_from_the_fit_that_saw_their_test_points(seed):
    # Regression (CI stop 24): each fold was refitted only from the member's training-split
    # fit, which had seen most of the fold's test points; the 7-parameter sin/cos model kept
    # a local minimum through them and its CV error fell below the line's (seed 0: 0.047 vs
    # 0.078; seeds 0 and 26 chose it). Over noise seeds 0-29 the line is now chosen in 29
    # (seed 10 still picks the flexible model: its leaked start stays the best fold fit).
    task, _, _ = _noisy_linear(seed=seed)
    flexible = "(+ a (* b x) (* c x x x) (* d (sin (* f x))) (* g (cos (* h x))))"
    front = [_record(task, 1, "(+ a (* b x))"), _record(task, 2, flexible)]
    chosen, _ = select(task, front)
    assert chosen["id"] == 1


def test_cross_validation_of_an_exact_model_is_exact():
    x = np.linspace(0, 2, 25)
    prog = ndvm.parse("(* a (exp (* b x)))")
    cv, se = cross_validate(prog, ("a", "b"), {"x": x}, 3 * np.exp(-0.7 * x),
                            {"a": 2.9, "b": -0.6}, ndvm.Evaluator())
    assert cv < 1e-16 and math.isfinite(se)


def test_search_result_best_is_selected_simplified_and_predicts():
    res = ndvm.search("damped", seed=0, max_candidates=96, budget=None)
    best = res.best
    assert best["selection"]["rule"].startswith("one-standard-error")
    assert best["id"] in {r["id"] for r in res.front}
    assert to_source(simplify(to_tree(best["model"]), res.task.params)) == best["model"]
    assert res.summary()["selection"] == best["selection"]["explanation"]
    x = np.linspace(0.1, 6, 7)
    p = res.predict({"x": x})
    prog = ndvm.parse(best["model"])
    want = ndvm.Evaluator().evaluate(prog, params=best["params"], data={"x": x}).value[0]
    assert np.allclose(p, want)
    import sympy
    f = sympy.lambdify(sympy.Symbol("x"), res.sympy(), "numpy")
    assert np.allclose(np.broadcast_to(f(x), x.shape), p)
    assert res.predict({"x": x}, which=0).shape == (7,)


def test_snap_writes_integer_parameters_as_integers_only_when_exact():
    from ndvm.cosearch.select import snap
    x = np.random.default_rng(0).uniform(-1, 1, 20)
    ev = ndvm.Evaluator()
    src = "(* (+ a x0) (+ b (* c x0 (+ d x0))))"
    p = {"a": 1.2e-16, "b": 0.999999999999, "c": 1.0000000001, "d": 0.99999999998}
    model, size, params, mse = snap(src, p, {"x0": x}, x**3 + x**2 + x, 0.0, ev, tol=1e-20)
    assert model == "(* (+ 1.0 (* (+ 1.0 x0) x0)) x0)" and size == 9 and params == {}
    assert mse < 1e-25
    # a parameter near an integer that the data say is not one stays a parameter
    y = 2.0000001 * np.sin(1.5 * x)
    model, _, params, _ = snap("(* a (sin (* b x0)))", {"a": 2.0000001, "b": 1.5}, {"x0": x}, y,
                               0.0, ev)
    assert model == "(* a (sin (* b x0)))" and params["a"] == 2.0000001


def test_large_data_is_cross_validated_on_a_seeded_subset_and_refitted_on_every_point(
        monkeypatch):
    import importlib
    sel = importlib.import_module("ndvm.cosearch.select")
    task, x, y = _noisy_linear()
    monkeypatch.setattr(sel, "CV_POINTS", 9)  # (fewer points than the task has)
    seen = []
    plain = sel.cross_validate

    def spy(prog, names, inputs, target, *args, **kw):
        seen.append(target.copy())
        return plain(prog, names, inputs, target, *args, **kw)

    monkeypatch.setattr(sel, "cross_validate", spy)
    front = [_record(task, 0, "a"), _record(task, 1, "(+ a (* b x))")]
    chosen, _ = select(task, front)
    assert [t.size for t in seen] == [9, 9]
    rows = sel.cv_rows(y.size)
    np.testing.assert_array_equal(seen[0], y[rows])  # the same subset for every member
    np.testing.assert_array_equal(rows, sel.cv_rows(y.size))  # seeded
    slope, icept = np.polyfit(x, y, 1)  # the refit still uses every point
    assert chosen["params"]["b"] == pytest.approx(slope, rel=1e-6)


def test_constants_near_simple_numbers_are_set_to_them_only_within_one_standard_error():
    from ndvm.cosearch.select import simple_constants
    rng = np.random.default_rng(1)
    x = rng.uniform(1, 3, 400)
    ev = ndvm.Evaluator()
    noise = 0.01 * rng.standard_normal(400)
    # fitted through noise: b = 1.5 up to 0.3%; the data cannot tell it from 1.5 (a = 2.3 is
    # more than 2% from any integer or half: it stays a parameter)
    y = 2.3 * x ** 1.5 * (1 + noise)
    fit = ndvm.fit("(* a (pow x0 b))", data={"x0": x}, target=y, params=("a", "b"),
                   optimizer="lm", steps=60, starts=4)
    assert fit.params["b"] != 1.5 and abs(fit.params["b"] - 1.5) < 0.03
    se = float(np.std((2.3 * x ** 1.5 - y) ** 2) / np.sqrt(400))
    model, size, params, mse, fixed = simple_constants(
        "(* a (pow x0 b))", dict(fit.params), {"x0": x}, y, fit.loss, ev, slack=se)
    assert model == "(* a (pow x0 1.5))" and fixed == {"b": 1.5} and set(params) == {"a"}
    assert mse <= fit.loss + se and size == 5
    # 1.48 is within 2% of 1.5, but with little noise the data say it is not 1.5
    y = 2.3 * x ** 1.48 * (1 + 1e-4 * noise)
    fit = ndvm.fit("(* a (pow x0 b))", data={"x0": x}, target=y, params=("a", "b"),
                   optimizer="lm", steps=60, starts=4)
    se = float(np.std((2.3 * x ** 1.48 - y) ** 2) / np.sqrt(400))
    model, _, params, _, fixed = simple_constants(
        "(* a (pow x0 b))", dict(fit.params), {"x0": x}, y, fit.loss, ev, slack=se)
    assert model == "(* a (pow x0 b))" and fixed == {} and params["b"] == fit.params["b"]


def test_only_small_numbers_count_as_simple():
    from ndvm.cosearch.select import _simple_value
    assert _simple_value(0.9976) == 1.0 and _simple_value(-0.4995) == -0.5
    assert _simple_value(2.51) == 2.5 and _simple_value(4.97) == 5.0
    assert _simple_value(28.3) is None and _simple_value(11.6) is None  # large: not simpler
    assert _simple_value(1.06) is None and _simple_value(0.004) is None


def test_as_many_points_as_parameters_determine_them_all():
    # three points fix a parabola: its standard errors are inf (no residual degrees of freedom),
    # yet nothing is undetermined, so the selection passes nothing over for it
    x = np.array([1.0, 2.0, 3.0])
    y = 1 + 2 * x + 0.5 * x * x
    params = {"a": 1.0, "b": 1.0, "c": 1.0}
    assert unidentifiable("(+ a (* b x) (* c x x))", params, {"x": x}, y,
                          ndvm.Evaluator()) == []


def test_a_least_squares_task_with_shared_constants_is_selected_predicted_and_plotted(tmp_path):
    # regression: the selection, SearchResult.predict and the fits plot ran the model without
    # the task's constants, and a search whose front used one died after its last candidate
    # (UnboundError: k) with every record lost to the caller
    from ndvm.cosearch.proposers import Replay

    x = np.linspace(0.1, 3, 40)
    noise = 0.01 * np.random.default_rng(0).standard_normal(40)
    task = Task("shifted", {"x": x}, 2.5 * x + 7.0 + noise, np.arange(0, 40, 4),
                params=("a", "b"), consts={"k": np.array(7.0)})
    res = ndvm.search(task, proposer=Replay(sources=["(+ (* a x) k)", "(* a x)"]), workers=1,
                      max_candidates=2)
    assert res.best["model"] in ("(+ (* a x) k)", "(+ (* 2.5 x) k)")
    assert res.best["r2_all"] > 0.999
    assert np.allclose(res.predict({"x": np.array([1.0, 2.0])}), [9.5, 12.0], atol=0.02)
    pytest.importorskip("matplotlib")
    from ndvm.cosearch.report import write_plots
    assert {p.name for p in write_plots(res, tmp_path)} == {"front.png", "fits.png"}


@pytest.mark.parametrize("starts", [1, 2, 8, 16])
def test_starts_around_are_the_fit_then_seeded_draws_at_three_scales(starts):
    """A refit's starts: the current fit, then for each name in turn ``starts - 1`` draws of
    normal(0, s) with s cycling through 0.3, 1 and 3 from default_rng(seed) (drawn in one call:
    the same numbers, bit for bit, as a normal() call per name)."""
    params = {"a": 0.5, "b": -1.25, "c": 3.0}
    for names in [(), ("a",), ("c", "a", "b")]:
        for seed in (0, 7, 12345):
            got = starts_around(params, names, starts, seed)
            rng = np.random.default_rng(seed)
            scale = np.resize([0.3, 1.0, 3.0], starts - 1)
            assert list(got) == list(names)
            for n in names:
                want = np.concatenate([[params[n]], rng.normal(0.0, scale)])
                assert got[n].shape == (starts,) and np.array_equal(got[n], want)
            rows = start_rows(params, names, starts, seed)  # (the same values, a row a name)
            assert rows.shape == (len(names), starts) and rows.dtype == np.float64
            assert all(np.array_equal(rows[i], got[n]) for i, n in enumerate(names))


def test_the_search_optimism_is_the_least_of_k_noisy_errors():
    from ndvm.cosearch.select import search_optimism
    assert search_optimism(1, 64) == 0.0 and search_optimism(0, 64) == 0.0
    assert search_optimism(40_000, 64) == pytest.approx(2 * math.sqrt(math.log(40_000) / 64))
    assert search_optimism(40_000, 2000) < 0.15 < 0.8 < search_optimism(40_000, 64)


# A 33-node model that a 40,000-candidate damped search (seed 1) put on its front: its literals
# and structure were chosen among ~20,000 programs on the same 64 points, so it fits their noise
# and its CV error (0.00020) sits 43% below the true law's (0.00035), 5 standard errors away.
_LUCKY = ("(+ a (* (cos (* b (cos (* 0.9694 (exp (* (cos x) (pow x 2.2081))))) x)) "
          "(cos (* 1.995 x)) (exp (* c (cos (/ 3.9265 (tanh x))))) (exp (* d x))))")


def test_a_search_among_many_programs_does_not_hand_back_the_one_that_fit_the_noise():
    task = ndvm.get_task("damped")
    truth = {"id": 9860, "model": "(* (cos (* a x)) (pow b x))", "size": 8, "status": "ok",
             "params": {"a": -2.0039429588758884, "b": 0.7699723266340325},
             "heldout_error": 0.0014723728377956176}
    lucky = {"id": 34558, "model": _LUCKY, "size": 33, "status": "ok",
             "params": {"a": 0.005194303999726289, "b": -0.12940877892764982,
                        "c": 0.08132149714184224, "d": -0.26172007280352255},
             "heldout_error": 0.00015087660781753915}
    # judged as one model alone (no search behind it), the one-standard-error rule takes it
    alone, rows = select(task, [truth, lucky], structures=1)
    cv = {r["id"]: r["cv_mse"] for r in rows}
    assert alone["front_member"]["id"] == 34558 and cv[34558] < 0.7 * cv[9860]
    # chosen among the 20,427 programs that search scored, the true law is within the optimism
    chosen, _ = select(task, [truth, lucky], structures=20_427)
    assert chosen["front_member"]["id"] == 9860 and chosen["size"] == 8
    assert chosen["selection"]["structures"] == 20_427
    assert chosen["selection"]["optimism"] == pytest.approx(0.788, abs=1e-3)
    assert ("the search's optimism (79%, wider than one standard error: the least of 20427 "
            "programs' errors on 64 points" in chosen["selection"]["explanation"])


def test_a_constant_the_data_pin_down_off_a_simple_number_keeps_its_value():
    # (2.04 +- 0.005 on 2,000 noisy points, 8.7 standard errors from 2, was set to 2 within
    # the CV standard error of the MSE, the decay constant refitted 2% off its value)
    from ndvm.cosearch.select import simple_constants
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 3, (2000, 3))
    clean = 2.04 * X[:, 0] * np.exp(-X[:, 1] / X[:, 2])
    y = clean * (1 + 0.1 * rng.standard_normal(2000))
    inputs = {"x0": X[:, 0], "x1": X[:, 1], "x2": X[:, 2]}
    src = "(* a (exp (* b (/ x1 x2))) x0)"
    fit = ndvm.fit(src, data=inputs, target=y, params=("a", "b"), optimizer="lm", starts=4)
    assert abs(fit.params["a"] - 2.0) < 0.04 * 2  # (within SIMPLE_RTOL of 2: a candidate)
    loose = 0.05 * fit.loss  # (a CV standard error of the MSE as wide as the old rule's)
    model, _, params, _, fixed = simple_constants(src, dict(fit.params), inputs, y, fit.loss,
                                                  ndvm.Evaluator(), slack=loose)
    # (b = -1, the law's, is set: the data cannot tell the fit's b from it)
    assert "a" not in fixed and abs(params["a"] - 2.04) < 0.015, (model, params)
    # the same law with a = 2 exactly: the data cannot tell the fit's a from 2, and it is set
    y = 2.0 * X[:, 0] * np.exp(-X[:, 1] / X[:, 2]) * (1 + 0.1 * rng.standard_normal(2000))
    fit = ndvm.fit(src, data=inputs, target=y, params=("a", "b"), optimizer="lm", starts=4)
    _, _, _, _, fixed = simple_constants(src, dict(fit.params), inputs, y, fit.loss,
                                         ndvm.Evaluator(), slack=loose)
    assert fixed.get("a") == 2.0


def test_simple_constants_off_keeps_the_chosen_constants_as_fitted(tmp_path):
    # (a fitted 5.06 +- 0.05 for g/2 was handed over as "exactly 5", its standard error gone,
    # with no way to keep it)
    rng = np.random.default_rng(0)
    t = np.linspace(0.2, 2.0, 40)
    task = Task.from_arrays("fall", {"t": t}, 5.0 * t ** 2 * (1 + 0.08 * rng.standard_normal(40)))
    rounded = ndvm.search(task, max_candidates=300, seed=0)
    fitted = ndvm.search(task, max_candidates=300, seed=0, simple_constants=False,
                         out=tmp_path / "run")
    assert rounded.best["model"] == "(* 5.0 (square t))" and rounded.best["params"] == {}
    assert "a = 5 set" in rounded.best["selection"]["explanation"]
    assert fitted.best["model"] == "(* a (square t))" and "set" not in fitted.best["selection"][
        "explanation"]
    assert fitted.best["params"]["a"] == pytest.approx(5.0632, abs=1e-4)
    assert fitted.best["stderr"]["a"] == pytest.approx(0.0465, abs=1e-4)
    assert [r["id"] for r in fitted.records] == [r["id"] for r in rounded.records]
    assert fitted.settings["simple_constants"] is False
    # (it chooses among the records and does not make them: a resume may change it)
    again = ndvm.search(task, max_candidates=400, seed=0, out=tmp_path / "run", resume=True)
    assert again.best["params"] == {} and again.settings["simple_constants"] is True
    with pytest.raises(TypeError, match="simple_constants is True or False"):
        ndvm.search(task, max_candidates=10, simple_constants="no")


def test_the_estimator_and_the_cli_keep_fitted_constants_when_asked(tmp_path):
    pytest.importorskip("sklearn")
    from test_cli import ndvm as cli

    rng = np.random.default_rng(0)
    t = np.linspace(0.2, 2.0, 40)
    y = 5.0 * t ** 2 * (1 + 0.08 * rng.standard_normal(40))
    m = ndvm.SymbolicRegressor(max_candidates=300, budget=None, simple_constants=False)
    m.fit(t[:, None], y)
    assert m.get_params()["simple_constants"] is False
    assert set(m.params_) == {"a"} and m.stderr_["a"] > 0
    csv = tmp_path / "fall.csv"
    csv.write_text("t,y\n" + "".join(f"{a:.17g},{b:.17g}\n" for a, b in zip(t, y)))
    r = cli("search", "--csv", str(csv), "--target", "y", "--max-candidates", "300",
            "--budget", "600s", "--fitted-constants", "--out", str(tmp_path / "cli"), "--quiet")
    assert r.returncode == 0, r.stderr
    import json
    summary = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert summary["settings"]["simple_constants"] is False and summary["best"]["params"]


def test_the_selection_says_when_the_data_hardly_determine_a_parameter_and_keeps_large_ones():
    # (c = 12.25 +- 118 was handed over without a word; and every constant past ~5e5 is within
    # 1e-6 relative of an integer, so a fitted 769475.3 was "snapped" and lost its error)
    from ndvm.cosearch.select import snap

    rng = np.random.default_rng(0)
    x = np.linspace(0.0, 1.0, 60)
    task = Task.from_arrays("lin", {"x": x}, 2.3 * x + 0.1 * rng.standard_normal(60))
    rec = {"id": 0, "size": 7, "model": "(+ (* a x) (* b (square x)))", "status": "ok",
           "params": {"a": 2.3, "b": 0.0}, "heldout_error": 0.01, "train_error": 0.01, "r2": 0.9}
    best, _ = select(task, [rec], simple=False)
    assert best["stderr"]["b"] > abs(best["params"]["b"])
    assert best["selection"]["explanation"].endswith(
        "the data hardly determine b (a standard error above the value)")
    ev = ndvm.Evaluator()
    assert snap("(* a x)", {"a": 769475.3}, {"x": x}, 769475.3 * x, 0.0, ev)[2] == {"a": 769475.3}
    assert snap("(* a x)", {"a": 1.0000000002}, {"x": x}, x, 0.0, ev)[:3] == ("x", 1, {})


def test_a_choice_by_exactness_says_so():
    # (the explanation read "CV MSE 8.105e+14 ... within the search's optimism (44%) of the
    # lowest CV MSE (2.069e+08)": the bar was exactness, 1e-12 of a variance of ~1e27)
    x = np.linspace(1.0, 2.0, 40)
    task = Task.from_arrays("big", {"x": x}, 1e13 * np.exp(x) + 3e13 * x)
    recs = [{"id": 0, "size": 3, "model": "(* a x)", "params": {"a": 1e14},
             "heldout_error": 1.0, "train_error": 1.0, "status": "ok", "r2": 0.9},
            {"id": 1, "size": 8, "model": "(+ (* a (exp x)) (* b x))",
             "params": {"a": 1e13, "b": 3e13}, "heldout_error": 0.0, "train_error": 0.0,
             "status": "ok", "r2": 1.0}]
    best, rows = select(task, recs, simple=False)
    text = best["selection"]["explanation"]
    low = min(r["cv_mse"] for r in rows)
    assert best["id"] == 1 and low < 1e-12 * np.var(task.target) < rows[0]["cv_mse"]
    assert "is the smallest front member whose CV MSE is below 1e-12 of the target's " \
           "variance" in text and "count as exact" in text and "within" not in text
