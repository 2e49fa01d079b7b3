"""bench/feynman.py: the equation table, SRBench's data protocol (split, noise on the training
target only), the symbolic-solution check, the resumable runs and the report. No search runs here:
the methods are replaced by a stand-in."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

sympy = pytest.importorskip("sympy")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import feynman as F  # noqa: E402

EQS = {e.id: e for e in F.load_equations()}


def in_x(eq, expr):
    """An expression over the equation's symbols written over x0, x1, ... as models are."""
    return expr.xreplace({s: sympy.Symbol(f"x{i}") for i, s in enumerate(eq.symbols)})


def test_the_table_has_the_100_equations_with_their_inputs():
    assert len(EQS) == 100
    assert {"I.6.2a", "I.9.18", "II.6.11", "III.21.20"} <= set(EQS)
    for eq in EQS.values():
        assert {s.name for s in eq.expr.free_symbols} == {v[0] for v in eq.variables}, eq.id
        assert all(lo < hi for _, lo, hi in eq.variables), eq.id
    counts = {label: sum(F.stratum(e.n_inputs) == label for e in EQS.values())
              for label, _, _ in F.STRATA}
    assert counts == {"1-2": 16, "3-4": 63, "5+": 21}
    assert EQS["I.9.18"].n_inputs == 9 and EQS["I.6.2a"].n_inputs == 1


def test_quick_subset_takes_k_per_stratum():
    sub = F.quick_subset(list(EQS.values()), 3)
    assert len(sub) == 9
    assert sorted(F.stratum(e.n_inputs) for e in sub) == ["1-2"] * 3 + ["3-4"] * 3 + ["5+"] * 3
    assert sub == F.quick_subset(list(EQS.values()), 3)  # seeded


def test_data_follow_the_formula_ranges_and_split():
    eq = EQS["II.6.11"]
    X, y, Xt, yt = F.make_data(eq, seed=0, noise=0.0, n=400)
    assert X.shape == (300, 4) and Xt.shape == (100, 4) and y.shape == (300,)
    lo = np.array([v[1] for v in eq.variables])
    hi = np.array([v[2] for v in eq.variables])
    assert np.all(X >= lo) and np.all(X <= hi)
    eps, p, th, r = Xt.T
    np.testing.assert_allclose(yt, p * np.cos(th) / (4 * np.pi * eps * r ** 2), rtol=1e-12)
    np.testing.assert_allclose(y, eq.function(X), rtol=0)
    X2, _, _, _ = F.make_data(eq, seed=1, noise=0.0, n=400)
    assert not np.allclose(X, X2)


def test_noise_is_on_the_training_target_only_and_scaled_by_its_rms():
    eq = EQS["I.12.1"]
    X0, y0, Xt0, yt0 = F.make_data(eq, seed=3, noise=0.0)
    X1, y1, Xt1, yt1 = F.make_data(eq, seed=3, noise=0.1)
    np.testing.assert_array_equal(X0, X1)  # the same points at every noise level
    np.testing.assert_array_equal(Xt0, Xt1)
    np.testing.assert_array_equal(yt0, yt1)  # the test target stays clean
    resid = y1 - y0
    want = 0.1 * np.sqrt(np.mean(y0 ** 2))
    assert abs(resid.std() / want - 1) < 0.05 and abs(resid.mean()) < 4 * want / np.sqrt(y0.size)
    _, y2, _, _ = F.make_data(eq, seed=3, noise=0.01)
    np.testing.assert_allclose(y2 - y0, resid / 10, rtol=1e-9, atol=1e-12)  # one noise stream


def test_simple_numbers():
    assert F.simple_number(6.283185307179586) == 2 * sympy.pi
    assert F.simple_number(np.pi ** 2 * (1 + 3e-4)) == sympy.pi ** 2
    assert F.simple_number(1 / np.sqrt(2 * np.pi)) == 1 / sympy.sqrt(2 * sympy.pi)
    assert F.simple_number(-0.12501) == sympy.Rational(-1, 8)
    assert F.simple_number(1 / (20 * np.pi) * 3) == sympy.Rational(3, 20) / sympy.pi
    for v in np.random.default_rng(0).uniform(0.01, 100, 50):  # never farther than 1e-3
        g = F.simple_number(v)
        assert g is None or abs(float(g) - v) <= 1e-3 * v
    # a fitted constant too large to square (a pyoperon model's 1e200 stopped a run)
    assert F.simple_number(1e200) is None and F.simple_number(-np.inf) is None
    assert F.snap_constants(sympy.Float(1e200) * sympy.Symbol("x")) != 0


@pytest.mark.parametrize("eq_id", ["I.6.2a", "I.41.16", "II.6.11", "II.24.17", "III.9.52",
                                   "I.30.3", "II.11.28", "I.9.18"])
