"""Units (ndvm/cosearch/units.py): the unit parser, dimension inference with fitted parameters as
wildcards, the Buckingham Pi groups, the Feynman table's units, and the paths that take units (the
estimator, Task, the mutate proposer, ndvm search --csv)."""
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import to_tree
from ndvm.cosearch.units import (BASE, TARGET, Dimensions, Inconsistent, Units, format_unit,
                                 infer, integer_null_space, monomial, parse_unit, pi_groups,
                                 seeds)

PARAMS = ("a", "b", "c", "d", "f", "g")


def dim(**exps):
    """A dimension from base exponents: dim(kg=1, m=2, s=-2)."""
    return tuple(Fraction(exps.get(b, 0)) for b in BASE)


# -- the parser ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("1", dim()),
    ("m", dim(m=1)),
    ("m/s", dim(m=1, s=-1)),
    ("kg*m^2/s^2", dim(kg=1, m=2, s=-2)),
    ("kg*m**2/s**2", dim(kg=1, m=2, s=-2)),
    ("J", dim(kg=1, m=2, s=-2)),
    ("N*m", dim(kg=1, m=2, s=-2)),
    ("J/(kg*K)", dim(m=2, s=-2, K=-1)),
    ("J/kg/K", dim(m=2, s=-2, K=-1)),  # left to right
    ("m^-2", dim(m=-2)),
    ("1/s", dim(s=-1)),
    ("Hz", dim(s=-1)),
    ("m^(1/2)", dim(m=Fraction(1, 2))),
    ("C", dim(A=1, s=1)),
    ("V", dim(kg=1, m=2, s=-3, A=-1)),
    ("T", dim(kg=1, s=-2, A=-1)),  # the tesla
    ("F/m", dim(kg=-1, m=-3, s=4, A=2)),
    ("ohm", dim(kg=1, m=2, s=-3, A=-2)),
    ("Pa", dim(kg=1, m=-1, s=-2)),
    ("W", dim(kg=1, m=2, s=-3)),
    (" kg * m / s ", dim(kg=1, m=1, s=-1)),
    ("mol/m^3", dim(mol=1, m=-3)),
    ("cd", dim(cd=1)),
])
def test_parse_good_units(text, want):
    assert parse_unit(text) == want
    assert parse_unit(format_unit(want)) == want  # the canonical text reads back


@pytest.mark.parametrize("text, message", [
    ("", "may not be empty"),
    ("   ", "may not be empty"),
    ("foo", "unknown unit 'foo'"),
    ("km", "unknown unit 'km'"),
    ("kg*", "expected a unit name at column 4"),
    ("m^", "expected a number at column 3"),
    ("m^x", "expected a number"),
    ("(m/s", "expected ')'"),
    ("m/s)", "unexpected ')' at column 4"),
    ("m s", "unexpected 's'"),
    ("3", "unexpected '3'"),
    ("m^(1/0)", "zero denominator"),
    ("m$", "unexpected '$'"),
])
def test_parse_bad_units(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("$", r"\$").replace("*", r"\*").replace("^", r"\^")):
        parse_unit(text)


def test_parse_rejects_a_non_string():
    with pytest.raises(ValueError, match="must be a string"):
        parse_unit(3)


def test_format_unit():
    assert format_unit(dim()) == "1"
    assert format_unit(dim(kg=1, m=2, s=-2)) == "m^2*kg/s^2"
    assert format_unit(dim(m=1, s=-1, K=-1)) == "m/(s*K)"


# -- inference ----------------------------------------------------------------------------------

X = {"x": dim(m=1), "t": dim(s=1), "v": dim(m=1, s=-1), "n": dim()}


def dims_of(src, target=None):
    return infer(to_tree(src), X, PARAMS, target)


@pytest.mark.parametrize("src, want", [
    ("(+ x (* v t))", dim(m=1)),
    ("(/ x t)", dim(m=1, s=-1)),
    ("(- v (/ x t))", dim(m=1, s=-1)),
    ("(square v)", dim(m=2, s=-2)),
    ("(sqrt x)", dim(m=Fraction(1, 2))),
    ("(pow x 3.0)", dim(m=3)),
    ("(pow x 0.5)", dim(m=Fraction(1, 2))),
    ("(* x (exp n) (sin (/ x (* v t))))", dim(m=1)),
    ("(* 2.0 x)", dim(m=1)),
    ("(let ((u (/ x t))) (* u t))", dim(m=1)),
    ("(log x)", dim()),  # log x = log(x/x0) + log x0: dimensionless
])
def test_infer_consistent(src, want):
    assert dims_of(src) == want


