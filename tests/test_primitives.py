"""The core's one list of primitives (ndvm._core.primitives()) against every Python copy of it:
the baselines' table, the simplifier's arithmetic, the SymPy export, the grammar and the fuzzer.
A copy that leaves a numeric primitive out does so in a named exclusion set of its module."""
import math

import numpy as np
import pytest

import ndvm
from ndvm._core import primitives
from ndvm.baselines import split, tagged
from ndvm.cosearch import export, grammar, simplify
from ndvm.cosearch.sexpr import to_tree

import fuzzgen

PRIMS = primitives()
ALL = {p["name"]: p for p in PRIMS}
NUMERIC = {name: p for name, p in ALL.items() if p["family"] != "data"}
FAMILIES = {"arith", "compare", "minmax", "unary", "elementwise", "binary", "atan", "square"}


def coverage_problems(what, covered, excluded):
    """What is wrong with a Python copy that handles `covered` and names `excluded` as left out,
    against the core's numeric primitives (an empty list when it agrees)."""
    covered, excluded = set(covered), set(excluded)
    problems = [f"{what}: {n!r} is neither handled nor excluded"
                for n in sorted(set(NUMERIC) - covered - excluded)]
    problems += [f"{what}: {n!r} is not a primitive of the core"
                 for n in sorted((covered | excluded) - set(ALL))]
    problems += [f"{what}: {n!r} is both handled and excluded" for n in sorted(covered & excluded)]
    problems += [f"{what}: excludes {n!r}, which is not a numeric primitive"
                 for n in sorted(excluded - set(NUMERIC))]
    return problems


def accepts(name, n):
    lo, hi = ALL[name]["arity"]
    return n >= lo and (hi is None or n <= hi)


def test_the_list_names_each_primitive_once_numeric_first():
    names = [p["name"] for p in PRIMS]
    assert len(names) == len(set(names))
    families = [p["family"] for p in PRIMS]
    first_data = families.index("data")
    assert set(families[:first_data]) <= FAMILIES
    assert set(families[first_data:]) == {"data"}
    for p in PRIMS:
        lo, hi = p["arity"]
        assert lo >= 0 and (hi is None or hi >= lo), p
    # the spec's numeric primitives (SPEC.md, "The language")
    assert set(NUMERIC) == set(
        "+ - * / = < > <= >= min max abs sqrt exp log sin cos tan tanh atan pow expt square floor "
        "ceiling round truncate modulo remainder".split())


def test_the_core_checks_the_arity_the_list_gives():
    ev = ndvm.Evaluator()
    for name, p in NUMERIC.items():
        lo, hi = p["arity"]
        too_many = hi + 1 if hi is not None else None
        for n in [k for k in (lo - 1, too_many) if k is not None and k >= 0]:
            src = "(" + " ".join([name] + ["1"] * n) + ")"
            with pytest.raises(ndvm.EvalError, match=f"{name}: expects"):
                ev.evaluate(ndvm.parse(src))


def test_the_split_baseline_has_every_primitive_with_its_arity():
    table = split.SplitModel.PRIMS
    assert set(table) == set(ALL)
    for name, (method, lo, hi) in table.items():
        assert (lo, None if hi < 0 else hi) == ALL[name]["arity"], name
    # the numeric ones, by the form that calls them
    for name, p in NUMERIC.items():
        method = table[name][0]
        if p["family"] in ("unary", "elementwise"):
            assert method == "p_unary" and name in split._UNARY, name
            assert (name in split._ELEMENTWISE) == (p["family"] == "elementwise"), name
        elif p["family"] == "binary":
            assert method in ("p_binary", "p_pow"), name
            assert method == "p_pow" or name in split._BINARY, name
    assert split._ELEMENTWISE - {"neg"} == {n for n, p in NUMERIC.items()
                                            if p["family"] == "elementwise"}


def test_the_tagged_baseline_shares_the_split_table():
    assert tagged.TaggedModel.PRIMS is split.SplitModel.PRIMS


def test_the_simplifier_covers_the_numeric_primitives():
    assert coverage_problems("simplify", simplify._ARITH, simplify.UNFOLDED) == []


def test_the_sympy_export_covers_the_numeric_primitives():
    sympy = pytest.importorskip("sympy")
    assert coverage_problems("export", export._table(sympy), export.NOT_EXPORTED) == []


def test_the_grammar_covers_the_numeric_primitives():
    g = grammar.Grammar()
    assert coverage_problems("grammar", g.unary + g.binary, grammar.NOT_PROPOSED) == []
    assert all(accepts(f, 1) for f in g.unary) and all(accepts(f, 2) for f in g.binary)


