"""The golden file of the canonical form: inputs and what ndvm.cosearch.simplify gave for them.

    python tests/simplify_golden.py [OUT]   (default tests/simplify_golden.jsonl.gz)

Written once from the Python rewrite rules, before they moved into the core (run then with the
interpreter of a checkout of that time), and checked by tests/test_simplify.py: the core gives
every output again. Since then one rule was added in the core, u^1 = u and u^0 = 1 (2026-12-04):
the outputs of the 157 inputs with such a power were updated in place (inputs kept). Run now, it records the core's own outputs. Each line
is JSON: [tree, params, canonical, simplified] where tree is the input (nested lists; NaN and
infinities as JSON's NaN/Infinity), params an index into the first line's list of parameter
sets, canonical ["ok", tree, source, size, skeleton] or ["err", exception type, message] of
``Simplifier.canonical_form`` and simplified ["ok", tree] or ["err", type, message] of
``simplify``. The inputs: random trees of several grammars (1 to 5 inputs, let and loop forms),
grown, mutated and crossed as a search does; every proposal of seeded searches on the built-in
tasks and on a two-input regression; the cases of tests/test_simplify.py; numeric and
structural edge cases (NaN, infinities, huge and signed-zero literals, booleans, empty lists,
malformed special forms, deep trees).
"""
import gzip
import json
import math
import re
import sys
from pathlib import Path

import numpy as np

PARAMS = [("a", "b", "c", "d"), ("a", "b", "c", "d", "f", "g"), ("a", "b"), ("p", "q", "r")]


def _grammars():
    from ndvm.cosearch.grammar import Grammar
    P6 = PARAMS[1]
    return [
        (Grammar(), 0),
        (Grammar(inputs=("x", "y"), loop=False, max_size=30), 1),
        (Grammar(inputs=("x0", "x1", "x2"), params=P6, loop=False), 1),
        (Grammar(inputs=("x0", "x1", "x2", "x3", "x4"), params=P6,
                 unary=("sin", "cos", "exp", "log", "sqrt", "tanh", "square", "tan", "atan",
                        "abs"),
                 binary=("+", "-", "*", "/", "pow", "expt"), constants=(0.5, 1.0, 2.0, 3.0, 0.0,
                                                                         -1.0)), 1),
        (Grammar(inputs=("x",), params=("p", "q", "r"), constants=(1, 2, 0.25)), 3),
    ]


def random_trees(n_per_grammar, seed=0):
    """(tree, params index) grown, mutated and crossed as a genetic search makes them."""
    from ndvm.cosearch import grammar as gp
    rng = np.random.default_rng(seed)
    out = []
    for g, pi in _grammars():
        parents = [gp.grow(rng, g) for _ in range(4)]
        for i in range(n_per_grammar):
            r = rng.random()
            if r < 0.25:
                child = gp.grow(rng, g)
            elif r < 0.45:
                child = gp.crossover(rng, g, parents[int(rng.integers(len(parents)))],
                                     parents[int(rng.integers(len(parents)))])
            else:
                child = gp.mutate(rng, g, parents[int(rng.integers(len(parents)))])
            out.append((child, pi))
            if rng.random() < 0.15:
                out.append((child, 2))  # few names: literals stay, then sharing, then refusal
            parents = (parents + [child])[-12:]
    return out


def search_trees(n):
    """(tree, params index) of every proposal of seeded searches."""
    import ndvm
    from ndvm.cosearch.sexpr import to_tree
    from ndvm.cosearch.task import Task
    rng = np.random.default_rng(7)
    x0, x1 = rng.uniform(0.5, 3, 80), rng.uniform(0.5, 3, 80)
    two = Task.from_arrays("two", {"x0": x0, "x1": x1}, np.sin(x0) * x1 + 0.5 * x0,
                           heldout=20, seed=1, seeds=("(* a x0)", "(+ a (* b x1))"))
    out = []
    for task, seed in (("damped", 0), ("recurrence", 0), (two, 3)):
        res = ndvm.search(task, seed=seed, max_candidates=n, budget=None, workers=1)
        params = tuple(res.task.params)
        pi = PARAMS.index(params) if params in PARAMS else None
        if pi is None:
            PARAMS.append(params)
            pi = len(PARAMS) - 1
        for r in res.records:
            out.append((to_tree(r["proposed"]), pi))
    return out