@pytest.mark.parametrize("src, culprit", [
    ("(+ x t)", "(+ x t)"),
    ("(- v x)", "(- v x)"),
    ("(exp x)", "(exp x)"),
    ("(sin (* v t))", "(sin (* v t))"),
    ("(* t (+ x 1.0))", "(+ x 1.0)"),  # a literal is a pure number
    ("(pow x n)", "(pow x n)"),  # a data exponent needs a dimensionless base
])
def test_infer_inconsistent_names_the_culprit(src, culprit):
    with pytest.raises(Inconsistent, match=culprit.replace("(", r"\(").replace(")", r"\)")
                       .replace("*", r"\*").replace("+", r"\+")):
        dims_of(src)


@pytest.mark.parametrize("src, ok", [
    ("(* a x)", True),  # a takes the target's unit over x's
    ("(+ a x)", True),  # a takes x's unit
    ("(* x (exp (* a t)))", True),  # a is 1/s
    ("(exp (* a (+ x t)))", False),  # x + t whatever a is
    ("(+ (* a x) (* b t))", True),  # each term its own scale
    ("(+ (* a x) (* a t))", False),  # one a cannot be both 1/m and 1/s
    ("(* a (pow (/ x (* v t)) b))", True),  # a fitted power of a pure number
    ("(* a (pow x b))", False),  # x^b of a length
    ("(sin (+ a x))", False),
    ("(* a (sin (+ b (/ x (* v t)))))", True),
    ("(* x (+ a (log x)))", True),  # (+ a (log x)): the simplifier's form of log(a x)
    ("(+ x (* a (log x)))", True),
])
def test_parameters_are_wildcards(src, ok):
    target = dim(m=1)
    try:
        infer(to_tree(src), X, PARAMS, target)
        assert ok, src
    except Inconsistent:
        assert not ok, src


def test_the_target_constrains_the_value():
    assert dims_of("(* a x)") is None  # depends on a's unit
    infer(to_tree("(* x t)"), X, PARAMS, dim(m=1, s=1))
    with pytest.raises(Inconsistent, match=r"\(\* x t\): m\*s and m do not match"):
        infer(to_tree("(* x t)"), X, PARAMS, dim(m=1))
    with pytest.raises(Inconsistent, match="target's"):
        infer(to_tree("(+ a (* x t))"), X, PARAMS, dim(m=1))


def test_dimensions_admit_and_leave_loops_unchecked():
    u = Units(inputs={"x": dim(m=1), "t": dim(s=1)}, target=dim(m=1, s=-1))
    d = Dimensions(u, Grammar(inputs=("x", "t"), params=PARAMS))
    assert d.admits(to_tree("(/ x t)")) and d.admits(to_tree("(* a x (exp (* b t)))"))
    assert not d.admits(to_tree("(+ x t)")) and not d.admits(to_tree("(* x t)"))
    assert not d.admits(to_tree("(* x t)"))  # (memoized: the same answer again)
    loop = "(loop ((s x) (k 0)) (if (= k 8) s (recur (+ s t) (+ k 1))))"
    assert d.admits(to_tree(loop))  # not read: admitted


# -- the Feynman table: every formula's dimension is its target's -----------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sympy = pytest.importorskip("sympy")
import feynman as F  # noqa: E402

EQS = {e.id: e for e in F.load_equations()}


def sympy_tree(e):
    """A SymPy expression as a program tree (numbers and pi as literals)."""
    if e.is_Symbol:
        return e.name
    if e.is_number:
        return float(e)
    args = [sympy_tree(a) for a in e.args]
    if e.is_Add:
        return ["+"] + args
    if e.is_Mul:
        return ["*"] + args
    if e.is_Pow:
        return ["pow"] + args
    return [type(e).__name__] + args


def equation_units(eq):
    return Units.of({**dict(zip([v[0] for v in eq.variables], eq.units)),
                     TARGET: eq.target_unit}, [v[0] for v in eq.variables])


