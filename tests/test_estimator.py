"""ndvm.SymbolicRegressor: the scikit-learn estimator contract and what it returns."""
import numpy as np
import pytest

import ndvm
from ndvm.cosearch.sexpr import to_source, to_tree
from ndvm.cosearch.simplify import simplify
from ndvm.estimator import PARAMS

pytest.importorskip("sklearn")
pytest.importorskip("sympy")


def test_check_estimator():
    from sklearn.utils.estimator_checks import check_estimator
    # a candidate count, not a time budget: checks such as check_fit_idempotent compare two fits
    est = ndvm.SymbolicRegressor(budget=None, max_candidates=48)
    results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert failed == []
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    # only the array-API check may skip (it needs SCIPY_ARRAY_API set in the environment)
    assert skipped <= {"check_array_api_input"}


def test_fit_predict_score_and_export():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (60, 2))
    y = 2.5 * np.sin(X[:, 0]) + X[:, 1]
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=400, random_state=1)
    assert m.fit(X, y) is m
    assert m.n_features_in_ == 2 and not hasattr(m, "feature_names_in_")
    Xt = rng.uniform(-2, 2, (200, 2))
    yt = 2.5 * np.sin(Xt[:, 0]) + Xt[:, 1]
    assert m.score(Xt, yt) > 0.999
    p = m.predict(Xt)
    assert p.shape == (200,)
    # the returned model is simplified: simplification leaves it as it is
    assert to_source(simplify(to_tree(m.program_), PARAMS)) == m.program_
    import sympy
    e = m.sympy()
    f = sympy.lambdify(sorted(e.free_symbols, key=str), e, "numpy")
    assert np.allclose(f(Xt[:, 0], Xt[:, 1]), p, rtol=1e-9, atol=1e-9)
    assert m.latex() == sympy.latex(m.sympy(digits=6)) and "x_{1}" in m.latex()
    assert m.result_.front and m.result_.best["selection"]["rule"]
    with pytest.raises(ValueError):
        m.predict(Xt[:, :1])


def test_feature_names_name_the_exported_model():
    pd = pytest.importorskip("pandas")
    x = np.linspace(0.5, 3, 40)
    df = pd.DataFrame({"speed": x})
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=64).fit(df, np.sqrt(x))
    assert list(m.feature_names_in_) == ["speed"]
    assert {str(s) for s in m.sympy().free_symbols} == {"speed"}
    assert m.score(df, np.sqrt(x)) > 0.9999


def test_params_round_trip():
    m = ndvm.SymbolicRegressor(budget=3, optimizer="adam")
    assert m.get_params()["optimizer"] == "adam"
    m.set_params(budget=None, max_candidates=5)
    assert m.get_params()["max_candidates"] == 5
    with pytest.raises(ValueError, match="budget or max_candidates"):
        ndvm.SymbolicRegressor(budget=None).fit(np.ones((5, 1)), np.arange(5.0))


def test_polynomial_bases_evaluate_to_their_polynomials():
    from ndvm.cosearch.grammar import polynomials
    from ndvm.cosearch.sexpr import to_source

    x, y = np.linspace(-2, 2, 9), np.linspace(-1, 3, 9)
    coef = {"a": 0.5, "b": -1.5, "c": 2.0, "d": 0.25}
    trees = {to_source(t) for t in polynomials(["x", "y"], tuple(coef))}
    a, b, c, d = coef.values()
    expect = {  # a few of them, written out by hand
        "(+ a (* x (+ b (* x (+ c (* x d))))))": a + b * x + c * x**2 + d * x**3,
        "(* x (+ a (* x (+ b (* x (+ c (* x d)))))))": a * x + b * x**2 + c * x**3 + d * x**4,
        "(+ (* x (+ a (* x b))) (* y (+ c (* y d))))": a * x + b * x**2 + c * y + d * y**2,
        "(+ a (* x (+ b (* x c))) (* y d))": a + b * x + c * x**2 + d * y,
    }
    assert set(expect) <= trees
    ev = ndvm.Evaluator()
    for src, want in expect.items():
        got = ev.evaluate(src, params=coef, data={"x": x, "y": y}).value[0]
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    # at most as many parameters as given, and no more inputs than the two
    for t in polynomials(["x", "y"], tuple(coef)):
        prog = ndvm.parse(to_source(t))
        assert set(prog.free_names) <= {"x", "y", *coef}


