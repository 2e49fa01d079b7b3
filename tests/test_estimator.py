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
