"""The core's genetic operators (ndvm/_core/breed.pxi, grammar.py's face) make the children the
Python operators made, draw for draw: tests/breed_golden.jsonl.gz (written by
tests/breed_golden.py from the Python operators before they moved) is replayed in full."""
import gzip
import json
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from ndvm._core._core import BREED_MAX_DEPTH, Draws, breed_round
from ndvm.cosearch import grammar as gp
from ndvm.cosearch.sexpr import to_tree

sys.path.insert(0, str(Path(__file__).parent))
import breed_golden  # noqa: E402

GOLDEN = Path(__file__).with_name("breed_golden.jsonl.gz")


def _golden():
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _exact(a, b):
    """Equal trees, floats bit for bit and ints apart from floats (2 is not 2.0)."""
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(_exact(x, y) for x, y in zip(a, b)))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or a != a and b != b)
    return a == b


def test_the_core_breeds_every_child_of_the_golden_file_with_the_same_draws():
    want = _golden()
    got = [json.loads(json.dumps(r)) for r in breed_golden.records(gp)]  # (as the file holds it)
    assert len(got) == len(want) > 15_000
    for g, w in zip(got, want):
        assert g[:5] == w[:5]
        if w[0] == "child":
            assert _exact(g[5], w[5]), (w[:5], g[5], w[5])
            assert g[6] == w[6], f"{w[:5]}: the stream moved on differently"
        else:
            assert g == w


def test_the_copy_of_the_python_operators_agrees_with_the_golden_file():
    # (the writer's own operators still make the file: it is their record)
    want = _golden()
    got = [json.loads(json.dumps(r)) for r, _ in zip(breed_golden.records(breed_golden.PYTHON),
                                                      range(2000))]
    assert got == want[:len(got)]


def test_round_is_pythons_own():
    rng = np.random.default_rng(5)
    values = list(rng.uniform(-3, 3, 20000)) + list(rng.normal(0, 1e3, 5000))
    values += list(rng.standard_normal(5000) * 10.0 ** rng.integers(-12, 12, 5000))
    # exact binary ties (half-even), values near ties, signed zeros, extremes
    values += [k / 8 for k in range(-80, 80)] + [k / 200 for k in range(-600, 600)]
    values += [0.125, 0.375, 2.675, 1.005, -0.005, -0.0001, 0.00005, -0.00005, 0.0, -0.0,
               5e-324, -5e-324, 1e308, -1.7976931348623157e308, 1e16 + 2, 123456789.12345,
               math.inf, -math.inf]
    # (the doubles either side of decimal halves, where the exact product decides)
    values += [math.nextafter(k / 200, d) for k in range(-700, 700) for d in (-9.0, 9.0)]
    values += [math.nextafter((k + 0.5) / 10 ** n, d) for n in range(9) for k in range(-40, 40)
               for d in (-math.inf, math.inf)] + [999999.995, 999999.99999999, 1e6, -1e6]
    for v in values:
        v = float(v)
        for n in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9):
            a, b = breed_round(v, n), round(v, n)
            assert a == b and math.copysign(1, a) == math.copysign(1, b), (v, n, a, b)
    assert math.isnan(breed_round(math.nan, 2))


def test_positions_match_the_python_rule_on_every_tree():
    for rec in _golden():
        if rec[0] == "positions":
            tree = rec[2]
            assert breed_golden._positions(gp, tree) == rec[3]
            assert breed_golden._positions(breed_golden.PYTHON, tree) == rec[3]
            assert gp.Sites(tree).spots == gp.positions(tree)  # (Sites lists them itself)
    loop = to_tree("(loop ((s x) (k 0)) (if (= k 3) s (recur (* a s) (+ k 1))))")
    assert ([(p, s, l) for p, s, l in gp.positions(loop, frozenset({"u0"}), frozenset(),
                                                     (4,))]
            == [(p, s, l) for p, s, l in breed_golden.positions(loop, frozenset({"u0"}),
                                                                frozenset(), (4,))])


def _positions_as_golden(trees):
    # each tree's positions, and its Sites' spots, as breed_golden's Python rule lists them,
    # without and with a scope and counters
    for tree in trees:
        for scope, counters in ((frozenset(), frozenset()), (frozenset({"u0"}), frozenset({"k"}))):
            want = list(breed_golden.positions(tree, scope, counters, ()))
            assert gp.positions(tree, scope, counters) == want
            if not scope:
                assert gp.Sites(tree).spots == want


def test_sites_list_an_atoms_position_as_the_python_rule_does():
    # (a call's atoms are listed in place, not through the recursion: a counter inside a loop's
    # body, a name the counters hold, a list subclass, numbers and booleans among them)
    class Items(list):
        pass

    trees = [to_tree("(loop ((s x) (k 0)) (if (= k 3) s (recur (* k s) (+ k 1))))"),
             to_tree("(loop ((s 1.5) (k 0)) (if (< k 2) (+ s (sin k) x 2) (recur s (+ k 1))))"),
             ["+", Items(["*", "a", "x"]), 2, True, ["sin", "k"], "k"],
             ["f", "x", ["g", Items(["h", "k", 3.0])], "y"]]
    _positions_as_golden(trees)