def test_right_up_to_constants_is_a_symbolic_solution(eq_id):
    eq = EQS[eq_id]
    t = eq.expr.evalf()  # pi as a float, as a fitted model has it
    assert F.symbolic_solution(in_x(eq, 2.5 * t), eq) is True  # a scale
    assert F.symbolic_solution(in_x(eq, t - 0.75), eq) is True  # an offset
    noisy = t.xreplace({f: sympy.Float(float(f) * (1 + 2e-4)) for f in t.atoms(sympy.Float)})
    assert F.symbolic_solution(in_x(eq, 3 * noisy), eq) is True  # constants fitted to 2e-4


def test_the_model_of_the_issue_is_a_symbolic_solution():
    # II.6.11 as ndvm returned it: (* a (/ (/ (* b x2) (* x1 x4)) x4) (cos x3)), 0-based here
    m = sympy.sympify("0.3 * (1.7 * x1 / (x0 * x3)) / x3 * cos(x2)")
    assert F.symbolic_solution(m, EQS["II.6.11"]) is True


def test_a_power_of_a_fitted_number_is_an_exponential():
    # ndvm's I.6.2a at 30 s: 0.6065**(x**2) is exp(-x**2/2) (log 0.6065 = -0.5000)
    m = sympy.sympify("0.398942280401433*0.606530659712633**(x0**2)")
    assert F.symbolic_solution(m, EQS["I.6.2a"]) is True
    assert F.symbolic_solution(sympy.sympify("0.4*0.7**(x0**2)"), EQS["I.6.2a"]) is False
    assert F.exp_form(sympy.sympify("2.0**x0 * x1**2.5")) == sympy.sympify(
        "exp(log(2.0)*x0) * x1**2.5")  # (a power of an input stays as it is)


@pytest.mark.parametrize("eq_id, model", [
    ("II.6.11", "0.08 * x1 * cos(x2) / (x0 * x3)"),             # a wrong power of r
    ("II.6.11", "0.08 * x1 * sin(x2) / (x0 * x3**2)"),          # sin for cos
    ("I.12.11", "x0 * (x1 + x2 * x3)"),                         # a missing factor
    ("I.12.11", "x0 * x1 + x0 * x2 * x3 * sin(x4) + 1e-2 * x2"),  # a small extra term
    ("I.6.2a", "0.4 * exp(-0.45 * x0**2)"),                     # a constant off by 10%
    ("I.6.2a", "0"),                                             # ratio 0 is no solution
    ("I.37.4", "x0 + x1 + 2 * sqrt(x0 * x1) * cos(x2) * x0"),
])
def test_wrong_models_are_not_symbolic_solutions(eq_id, model):
    assert F.symbolic_solution(sympy.sympify(model), EQS[eq_id]) is False


def test_constants_that_do_not_move_the_model_are_dust():
    # pyoperon + LM's II.3.24: the 7.6e-8 beside 0.465 x0 (x0 in [1, 5]) changes nothing
    m = sympy.sympify("-3.86e-9 - 0.17105862122066451*(-0.4652058482170105*x0 - 7.568e-8)/x1**2")
    assert F.symbolic_solution(m, EQS["II.3.24"]) is True
    # ... but a term of 1e-4 of the scale stays, and makes the model another formula
    m = sympy.sympify("0.0795775 * x0 / x1**2 + 0.0001 * x0")
    assert F.symbolic_solution(m, EQS["II.3.24"]) is False
    x = sympy.Symbol("x0")
    pts = np.linspace(1, 5, 9).reshape(-1, 1)
    assert F.drop_dust(2.0 * x + sympy.Float(1e-9) * x ** 2, (x,), pts) == 2.0 * x


def test_a_model_with_unknown_symbols_is_an_error():
    with pytest.raises(ValueError, match="unknown symbols"):
        F.symbolic_solution(sympy.sympify("x0 * x7"), EQS["I.12.1"])


def fake_fit(method, X, y, Xt, yt, budget, seed):
    """A stand-in for a method: the least-squares line in the first input."""
    A = np.c_[X[:, 0], np.ones(len(X))]
    c = np.linalg.lstsq(A, y, rcond=None)[0]
    expr = sympy.Float(c[0]) * sympy.Symbol("x0") + sympy.Float(c[1])
    p = Xt[:, 0] * c[0] + c[1]
    r2 = 1 - np.sum((yt - p) ** 2) / np.sum((yt - yt.mean()) ** 2)
    return ({"method": method, "seed": seed, "budget": budget, "wall": 0.1, "cpu": 0.1,
             "train_r2": 0.0, "test_r2": float(r2), "size": 5, "sympy_size": 5,
             "model": str(expr)}, expr)