@pytest.mark.parametrize("eq_id", sorted(EQS))
def test_feynman_formula_has_its_target_unit(eq_id):
    eq = EQS[eq_id]
    u = equation_units(eq)
    got = infer(sympy_tree(eq.expr), u.inputs)
    assert got == u.target, f"{eq_id}: {format_unit(got)} vs {eq.target_unit}"


def test_the_feynman_check_can_fail():
    eq = EQS["I.14.3"]  # m g z: J
    u = equation_units(eq)
    assert infer(sympy_tree(eq.expr), u.inputs) == u.target
    assert infer(sympy_tree(sympy.sympify("m*g")), u.inputs) != u.target
    with pytest.raises(Inconsistent):
        infer(sympy_tree(sympy.sympify("m + g")), u.inputs)


# -- Buckingham Pi ------------------------------------------------------------------------------

def unit_of(exps, u):
    out = dim()
    for x, e in exps.items():
        out = tuple(a + e * b for a, b in zip(out, u.inputs[x]))
    return out


@pytest.mark.parametrize("eq_id, k", [("I.14.3", 0), ("I.12.2", 1), ("I.10.7", 1),
                                      ("I.9.18", 6), ("II.6.15a", 3), ("I.40.1", 2),
                                      ("III.4.33", 1), ("I.41.16", 1), ("II.36.38", 3)])
def test_pi_groups_on_feynman_equations(eq_id, k):
    u = equation_units(EQS[eq_id])
    M, groups = pi_groups(u)
    assert M is not None and unit_of(M, u) == u.target  # M has the target's unit
    assert len(groups) == k
    rank = np.linalg.matrix_rank(np.array([[float(e) for e in u.inputs[x]] for x in u.inputs]))
    assert k == len(u.inputs) - rank
    for g in groups:
        assert g and unit_of(g, u) == dim()  # dimensionless, and not empty
        assert all(e.denominator == 1 and abs(e) <= 3 for e in g.values())  # small integers
    if k:  # a basis
        vecs = np.array([[float(g.get(x, 0)) for x in u.inputs] for g in groups])
        assert np.linalg.matrix_rank(vecs) == k


def test_pi_groups_small_and_readable():
    u = equation_units(EQS["I.10.7"])  # m_0 / sqrt(1 - v^2/c^2)
    M, groups = pi_groups(u)
    assert M == {"m_0": 1}
    assert groups in ([{"v": 1, "c": -1}], [{"v": -1, "c": 1}])
    u = Units.of({"x": "m", "g": "m/s^2", TARGET: "s"}, ["x", "g"])  # t = sqrt(2x/g)
    M, groups = pi_groups(u)
    assert M == {"x": Fraction(1, 2), "g": Fraction(-1, 2)} and groups == []


def test_the_groups_are_a_basis_of_the_integer_lattice():
    # n_0 exp(-m g x / (kb T)): over the rationals, n_0 x^3 and n_0 (kb T / (m g))^3 span the
    # groups, but m g x / (kb T) is no integer combination of those two
    u = equation_units(EQS["I.40.1"])
    M, groups = pi_groups(u)
    assert {"m": 1, "g": 1, "x": 1, "kb": -1, "T": -1} in groups
    assert {"n_0": 1, "x": 3} in groups and M == {"n_0": 1}
    rows = [[2, 4, 6]]  # v0 + 2 v1 + 3 v2 = 0
    basis = np.array(integer_null_space(rows, 3), dtype=float).T
    assert basis.shape == (3, 2) and not np.any(np.array(rows) @ basis)
    for v in ([1, 1, -1], [-2, 1, 0], [3, 0, -1]):  # integer combinations of the basis
        c = np.linalg.lstsq(basis, np.array(v, dtype=float), rcond=None)[0]
        assert np.allclose(basis @ c, v) and np.allclose(c, np.round(c))


def test_a_dimensionless_target_gets_c_h():
    u = Units.of({"E": "J", "t": "s", "h": "J*s", TARGET: "1"}, ["E", "t", "h"])
    M, groups = pi_groups(u)
    assert M == {} and groups == [{"E": 1, "t": 1, "h": -1}]
    s = seeds(u, grammar_of(u))
    assert s[1] == ["*", "a", ["/", ["*", "E", "t"], "h"]]
    assert not any(1.0 in t for t in s if isinstance(t, list))