def test_a_polynomial_target_is_found_exactly():
    """Nguyen-2 (x^4 + x^3 + x^2 + x on 20 points): the polynomial bases fit it exactly and the
    selection keeps the exact model, its coefficients snapped to the integers."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 20)
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=300, random_state=0)
    m.fit(x[:, None], x**4 + x**3 + x**2 + x)
    t = np.linspace(-1, 1, 101)
    np.testing.assert_allclose(m.predict(t[:, None]), t**4 + t**3 + t**2 + t, atol=1e-9)


def test_fit_points_bounds_the_points_each_candidate_is_calibrated_on(monkeypatch):
    """SymbolicRegressor(fit_points=k) hands k to the search's task (Task.fit_points): the
    calibrations see k training points, the returned model is refitted on all of them."""
    from ndvm.cosearch import score
    seen = []
    real = score.setup  # (the calibrations' data, set up once per search)

    def spy(inputs, target, **kw):
        seen.append(target.size)
        return real(inputs, target, **kw)
    monkeypatch.setattr(score, "setup", spy)
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 2, (400, 1))
    y = 1.7 * X[:, 0] + 0.3
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=8, fit_points=50).fit(X, y)
    assert seen and set(seen) == {50}
    assert "refitted on all 400 points" in m.result_.best["selection"]["explanation"]
    seen.clear()
    ndvm.SymbolicRegressor(budget=None, max_candidates=8, fit_points=None).fit(X, y)
    assert set(seen) == {280}  # every training point (400 less 30% held out)


@pytest.mark.parametrize("options, message", [
    ({"unary": ["sinh"]}, "'sinh' is not a numeric primitive taking 1 argument .did you mean 'sin'"),
    ({"unary": "sin"}, "unary must be a list of primitive names"),
    ({"binary": ["^"]}, "'\\^' is not a numeric primitive taking 2 arguments"),
    ({"binary": ["car"]}, "'car' is not a numeric primitive"),
    ({"unary": []}, "unary is empty"),
    ({"max_size": 0}, "max_size must be a whole number >= 1"),
    ({"heldout": 1.5}, "heldout is the fraction of points held out"),
    ({"heldout": 0}, "heldout is the fraction of points held out"),
    ({"parsimony": -1}, "parsimony .* a number >= 0"),
    ({"start_scales": (-1,)}, "start_scales .* positive numbers"),
    ({"budget": -1}, "budget must be a positive time .* got -1$"),
    ({"budget": "ten seconds"}, "budget must be a time like"),
])
def test_wrong_options_are_refused_with_what_is_wrong(options, message):
    # (each used to run a whole search: unknown operators made every candidate that used them
    # fail silently, a string of operators was read letter by letter, a negative budget was
    # reported as 0.9 times itself)
    X = np.random.default_rng(0).uniform(1, 2, (30, 2))
    opts = {"budget": None, "max_candidates": 20, **options}
    with pytest.raises(ValueError, match=message):
        ndvm.SymbolicRegressor(**opts).fit(X, X[:, 0] * X[:, 1])


def test_a_budget_may_be_text_as_on_the_command_line(monkeypatch):
    import ndvm.cosearch.loop as loop
    seen = {}
    real = loop.search

    def spy(task, **kw):
        seen["budget"] = kw["budget"]
        return real(task, **{**kw, "budget": None, "max_candidates": 30})

    monkeypatch.setattr(loop, "search", spy)
    X = np.random.default_rng(0).uniform(1, 2, (30, 2))
    ndvm.SymbolicRegressor(budget="2m").fit(X, X[:, 0] * X[:, 1])
    assert seen["budget"] == pytest.approx(0.9 * 120)  # (10% kept for the final selection)


def test_a_search_checks_its_grammar():
    g = ndvm.cosearch.Grammar(inputs=("x",), unary=("sin", "sinh"))
    with pytest.raises(ValueError, match="'sinh' is not a numeric primitive"):
        ndvm.search("damped", grammar=g, max_candidates=10)


def test_verbose_shows_the_search_on_stderr(capsys):
    X = np.random.default_rng(0).uniform(1, 2, (30, 2))
    ndvm.SymbolicRegressor(budget=None, max_candidates=40).fit(X, X[:, 0] * X[:, 1])
    assert capsys.readouterr().err == ""
    ndvm.SymbolicRegressor(budget=None, max_candidates=40, verbose=1).fit(X, X[:, 0] * X[:, 1])
    assert "candidates" in capsys.readouterr().err


def test_the_searchs_warnings_reach_the_user(monkeypatch):
    """The search's warnings (a worker that died, islands a budget left unrun, ...) were kept in
    ``result_.warnings`` alone, which a scikit-learn user never reads: ``fit`` now passes each
    on once as a UserWarning (unless verbose, which shows them on stderr as they happen)."""
    import warnings

    import ndvm.cosearch.loop as loop
    real = loop.search
    said = "island 1 epoch 3: its worker died; run again (BrokenProcessPool)"

    def search(task, **kw):
        res = real(task, **kw)
        res.warnings += [said, said]
        return res

    monkeypatch.setattr(loop, "search", search)
    X = np.random.default_rng(0).uniform(1, 2, (30, 2))
    with pytest.warns(UserWarning) as got:
        ndvm.SymbolicRegressor(budget=None, max_candidates=30).fit(X, X[:, 0] * X[:, 1])
    ours = [w for w in got if str(w.message).startswith("ndvm search: ")]
    assert [str(w.message) for w in ours] == [f"ndvm search: {said}"]
    assert ours[0].filename == __file__  # (shown at the caller's fit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ndvm.SymbolicRegressor(budget=None, max_candidates=30, verbose=1).fit(
            X, X[:, 0] * X[:, 1])


def test_a_search_that_calibrated_nothing_says_why(monkeypatch):
    # (it said "raise the budget" when its worker processes had died, or its cluster was lost)
    from types import SimpleNamespace

    from ndvm.cosearch import loop

    X, y = np.arange(8.0).reshape(-1, 1), np.arange(8.0)
    for warned, stopped, says in ((["island 0 epoch 0: its worker died on each of 4 tries"],
                                   "budget", "its warnings say why"),
                                  ([], "budget", "raise the budget")):
        result = SimpleNamespace(best=None, warnings=warned, stopped=stopped)
        monkeypatch.setattr(loop, "search", lambda *a, result=result, **k: result)
        with (pytest.warns(UserWarning) if warned else _nothing(),
              pytest.raises(RuntimeError, match=rf"calibrated no model \(stopped: budget\); "
                            rf"{says}")):
            ndvm.SymbolicRegressor(max_candidates=10).fit(X, y)


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_the_export_knows_the_languages_pi_and_refuses_a_named_let():
    # (pi was a free Symbol: the expression could not be evaluated; a named let, which is a loop,
    # failed inside with "not enough values to unpack")
    import sympy

    from ndvm.cosearch.export import to_latex, to_sympy

    e = to_sympy(to_tree("(* a (sin (/ (* pi x) 4)))"), {"a": 3.0})
    assert e.free_symbols == {sympy.Symbol("x")} and e.has(sympy.pi)
    got = float(e.subs("x", 1.0))
    want = ndvm.Evaluator().evaluate(ndvm.parse("(* 3.0 (sin (/ (* pi x) 4)))"),
                                     data={"x": np.array([1.0])}).value[0, 0]
    assert got == pytest.approx(want, rel=1e-15) and "\\pi" in to_latex(to_tree("(* pi x)"))
    with pytest.raises(ValueError, match="a named let \\(a loop\\) has no SymPy translation"):
        to_sympy(to_tree("(let loop ((i 0)) (if (= i 3) i (loop (+ i 1))))"))


def test_random_state_as_scikit_learn_reads_it():
    # (None was seed 0, every fit the same search; a RandomState was an error deep in numpy)
    X = np.linspace(0.5, 2.0, 20).reshape(-1, 1)
    y = 2.0 * X[:, 0]
    seed = lambda rs: ndvm.SymbolicRegressor(budget=None, max_candidates=8,  # noqa: E731
                                             random_state=rs).fit(X, y).random_seed_
    assert seed(7) == 7 and seed(np.int64(3)) == 3
    assert seed(np.random.RandomState(5)) == seed(np.random.RandomState(5))
    assert len({seed(None) for _ in range(3)}) > 1  # (three draws of 2**31: never all alike)
    for bad in (-1, "seed", 1.5):
        with pytest.raises(ValueError, match="random_state is a seed >= 0"):
            seed(bad)


@pytest.mark.parametrize("y_scale, x_scale", [(1e12, 1.0), (1e100, 1.0), (1e-30, 1.0),
                                              (1.0, 1e-30), (1e20, 1e10)])
def test_columns_of_extreme_size_are_searched_near_one(y_scale, x_scale):
    # (a target near 1e12 came back a 6-term polynomial, near 1e100 the constant -0.09 with
    # R^2 -3.7; an input near 1e-30 an exp(1.1e59 x^2))
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 3, (120, 2))
    X[:, 0] *= x_scale
    y = y_scale * 2.0 * (X[:, 0] / x_scale) / X[:, 1]
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=300).fit(X, y)
    assert m.target_scale_ == (1.0 if y_scale == 1.0 else y_scale)
    assert m.input_scales_[1] == 1.0 and m.input_scales_[0] == x_scale
    assert np.allclose(m.predict(X), y, rtol=1e-9)
    # the program handed back is the data's own: evaluated on the raw columns, it predicts
    prog = ndvm.parse(m.program_)
    data = {k: X[:, int(k[1:])] for k in prog.free_names if k in ("x0", "x1")}
    v = ndvm.Evaluator().evaluate(prog, params=m.params_ or None, data=data).value[0]
    assert np.allclose(v, y, rtol=1e-9)
    import sympy
    f = sympy.lambdify(sorted(m.sympy().free_symbols, key=str), m.sympy())
    assert np.allclose(f(X[:, 0], X[:, 1]), y, rtol=1e-9)


def test_columns_of_ordinary_size_are_searched_as_they_are():
    X = np.linspace(0.5, 2.0, 30).reshape(-1, 1) * [1.0, 900.0]
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=16).fit(X, 4000.0 * X[:, 0])
    assert m.target_scale_ == 1.0 and list(m.input_scales_) == [1.0, 1.0]
    assert "e+" not in m.program_ and m.program_ == m.result_.best["model"]


def test_the_program_handed_back_reads_the_columns_by_their_names():
    # (columns x1, x2, x3 came back as (* (/ a (exp (/ x1 x2))) x0): x0 the column "x1", x1
    # the column "x2", each name one off)
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x1": rng.uniform(1, 3, 80), "x2": rng.uniform(1, 3, 80),
                       "x3": rng.uniform(1, 3, 80)})
    y = 2.5 * df["x1"].to_numpy() / df["x3"].to_numpy()
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=200).fit(df, y)
    prog = ndvm.parse(m.program_)
    assert set(prog.free_names) - set(m.params_) == {"x1", "x3"}, m.program_
    v = ndvm.Evaluator().evaluate(prog, params=m.params_ or None,
                                  data={k: df[k].to_numpy() for k in ("x1", "x3")}).value[0]
    assert np.allclose(v, m.predict(df))
    # names that cannot be a program's variables keep x0, x1, ... (sympy still names them)
    bad = pd.DataFrame({"mass kg": df["x1"], "a": df["x3"]})
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=64).fit(bad, y)
    assert set(ndvm.parse(m.program_).free_names) - set(m.params_) <= {"x0", "x1"}
    # (one column named c, a parameter's name, sent every column back to x0, x1, ...: x1 then
    # named the column "x2". Only that column takes a name of its place, one no column has)
    odd = df.assign(c=3.0)
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=200).fit(odd, y)
    assert m._names() == ["x1", "x2", "x3", "x_3"]
    prog = ndvm.parse(m.program_)
    assert set(prog.free_names) - set(m.params_) <= {"x1", "x2", "x3", "x_3"}, m.program_
    v = ndvm.Evaluator().evaluate(prog, params=m.params_ or None, data={
        k: (odd["c"] if k == "x_3" else odd[k]).to_numpy()
        for k in set(prog.free_names) - set(m.params_)}).value[0]
    assert np.allclose(v, m.predict(odd))


def test_a_fit_on_a_hundred_thousand_points_ends_with_the_models_standard_errors():
    # (the selection's standard errors made an N x N matrix: fit raised a MemoryError, 74.5 GiB,
    # after its whole search)
    rng = np.random.default_rng(0)
    X = rng.uniform(1.0, 3.0, (100_000, 2))
    y = X[:, 0] * np.exp(-0.5 * X[:, 1])
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=256, random_state=0).fit(X, y)
    assert m.stderr_ and set(m.stderr_) == set(m.params_)
    assert m.score(X, y) > 0.99


def test_the_selected_parameters_come_with_their_standard_errors():
    # (a search handed back parameters without the uncertainties ndvm fit prints: a scientist
    # refitted the model to get them)
    so = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(0)
    x = np.linspace(0.2, 3.0, 80)
    y = 1.7 * np.exp(-0.63 * x) + 0.02 * rng.standard_normal(80)
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=300).fit(x.reshape(-1, 1), y)
    assert set(m.stderr_) == set(m.params_) and m.stderr_ == m.result_.best["stderr"]
    prog = ndvm.parse(m.program_)
    names = list(m.params_)

    def f(_, *p):
        return ndvm.Evaluator().evaluate(prog, params=dict(zip(names, p)),
                                         data={"x0": x}).value[0]

    _, cov = so.curve_fit(f, x, y, p0=[m.params_[k] for k in names])
    for k, se in zip(names, np.sqrt(np.diag(cov))):
        assert m.stderr_[k] == pytest.approx(se, rel=1e-3), (m.program_, k)


def test_an_interrupted_fit_says_so(monkeypatch):
    # (Ctrl-C ended the search and fit returned its best so far without a word: a loop of fits
    # went on to the next one, and the user could not tell)
    from ndvm.cosearch import loop

    real = loop.search

    def interrupted(*args, **kwargs):
        res = real(*args, **kwargs)
        res.stopped = "interrupted"
        return res

    monkeypatch.setattr(loop, "search", interrupted)
    x = np.linspace(0.0, 1.0, 40)
    with pytest.warns(UserWarning, match=r"interrupted \(Ctrl-C\) after \d+ candidates: the "
                                         r"model is the best of those"):
        m = ndvm.SymbolicRegressor(max_candidates=64, budget=None).fit(x[:, None], 2 * x)
    assert m.result_.stopped == "interrupted"