def test_sites_list_calls_of_one_character_heads_as_the_python_rule_does():
    # (a head of one character is known to be no special form without a set look up: an exact
    # str's; a str subclass's, a longer name's and any other head's are looked up as before)
    class Name(str):
        pass

    trees = [to_tree("(+ (* a x) (- (/ x 2) (^ b 3)) (= k 1) (< s k))"),
             to_tree("(let ((u0 (+ a x))) (if (< u0 1) (* u0 u0) (- u0)))"),
             to_tree("(loop ((s x) (k 0)) (if (= k 3) s (recur (+ (* a s) k) (+ k 1))))"),
             [Name("+"), ["*", "a", "x"], [Name("if"), "x", "k", 1.0], ["sin", "k"]],
             ["f", ["g"], [], ["h", ["+"]], [1, "x"], [("+",), "x"]]]
    _positions_as_golden(trees)


def test_a_numpy_generator_and_draws_of_it_breed_alike():
    g = gp.Grammar()
    parent = to_tree("(let ((u0 (* a x))) (+ (sin u0) 2.0))")
    a, b = np.random.default_rng(3), Draws(np.random.default_rng(3))
    for _ in range(300):
        assert gp.mutate(a, g, parent) == gp.mutate(b, g, parent)
        assert gp.grow(a, g) == gp.grow(b, g)
    assert a.random() == b.random()


def test_children_share_the_parents_untouched_lists():
    g = gp.Grammar()
    parent = to_tree("(+ (* a (sin x)) (* b (cos x)))")
    rng = Draws(np.random.default_rng(0))
    shared = 0
    for _ in range(200):
        child = gp.mutate(rng, g, parent)
        if isinstance(child, list) and len(child) == 3 and child[0] == "+":
            shared += child[1] is parent[1] or child[2] is parent[2]
    assert shared > 20


def test_breeders_are_one_per_grammar_value_and_pickle_nothing_of_their_own():
    g = gp.Grammar()
    assert gp.breeder(g) is gp.breeder(gp.Grammar())
    assert gp.breeder(g) is not gp.breeder(gp.Grammar(inputs=("x", "y")))
    # a grammar changed in place is a new value: its breeder reads the new fields
    h = gp.Grammar()
    h.unary = ("sin",)
    rng = Draws(np.random.default_rng(0))
    assert gp.breeder(h) is not gp.breeder(g)
    trees = [gp.grow(rng, h, 1) for _ in range(300)]
    heads = {t[0] for t in trees if isinstance(t, list)}
    assert heads == {"sin", "+", "-", "*", "/", "pow"}
    before = gp.breeder(h)
    assert gp.breeder(h) is before
    h.mutation_rates["extend"] = 5.0  # (changed in place: a new value too)
    assert gp.breeder(h) is not before and gp.breeder(h) is gp.breeder(h)
    # the rng a search pickles is its Draws: a bred stream continues after a round trip
    d = Draws(np.random.default_rng(9))
    gp.grow(d, g)
    e = pickle.loads(pickle.dumps(d))
    assert gp.grow(d, g) == gp.grow(e, g)


def _deep(n):
    t = "x"
    for _ in range(n):
        t = ["sin", t]
    return t