def test_no_monomial_has_the_target_unit():
    u = Units.of({"x": "m", TARGET: "s"}, ["x"])
    M, groups = pi_groups(u)
    assert M is None and groups == []
    assert seeds(u, Grammar(inputs=("x",), params=PARAMS)) == ["a"]  # the parameter's unit


def test_monomial_trees():
    assert monomial({"x": 1}) == "x"
    assert monomial({"x": 1, "y": -2}) == ["/", "x", ["square", "y"]]
    assert monomial({"x": -1}) == ["/", 1.0, "x"]
    assert monomial({"x": Fraction(1, 2), "g": Fraction(-1, 2)}) == ["/", ["sqrt", "x"],
                                                                     ["sqrt", "g"]]
    assert monomial({}) == 1.0
    assert monomial({"x": Fraction(1, 3), "y": 3}) == ["*", ["pow", "x", 1 / 3],
                                                       ["*", ["square", "y"], "y"]]


def grammar_of(u):
    """The grammar a task over these inputs gets (parameter names free of input names)."""
    return Grammar(inputs=tuple(u.inputs), params=tuple(p for p in PARAMS if p not in u.inputs))


def test_seeds_are_consistent_and_start_with_c_m():
    u = equation_units(EQS["I.10.7"])  # inputs m_0, v, c
    g = grammar_of(u)
    d = Dimensions(u, g)
    s = seeds(u, g)
    assert s[0] == ["*", "b", "m_0", "a"]  # c M, h = a
    assert len(s) > 20 and all(d.admits(t) for t in s)
    u0 = equation_units(EQS["I.14.3"])  # k = 0: c M alone
    assert seeds(u0, grammar_of(u0)) == [["*", "b", ["*", "m", "g", "z"], "a"]]


# -- the paths that take units ------------------------------------------------------------------

def test_task_checks_its_units():
    from ndvm.cosearch.task import Task
    inputs = {"x": np.arange(4.0), "t": np.arange(4.0) + 1}
    y = np.ones(4)

    def task(units):
        return Task(name="u", inputs=inputs, target=y, heldout=[3], data_units=units)
    assert task({"x": "m", "t": "s", TARGET: "m/s"}).data_units.target == dim(m=1, s=-1)
    with pytest.raises(ValueError, match="unknown input.*'z'"):
        task({"x": "m", "t": "s", "z": "m", TARGET: "m/s"})
    with pytest.raises(ValueError, match="no unit for input.*'t'"):
        task({"x": "m", TARGET: "m/s"})
    with pytest.raises(ValueError, match="no unit for the target"):
        task({"x": "m", "t": "s"})
    with pytest.raises(ValueError, match="unit of 't': bad unit 'sec'"):
        task({"x": "m", "t": "sec", TARGET: "m/s"})
    with pytest.raises(ValueError, match="must be a dict"):
        task(["m", "s", "m/s"])