def test_the_fuzzer_calls_every_primitive():
    assert coverage_problems("fuzzgen", fuzzgen.UNARY + fuzzgen.BINARY + fuzzgen.CMP, ()) == []
    assert set(ALL) <= set(fuzzgen.PRIMS)
    assert all(accepts(f, 1) for f in fuzzgen.UNARY) and all(accepts(f, 2) for f in fuzzgen.BINARY)


def test_a_copy_that_disagrees_is_reported():
    names = set(NUMERIC)
    assert coverage_problems("x", names, ()) == []
    assert coverage_problems("x", names - {"floor"}, ()) == [
        "x: 'floor' is neither handled nor excluded"]
    assert coverage_problems("x", names | {"no-such-op"}, ()) == [
        "x: 'no-such-op' is not a primitive of the core"]
    assert coverage_problems("x", names, {"floor"}) == ["x: 'floor' is both handled and excluded"]
    assert coverage_problems("x", names - {"car"}, {"car"}) == [
        "x: excludes 'car', which is not a numeric primitive"]


@pytest.mark.parametrize("name", sorted(set(NUMERIC) - export.NOT_EXPORTED))
def test_the_sympy_export_of_each_primitive_agrees_with_the_core(name):
    sympy = pytest.importorskip("sympy")
    ev = ndvm.Evaluator()
    values = (0.7, 1.9, -0.4, -2.3)
    checked = 0
    for n in (1, 2, 3):
        if not accepts(name, n):
            continue
        args = "abc"[:n]
        src = "(" + " ".join([name, *args]) + ")"
        for shift in range(len(values)):
            params = {a: values[(shift + i) % len(values)] for i, a in enumerate(args)}
            want = ev.evaluate(ndvm.parse(src), params=params).item()
            got = complex(export.to_sympy(to_tree(src), params).evalf())
            if not math.isfinite(want):
                continue  # sqrt and log of a negative number: NaN here, complex in SymPy
            assert got.imag == 0 and got.real == pytest.approx(want, rel=1e-12, abs=1e-12), params
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_logdet_does_not_overflow_where_det_does(client):
    # (logdet was log(det): 10 I of 400 x 400 gave inf, 1e-120 I of 3 x 3 -inf, and a float32
    # 2 x 2 of 1e20 on its diagonal inf, with a gradient of 0 where det overflowed)
    ev = ndvm.Evaluator(client=client)
    assert ev.evaluate("(logdet (scale 10 (eye 400)))").value[0, 0] == pytest.approx(
        400 * np.log(10.0), rel=1e-12)
    assert ev.evaluate("(logdet (scale 1e-120 (eye 3)))").value[0, 0] == pytest.approx(
        3 * np.log(1e-120), rel=1e-12)
    assert np.isnan(ev.evaluate("(logdet (mat [1 2] [3 4]))").value[0, 0])  # (det -2)
    assert np.isnan(ev.evaluate("(logdet (mat [0 1 0] [1 0 0] [0 0 3]))").value[0, 0])
    assert ev.evaluate("(logdet (mat [1 2 3] [2 4 6] [1 0 1]))").value[0, 0] == -np.inf
    r = ev.evaluate("(logdet (mat [a 0] [0 x]))", params={"a": [2.0, 1e200]},
                    data={"x": [1e200, 3.0]}, grad=True)
    assert np.allclose(r.value, [[np.log(2.0) + 200 * np.log(10.0), np.log(6.0)],
                                 [400 * np.log(10.0), np.log(3.0) + 200 * np.log(10.0)]])
    assert r.grad["a"] == pytest.approx([1.0, 2e-200], rel=1e-12)
    r = ev.evaluate("(logdet (mat [a b] [1 3]))", params={"a": [2.0, 4.0], "b": [0.5, 1.5]},
                    grad=True)
    assert r.grad["a"] == pytest.approx([3 / 5.5, 3 / 10.5]) and r.grad["b"] == pytest.approx(
        [-1 / 5.5, -1 / 10.5])
    r = ndvm.Evaluator(client=client, dtype="float32").evaluate(
        "(logdet (mat [a 0] [0 1e20]))", params={"a": 1e20}, grad=True)
    assert r.value[0, 0] == pytest.approx(40 * np.log(10.0), rel=1e-6)
    assert r.grad["a"] == pytest.approx([1e-20], rel=1e-5)