def test_runs_append_resume_and_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(F, "fit_and_score", fake_fit)
    monkeypatch.setattr(F, "warm_up", lambda methods: None)
    out = tmp_path / "runs.jsonl"
    argv = ["--equations", "I.12.1,I.14.4,II.2.42", "--methods", "ndvm,gplearn", "--seeds", "0",
            "--noise", "0,0.01", "--budget", "1", "--samples", "200", "--out", str(out)]
    assert F.main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3 * 2 * 2
    assert {r["noise"] for r in rows} == {0.0, 0.01} and {r["samples"] for r in rows} == {200}
    # I.14.4, k x^2 / 2, against a line in k: solved and symbolic nowhere; I.12.1 = mu Nn is
    # no line in mu alone either
    assert not any(r["symbolic"] for r in rows)
    assert F.main(argv) == 0  # everything done: nothing is run or appended again
    assert len(out.read_text().splitlines()) == 12
    capsys.readouterr()
    assert F.main(["--report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "noise 0 " in text and "noise 0.01 " in text
    assert "| 1-2 | ndvm | 2 |" in text and "| 5+ | gplearn | 1 |" in text
    assert "| all | ndvm | 3 |" in text


def test_rescore_decides_again_from_the_recorded_models(tmp_path):
    rows = [{"equation": "I.12.1", "model": "0.9999999*x0*x1 + 3e-9", "symbolic": False},
            {"equation": "I.12.1", "model": "x0 + x1", "symbolic": True},
            {"equation": "I.12.1", "model": "2.0*x0*(0.5*x1 + 0.1)", "symbolic": True}]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    F.rescore(path)
    assert [r["symbolic"] for r in F.read_rows(path)] == [True, False, False]
    assert [r["redundant"] for r in F.read_rows(path)] == [0, 0, 1]


@pytest.mark.parametrize("model, redundant", [
    ("0.5*x0*exp(1.3*x1)", 0), ("x0/x1", 0), ("x0*(0.5*x1**2 + 0.5*x2**2)", 0),
    ("-0.057*x0*(0.0272*x1 - 0.48)", 1),           # a*(b x1 - c): two numbers, three floats
    ("log(2.1*x0) + 0.3*log(1.7*x1)", 1),          # both scales only shift by a constant
    ("1.5*exp(0.2 + 0.7*x2)*x0", 0),               # (SymPy folds exp(0.2) into 1.5 itself)
    ("1.5*x0/(0.3*x1 + 0.6*x2)", 1),               # one of three scales is free
])
def test_redundant_parameters_count_what_the_data_cannot_tell_apart(model, redundant):
    xs = sympy.symbols("x0:3")
    points = np.random.default_rng(0).uniform(1, 2, (200, 3))
    assert F.redundant_parameters(sympy.sympify(model), xs, points) == redundant


def test_summary_counts():
    rows = [{"test_r2": 0.9995, "symbolic": True, "sympy_size": 7, "wall": 1.0},
            {"test_r2": 0.5, "symbolic": None, "sympy_size": 9, "wall": 3.0},
            {"test_r2": 0.99999, "symbolic": False, "sympy_size": 30, "wall": 2.0}]
    assert F.summary(rows) == (3, 2, 1, 9.0, 2.0)


def test_the_plot_draws_each_methods_shares_and_runs(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [{"method": m, "equation": e, "n_inputs": k, "noise": noise, "budget": 30.0,
             "test_r2": r2, "symbolic": sym, "sympy_size": size, "wall": 1.0}
            for noise in (0.0, 0.01)
            for m, e, k, r2, sym, size in (("ndvm", "I.12.1", 2, 1.0, True, 3),
                                           ("ndvm", "II.2.42", 5, 0.5, False, 9),
                                           ("operon-lm", "I.12.1", 2, 0.9999, False, 30),
                                           ("operon-lm", "II.2.42", 5, float("nan"), False, 1))]
    path = tmp_path / "runs.png"
    fig = F.plot(rows, path)
    assert path.stat().st_size > 0
    assert len(fig.axes) == 4  # a row of two panels per noise level
    bars, scatter = fig.axes[0], fig.axes[1]
    heights = sorted(round(p.get_height(), 3) for p in bars.patches)
    # ndvm: 1-2 solved and symbolic 1.0, 5+ 0, all 0.5 (twice); operon-lm: 1-2 solved 1.0
    # (symbolic 0), 5+ 0, all 0.5 solved and 0 symbolic
    assert heights == sorted([1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0])
    texts = {t.get_text() for t in bars.texts}
    assert "1/1\nof 1" in texts and "1/0\nof 2" in texts
    # one point a run with a finite R² (the NaN run is not drawn)
    assert sum(len(c.get_offsets()) for c in scatter.collections) == 3
    with pytest.raises(ValueError, match="no runs"):
        F.plot([], path)


def test_plot_without_report_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        F.main(["--plot", "x.png"])
    assert "--report" in capsys.readouterr().err