def law(n=300, seed=0):
    """y = x1 x2 / (x3 x4^2) with four independent units: k = 0, the law is c M."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(1, 3, (n, 4))
    return X, X[:, 0] * X[:, 1] / (X[:, 2] * X[:, 3] ** 2)


LAW_UNITS = {"x0": "kg", "x1": "m", "x2": "s", "x3": "A", TARGET: "kg*m/(s*A^2)"}


def test_estimator_finds_a_monomial_law_with_units():
    pytest.importorskip("sklearn")
    import ndvm
    X, y = law()
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=24, units=LAW_UNITS).fit(X, y)
    assert m.score(X, y) > 0.999999, m.program_
    assert m.size_ <= 11, m.program_


def test_every_candidate_of_a_search_with_units_is_consistent():
    import ndvm
    from ndvm.cosearch.task import Task
    X, y = law()
    units = {"x0": "kg", "x1": "m", "x2": "s", "x3": "m", TARGET: "kg/(s*m)"}  # k = 1
    task = Task.from_arrays("u", {f"x{i}": X[:, i] for i in range(4)}, y, data_units=units,
                            loops=False, threshold=None)
    g = Grammar(inputs=tuple(task.inputs), params=tuple(task.params), loop=False)
    res = ndvm.search(task, proposer="mutate", max_candidates=200, workers=1, grammar=g)
    d = Dimensions(task.data_units, g)
    models = [r["model"] for r in res.records if r["model"]]
    assert len(models) > 100 and all(d.admits(to_tree(s)) for s in models)
    assert models[0] == "(* a (/ x0 (* x1 x2)))"  # c M first
    assert res.best["r2"] > 0.999999


def test_estimator_unit_errors_name_the_culprit():
    pytest.importorskip("sklearn")
    import ndvm
    X, y = law(n=20)
    bad = [({**LAW_UNITS, "x9": "m"}, "unknown input.*'x9'"),
           ({k: v for k, v in LAW_UNITS.items() if k != TARGET}, "no unit for the target"),
           ({k: v for k, v in LAW_UNITS.items() if k != "x2"}, "no unit for input.*'x2'"),
           ({**LAW_UNITS, "x1": "meter"}, "unit of 'x1': bad unit 'meter'"),
           ("kg", "must be a dict")]
    for units, message in bad:
        with pytest.raises(ValueError, match=message):
            ndvm.SymbolicRegressor(budget=None, max_candidates=4, units=units).fit(X, y)


def test_estimator_units_by_feature_name():
    pd = pytest.importorskip("pandas")
    pytest.importorskip("sklearn")
    import ndvm
    X, y = law()
    df = pd.DataFrame(X, columns=["mass", "length", "time", "current"])
    units = {"mass": "kg", "length": "m", "time": "s", "current": "A", TARGET: LAW_UNITS[TARGET]}
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=24, units=units).fit(df, y)
    assert m.score(df, y) > 0.999999
    with pytest.raises(ValueError, match="unknown input.*'x0'"):
        ndvm.SymbolicRegressor(budget=None, max_candidates=4, units=LAW_UNITS).fit(df, y)


def write_law_csv(path, units_row):
    X, y = law(n=60)
    lines = ["mass,dist,time,current,y"]
    if units_row:
        lines.append(units_row)
    lines += [",".join(f"{v:.17g}" for v in row) for row in np.c_[X, y]]
    path.write_text("\n".join(lines) + "\n")


def test_cli_search_csv_with_a_units_row(tmp_path, capsys):
    from ndvm.cli import main, read_table
    path = tmp_path / "law.csv"
    write_law_csv(path, "#units kg,m,s,A,kg*m/(s*A^2)")
    cols, units = read_table(path)
    assert units == {"mass": "kg", "dist": "m", "time": "s", "current": "A",
                     "y": "kg*m/(s*A^2)"}
    assert len(cols["y"]) == 60
    rc = main(["search", "--csv", str(path), "--max-candidates", "8", "--quiet",
               "--workers", "1", "--optimizer", "lm"])
    out = capsys.readouterr().out
    assert rc == 0 and "(* a (/ (* dist mass) (* (square current) time)))" in out


def test_cli_csv_errors(tmp_path, capsys):
    from ndvm.cli import main
    path = tmp_path / "law.csv"
    write_law_csv(path, "#units kg,m,s,A")
    assert main(["search", "--csv", str(path), "--max-candidates", "4", "--quiet"]) == 2
    assert "law.csv:2:1: the units row has 4 fields for 5 columns" in capsys.readouterr().err
    write_law_csv(path, "#units kg,m,sec,A,1")
    assert main(["search", "--csv", str(path), "--max-candidates", "4", "--quiet"]) == 2
    assert "unit of 'time': bad unit 'sec'" in capsys.readouterr().err
    write_law_csv(path, None)
    assert main(["search", "--csv", str(path), "--target", "z", "--quiet"]) == 2
    assert "no column 'z'" in capsys.readouterr().err
    assert main(["search", "--csv", str(path), "--task", "damped", "--quiet"]) == 2
    assert "not both" in capsys.readouterr().err


def test_islands_search_with_units():
    """Each island's proposer carries the task's Dimensions across processes (pickled)."""
    pytest.importorskip("sklearn")
    import ndvm
    X, y = law()
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=64, units=LAW_UNITS, islands=2,
                               workers=2, migration_every=16).fit(X, y)
    assert m.score(X, y) > 0.999999, m.program_
    d = Dimensions(Units.of(LAW_UNITS, [f"x{i}" for i in range(4)]),
                   Grammar(inputs=tuple(f"x{i}" for i in range(4)), params=PARAMS))
    models = [r["model"] for r in m.result_.records if r["model"]]
    assert len(models) > 32 and all(d.admits(to_tree(s)) for s in models)