@pytest.mark.parametrize("op", ["positions", "sites", "mutate", "crossover", "shift"])
def test_trees_too_deep_or_cyclic_are_refused_with_an_exception(op):
    g = gp.Grammar()
    cyclic = ["+", "x", "a"]
    cyclic.append(cyclic)
    rng = Draws(np.random.default_rng(0))
    for tree in (_deep(BREED_MAX_DEPTH + 5), cyclic, _deep(100_000)):
        with pytest.raises(RecursionError, match="nested more than|native stack"):
            if op == "positions":
                gp.positions(tree)
            elif op == "sites":
                gp.Sites(tree)
            elif op == "mutate":
                gp.mutate(rng, g, tree)
            elif op == "crossover":
                gp.crossover(rng, g, ["+", "x", "a"], tree)
            else:
                gp._shift_inputs(tree, g)
    # a deep tree below the limit is bred as before
    gp.mutate(rng, g, _deep(BREED_MAX_DEPTH // 2))


def test_bad_arguments_raise_clear_errors():
    g = gp.Grammar()
    rng = Draws(np.random.default_rng(0))
    with pytest.raises(TypeError, match="numpy Generator or an ndvm Draws"):
        gp.grow(object(), g)
    with pytest.raises(TypeError, match="Sites"):
        gp.mutate(rng, g, ["sin", "x"], sites=[((), frozenset(), False)])
    with pytest.raises(ValueError, match="low >= high"):
        for _ in range(50):  # (a leaf is a parameter half the time)
            gp.grow(rng, gp.Grammar(params=()), 0)
    with pytest.raises(TypeError, match="max_depth"):
        gp.grow(rng, gp.Grammar(max_depth=2.5))
    with pytest.raises(IndexError):
        gp.Sites(["+", [], "x"]).operators(frozenset({"+"}))
    # atoms of any kind pass through as the Python operators passed them
    odd = ["+", object(), ["sin", "x"]]
    for seed in range(20):
        a, b = Draws(np.random.default_rng(seed)), Draws(np.random.default_rng(seed))
        assert _same(gp.mutate(a, g, odd), breed_golden.mutate(b, g, odd))


@pytest.mark.parametrize("p", [[], [0.0, 0.0], [float("nan"), 1.0], [-1.0, 2.0],
                               [float("inf"), 1.0], ["x", 1.0]])
def test_choice_refuses_weights_numpy_would_refuse(p):
    # regression: choice(rng, [], []) read past the end of an empty list in the core (a segfault)
    rng = Draws(np.random.default_rng(0))
    with pytest.raises(ValueError, match="weights must be finite numbers >= 0"):
        gp.choice(rng, ["a", "b"][:len(p)], p)
    with pytest.raises(ValueError, match="mutation_rates"):
        gp.Grammar(mutation_rates=dict.fromkeys(gp.Grammar().mutation_rates, 0.0)).check()


def _same(a, b):
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    return a is b or a == b


def test_choice_takes_numpy_numbers_as_weights_as_numpy_does():
    # (the weight check refused numpy integers, which numpy's choice takes)
    p = [np.int64(1), np.float32(0.5), np.int32(2)]
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    items = ["x", "y", "z"]
    assert [gp.choice(Draws(a), items, p) for _ in range(50)] == \
        [items[b.choice(3, p=np.asarray(p, dtype=float) / 3.5)] for _ in range(50)]
    rates = dict(zip(gp.BREED_KINDS, map(np.int64, (4, 2, 2, 1, 1, 1))))
    assert gp.Grammar(mutation_rates=rates).check().mutation_rates is rates


def test_an_operator_mutation_keeps_the_calls_arguments_takeable():
    """(+ a b x) and (- x) were given a pow: a program that cannot run (every invalid record of
    a long damped search was one). Each child of an operator mutation parses, and the binary
    call still becomes each of the others, pow among them."""
    import ndvm
    from ndvm.cosearch.sexpr import to_source
    g = gp.Grammar(inputs=("x",), params=("a", "b"),
                   mutation_rates={"subtree": 0, "constant": 0, "operator": 1, "hoist": 0,
                                   "extend": 0, "shift": 0})
    heads = {}
    for src in ("(+ a b x)", "(* a x x x)", "(- x)", "(/ x)", "(pow x a)", "(- x a)"):
        rng = np.random.default_rng(0)
        for _ in range(200):
            child = gp.mutate(rng, g, to_tree(src))
            ndvm.parse(to_source(child))  # (raises for a call with arguments its head refuses)
            heads.setdefault(src, set()).add(child[0])
    assert heads["(- x a)"] == {"+", "*", "/", "pow"}
    assert heads["(pow x a)"] == {"+", "-", "*", "/"}
    assert "pow" not in heads["(+ a b x)"] | heads["(- x)"] | heads["(/ x)"]
    assert heads["(+ a b x)"] == {"-", "*", "/"} and heads["(- x)"] == {"+", "*", "/"}


def test_sites_list_their_positions_tuples_when_asked_as_positions_gives_them():
    # (a Sites keeps its positions as C arrays: the (path, scope, in_loop) tuples it gives, of
    # every position and of its numbers', names' and operators', are positions' own)
    tree = to_tree("(let ((u0 (* a x))) (+ (sin u0) (loop ((s x) (k 0)) "
                   "(if (= k 3) s (recur (* 2.5 s) (+ k 1))))))")
    sites, want = gp.Sites(tree), gp.positions(tree)
    assert sites.spots == want and sites.spots is sites.spots
    assert all(type(p) is tuple and all(type(i) is int for i in p) for p, _, _ in want)
    assert sites.numbers() == [w for w in want if type(gp.get_at(tree, w[0])) is float]
    assert sites.names(frozenset({"x"})) == [w for w in want if gp.get_at(tree, w[0]) == "x"]
    assert sites.operators(frozenset({"*", "sin"})) == [
        w for w in want if isinstance(gp.get_at(tree, w[0]), list)
        and gp.get_at(tree, w[0])[0] in ("*", "sin")]
    assert gp.Sites(2.0).spots == [((), frozenset(), False)]