def test_file_trees():
    """The sources in tests/test_simplify.py's string literals that read as programs."""
    from ndvm.cosearch.sexpr import to_tree
    text = (Path(__file__).parent / "test_simplify.py").read_text()
    out = []
    for s in re.findall(r'"(\([^"]*\))"', text):
        try:
            t = to_tree(s)
        except Exception:  # noqa: BLE001 - a fragment, not a program
            continue
        out += [(t, 1), (t, 0), (t, 2)]
    return out


def edge_trees():
    nan, inf = float("nan"), float("inf")
    def deep(n):
        t = "x"
        for i in range(n):
            t = ["sin", t] if i % 2 else ["+", t, "a"]
        return t
    trees = [
        ["+", nan, "x"], ["*", inf, "x"], ["-", "x", -inf], ["exp", nan], ["+", "a", nan],
        ["*", 1e308, 1e308, "x"], ["+", 1e308, 1e308, "x"], ["exp", 1000.0], ["log", 0],
        ["/", "x", 0], ["/", "x", 0.0], ["/", 0, 0], ["sqrt", -1], ["pow", 0, -1],
        ["pow", "x", 1e300], ["pow", "x", 2 ** 52], ["*", 2 ** 52, 2 ** 52, "x"],
        ["+", -0.0, "x"], ["*", -0.0, "x"], ["pow", "x", -0.0], ["-", 0, "x"], ["-", 0.0, "x"],
        ["*", True, "x"], ["+", False, "x"], ["if", True, "x", "a"], ["sin", True],
        [], ["sin", []], ["exp", []], ["+", [], "x"], ["-", "x", []], [["f"], "x"],
        ["+", [["f"], "x"], 1], ["let", [["u"]], "u"], ["let", ["u"], "u"], ["let", [], "x"],
        ["let", [["u", 1.0]], ["*", "u", "x"]], ["let*", [["u", "a"], ["v", "u"]], ["+", "v", "x"]],
        ["loop", [["s", 1.0], ["k", 0]], ["if", ["=", "k", 3], "s", ["recur", ["*", "s", 2], ["+", "k", 1]]]],
        ["loop", [], "x"], ["loop", [["s"]], "x"], ["let", [["u", "x"]], ["let", [["v", "u"]], ["*", "v", "v"]]],
        ["sin", 1, 2], ["pow", 2], ["abs", -3], ["square", 3], ["square", 2 ** 40],
        ["+", 1, 2], ["-", 5], ["/", 4], ["*"], ["+"], ["-", "x"], ["/", "x"], ["min", 1, 2],
        ["floor", ["+", "a", 1]], ["+", 0.1, 0.2, "x"], ["*", 3, 0.1, "x"], ["/", 1, 3],
        deep(30), ["*", "a", deep(31)], deep(60),
    ]
    return [(t, pi) for t in trees for pi in (0, 2)]


def _result(call):
    try:
        return ["ok"] + list(call())
    except Exception as e:  # noqa: BLE001 - recorded as it is
        return ["err", type(e).__name__, str(e)]


def record(tree, params):
    from ndvm.cosearch.simplify import Simplifier
    from ndvm.cosearch.sexpr import skeleton

    def canon():
        t, src, n = Simplifier(params).canonical_form(tree)
        return t, src, n, skeleton(t, params)
    return [tree, _result(canon), _result(lambda: [Simplifier(params).simplify(tree)])]


def main(out, n_random=4000, n_search=3000):
    inputs = test_file_trees() + edge_trees() + random_trees(n_random) + search_trees(n_search)
    seen, lines = set(), []
    for tree, pi in inputs:
        key = json.dumps([tree, pi])
        if key in seen:
            continue
        seen.add(key)
        t, c, s = record(tree, PARAMS[pi])
        lines.append(json.dumps([t, pi, c, s], separators=(",", ":")))
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write(json.dumps([list(p) for p in PARAMS]) + "\n")
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} inputs written to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_suffix(".jsonl.gz")))
