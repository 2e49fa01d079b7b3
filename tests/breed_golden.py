"""The golden file of the genetic operators: children the Python operators made from seeded streams.

    python tests/breed_golden.py [OUT]   (default tests/breed_golden.jsonl.gz)

Written once from the Python operators of ndvm/cosearch/grammar.py (grow, mutate, crossover,
shifted, positions, Sites and their helpers, copied below as they were), before they moved into
the core, and checked by tests/test_breed.py: the core's operators make every child again from
the same stream. Written again after one amendment, made to both: an operator mutation picks
only operators that take the call's arguments (``_takes``; it had given (+ a b c) a ``pow``). ``records(ops)`` is the sequence of calls, drawn the way Mutate.propose draws
them (a share grown afresh, crossovers of two parents, mutations of parents with ``let``,
``let*``, ``loop``/``recur``, ``if``, literals and n-ary calls, given their Sites or not, and
``shifted`` inputs); ``ops`` is this file's copy (PYTHON) or the module ndvm.cosearch.grammar.

Each line is JSON. ["child", grammar, seed, step, op, child, check]: grammar an index into
GRAMMARS, the child as nested lists (floats written by repr: exact), check the bit generator's
position after the call ([low 32 bits of PCG64's state, has_uint32]: a draw more or fewer
shows). ["positions", grammar, tree, [[path, sorted scope, in_loop], ...]] for hand-written
and grown trees.
"""
import gzip
import json
import math
import sys
import types
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

import numpy as np

from ndvm._core._core import Draws
from ndvm.cosearch.sexpr import SPECIAL_FORMS, size, to_tree

SEEDS = (0, 1, 2)
STEPS = 1000  # calls per grammar and seed


def grammars():
    """The grammars the file covers (their index is its "grammar" field)."""
    from ndvm.cosearch.grammar import Grammar
    return [
        Grammar(),
        Grammar(inputs=("x", "y", "z"), params=("a", "b", "c", "d", "e"), let=True, loop=True),
        Grammar(inputs=("x", "y"), let=False, loop=False, unary=("sin", "cos", "exp", "log"),
                binary=("+", "-", "*", "pow"), constants=(1.0, 2.0, 0.1)),
        Grammar(params=("a",)),
        Grammar(inputs=("x0", "x1"), params=("p", "q", "r"), constants=(1, 2, 0.25),
                loop_steps=(3, 5), max_depth=3, max_size=20,
                mutation_rates={"subtree": 2, "constant": 1, "operator": 1, "hoist": 1,
                                "extend": 1, "shift": 2}),
    ]


# Hand-written parents ({x} {y} the first and last inputs, {a} {b} the first two parameters).
TEMPLATES = [
    "{x}", "{a}", "2.5", "3",
    "(+ {a} (* {b} {x}))",
    "(* 2.0 (pow {x} 3))",
    "(- (* -0.5 (exp (square {x}))) 1.5)",
    "(* {a} (sin {x}) (cos {y}))",
    "(+ {a} {b} {x} {y})",
    "(tanh (+ (* {a} {x}) 0.25))",
    "(if (< {x} {a}) (log {x}) (sqrt {y}))",
    "(let ((u0 (sin {x}))) (* {a} u0 u0))",
    "(let* ((u0 (* {a} {x})) (u1 (+ u0 {y}))) (/ u1 (exp u0)))",
    "(let ((u0 {a}) (u1 (let ((u1 {x})) (* u1 u1)))) (+ u0 u1 2))",
    "(loop ((s {x}) (k 0)) (if (= k 10) s (recur (+ s (* {a} (sin s))) (+ k 1))))",
    "(loop ((s 1.0) (k 0)) (if (= k 8) (* {b} s) (recur (* s (cos (- {x} {a}))) (+ k 1))))",
    "(loop ((s (* {a} {x})) (t {y}) (k 0)) (if (= k 5) (+ s t) (recur (* s t) (+ t 0.5) (+ k 1))))",
    "(sin (let ((u0 (* {b} {x}))) (loop ((s u0) (k 0)) (if (= k 9) s (recur (+ s u0) (+ k 1))))))",
    "(/ (* {a} (exp (* -0.5 (square (/ (- {x} {b}) 3))))) (+ 1 {y}))",
]


def hand_trees(g):
    """The templates written in the grammar's names."""
    x, y = g.inputs[0], g.inputs[-1]
    a, b = g.params[0], g.params[min(1, len(g.params) - 1)]
    return [to_tree(t.format(x=x, y=y, a=a, b=b)) for t in TEMPLATES]


def _check(rng):
    st = rng.rng.bit_generator.state
    return [st["state"]["state"] & 0xFFFFFFFF, st["has_uint32"]]


def records(ops):
    """Every record of the file, made with the operators ``ops`` (grow, mutate, crossover,
    shifted, positions and Sites)."""
    gs = grammars()
    for gi, g in enumerate(gs):
        for t in hand_trees(g):
            yield ["positions", gi, t, _positions(ops, t)]
    for gi, g in enumerate(gs):
        for seed in SEEDS:
            rng = Draws(np.random.default_rng(seed))
            hand = [(t, ops.Sites(t)) for t in hand_trees(g)]
            grown = []
            for step in range(STEPS):
                pool = hand + grown
                r = rng.random()
                if r < 0.15:
                    op = "grow"
                    if rng.random() < 0.3:  # as mutate grows: a depth, a scope, in a loop or not
                        scope = frozenset(["s", "u0", "u1"][:int(rng.integers(4))])
                        child = ops.grow(rng, g, int(rng.integers(0, 5)), scope,
                                         rng.random() < 0.5)
                    else:
                        child = ops.grow(rng, g)
                elif r < 0.45:
                    op = "crossover"
                    (a, sa), (b, sb) = (pool[int(rng.integers(len(pool)))] for _ in range(2))
                    if rng.random() < 0.5:
                        child = ops.crossover(rng, g, a, b, sa, sb)
                    else:
                        child = ops.crossover(rng, g, a, b)
                elif r < 0.92:
                    op = "mutate"
                    a, sa = pool[int(rng.integers(len(pool)))]
                    child = ops.mutate(rng, g, a, sa if rng.random() < 0.5 else None)
                else:
                    op = "shifted"
                    names = list(g.inputs) + [g.params[0]]
                    child = ops.shifted(rng, g, names[int(rng.integers(len(names)))])
                yield ["child", gi, seed, step, op, child, _check(rng)]
                if isinstance(child, list) and size(child) <= 2 * g.max_size:
                    grown = (grown + [(child, ops.Sites(child))])[-16:]
                    if step % 97 == 0:
                        yield ["positions", gi, child, _positions(ops, child)]


def _positions(ops, tree):
    return [[list(p), sorted(s), l] for p, s, l in ops.positions(tree)]


def main(out):
    lines = [json.dumps(r, separators=(",", ":")) for r in records(PYTHON)]
    with gzip.open(out, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} records written to {out}")


# ---- The Python operators as they were (ndvm/cosearch/grammar.py), for the golden file only ----

def _refs(tree, names):
    if isinstance(tree, list):
        return any(_refs(t, names) for t in tree)
    return isinstance(tree, str) and tree in names


def positions(tree, scope=frozenset(), counters=frozenset(), path=()):
    """Yield (path, scope, in_loop) for every expression position a genetic operator may rewrite.

    scope: the local variable names bound there. A position that mentions a loop counter is not
    rewritten; children of a node that has a counter as a direct argument are not visited.
    """
    if not counters or not _refs(tree, counters):  # (no counter: nothing to look for)
        yield path, scope, bool(counters)
    if not isinstance(tree, list) or not tree:
        return
    head = tree[0]
    if head in ("let", "let*") and len(tree) >= 3 and isinstance(tree[1], list):
        inner = set(scope)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                yield from positions(b[1], frozenset(inner) if head == "let*" else scope,
                                     counters, path + (1, i, 1))
                inner.add(b[0])
        for j in range(2, len(tree)):
            yield from positions(tree[j], frozenset(inner), counters, path + (j,))
    elif head == "loop" and len(tree) >= 3 and isinstance(tree[1], list):
        state, ctr = set(scope), set(counters)
        for i, b in enumerate(tree[1]):
            if isinstance(b, list) and len(b) == 2:
                if isinstance(b[1], int) and not isinstance(b[1], bool):
                    ctr.add(b[0])
                else:
                    yield from positions(b[1], scope, counters, path + (1, i, 1))
                state.add(b[0])
        state -= ctr
        for j in range(2, len(tree)):
            yield from positions(tree[j], frozenset(state), frozenset(ctr), path + (j,))
    elif head in ("if", "recur"):
        for j in range(1, len(tree)):
            yield from positions(tree[j], scope, counters, path + (j,))
    elif isinstance(head, str) and head not in SPECIAL_FORMS:
        if counters and any(isinstance(t, str) and t in counters for t in tree[1:]):
            return
        for j in range(1, len(tree)):
            yield from positions(tree[j], scope, counters, path + (j,))


def get_at(tree, path):
    """The subtree at ``path``."""
    for i in path:
        tree = tree[i]
    return tree


def replace_at(tree, path, new):
    """A copy of ``tree`` with the subtree at ``path`` replaced by ``new``."""
    if not path:
        return new
    out = list(tree)
    out[path[0]] = replace_at(tree[path[0]], path[1:], new)
    return out


def _constant(rng, g):
    if rng.random() < 0.5:
        return float(g.constants[rng.integers(len(g.constants))])
    return round(float(rng.uniform(-3, 3)), 2)


def _leaf(rng, g, scope):
    r = rng.random()
    if r < 0.5:
        return g.params[rng.integers(len(g.params))]
    if r < 0.88:
        names = list(g.inputs) + sorted(scope)
        return names[rng.integers(len(names))]
    return _constant(rng, g)


def grow(rng, g, depth=None, scope=frozenset(), in_loop=False):
    """A random expression of at most ``depth`` levels over the grammar."""
    depth = g.max_depth if depth is None else depth
    if depth <= 0 or rng.random() < 0.25:
        return _leaf(rng, g, scope)
    r = rng.random()
    if g.loop and not in_loop and depth >= 3 and r < 0.1:
        lo, hi = g.loop_steps
        n = int(rng.integers(lo, hi + 1))
        init = grow(rng, g, depth - 2, scope, True)
        update = grow(rng, g, depth - 1, scope | {"s"}, True)
        if not _refs(update, {"s"}):
            update = ["+", "s", update] if rng.random() < 0.5 else ["*", "s", update]
        return ["loop", [["s", init], ["k", 0]], ["if", ["=", "k", n], "s",
                                                  ["recur", update, ["+", "k", 1]]]]
    if g.let and depth >= 2 and r < 0.17:
        var = f"u{len(scope)}"
        return ["let", [[var, grow(rng, g, depth - 1, scope, in_loop)]],
                grow(rng, g, depth - 1, scope | {var}, in_loop)]
    if r < 0.45:
        return [g.unary[rng.integers(len(g.unary))], grow(rng, g, depth - 1, scope, in_loop)]
    op = g.binary[rng.integers(len(g.binary))]
    return [op, grow(rng, g, depth - 1, scope, in_loop), grow(rng, g, depth - 1, scope, in_loop)]


def _free_locals(tree, locals_):
    """Local-variable names (from ``locals_``) the tree mentions."""
    if isinstance(tree, list):
        out = set()
        for t in tree:
            out |= _free_locals(t, locals_)
        return out
    return {tree} if isinstance(tree, str) and tree in locals_ else set()


def _is_number(a):
    return isinstance(a, (int, float)) and not isinstance(a, bool)


class Sites:
    """A tree's rewrite positions (``positions``) and its literal and operator positions, listed
    once: a parent in the search is mutated many times. The tree must not change afterwards."""

    __slots__ = ("tree", "spots", "_size", "_numbers", "_operators", "_names")

    def __init__(self, tree):
        self.tree = tree
        self.spots = list(positions(tree))
        self._size = None
        self._numbers = None
        self._operators = {}
        self._names = {}

    def size(self):
        """``size(tree)``."""
        if self._size is None:
            self._size = size(self.tree)
        return self._size

    def numbers(self):
        """The positions that hold a numeric literal."""
        if self._numbers is None:
            self._numbers = [p for p in self.spots if _is_number(get_at(self.tree, p[0]))]
        return self._numbers

    def names(self, names):
        """The positions that hold one of ``names`` (a frozenset of atoms)."""
        out = self._names.get(names)
        if out is None:
            out = self._names[names] = [
                p for p in self.spots if isinstance(get_at(self.tree, p[0]), str)
                and get_at(self.tree, p[0]) in names]
        return out

    def operators(self, ops):
        """The positions that hold a call of one of ``ops`` (a frozenset)."""
        out = self._operators.get(ops)
        if out is None:
            out = self._operators[ops] = [
                p for p in self.spots if isinstance(get_at(self.tree, p[0]), list)
                and get_at(self.tree, p[0])[0] in ops]
        return out


_KINDS = ("subtree", "constant", "operator", "hoist", "extend", "shift")


def _takes(op, n):
    """Whether the primitive ``op`` takes ``n`` arguments (the one amendment to the operators as
    they were: an operator mutation gave (+ a b c) and (- x) a pow, a program that cannot run)."""
    if not _ARITY:
        from ndvm._core._core import primitives
        _ARITY.update((p["name"], p["arity"]) for p in primitives())
    least, most = _ARITY[op]
    return least <= n and (most is None or n <= most)


_ARITY = {}  # primitive -> (least, most arguments), read once


_CDFS = {}  # tuple(p) -> its normalized cumulative sums (a search has one set of rates)


def choice(rng, items, p):
    """``rng.choice(items, p=p)`` for one draw, at a fraction of its cost: numpy draws one
    uniform and takes the first entry of the normalized cumulative ``p`` above it, and so does
    this (the same draw, the same stream; tests/test_search.py checks it against numpy's)."""
    key = tuple(p)
    cdf = _CDFS.get(key)
    if cdf is None:
        if len(_CDFS) > 64:
            _CDFS.clear()
        sums = list(accumulate(key))
        cdf = _CDFS[key] = [c / sums[-1] for c in sums]
    return items[bisect_right(cdf, rng.random())]


def mutate(rng, g, tree, sites=None):
    """One random mutation (``g.mutation_rates``): a new subtree, a constant changed or turned
    into a parameter, an operator swapped, a hoist, an extension (a new term, or a unary function
    of one of the tree's own parts, perhaps with its inputs shifted; added, multiplied or divided
    in) or a shift (an input, or every input of one part, replaced by a parameterized shift,
    scale or square, or a ratio or product of inputs: ``shifted``).
    ``sites``: the tree's Sites, when the caller keeps them."""
    sites = Sites(tree) if sites is None else sites
    spots = sites.spots
    kind = choice(rng, _KINDS, [g.mutation_rates[k] for k in _KINDS])
    if kind == "extend":  # add, multiply or divide in a small new term: a term at a time
        if rng.random() < 0.5:  # ... a new one, or a function of one of the model's own parts
            term = grow(rng, g, int(rng.integers(1, 3)))
        else:
            # the whole model half the time (u(f) and u(f shifted) extend f), else one part
            path, scope, _ = spots[0] if rng.random() < 0.5 else spots[rng.integers(len(spots))]
            part = get_at(tree, path)
            if scope:
                part = grow(rng, g, 1)
            elif rng.random() < 0.5:  # the part with its inputs shifted: sin((x-a)(y-b))
                part = _shift_inputs(part, g)
            term = [g.unary[rng.integers(len(g.unary))], part]
        if rng.random() < 0.5:
            term = ["*", g.params[rng.integers(len(g.params))], term]
        r = rng.random()
        op = "+" if r < 0.5 else "*" if r < 0.85 or "/" not in g.binary else "/"
        return [op, tree, term]
    if kind == "shift":  # an input x becomes a fitted shift or scale of it, or its square
        xs = sites.names(frozenset(g.inputs))
        if xs and rng.random() < 0.3:  # every input in one part of the model, shifted
            path = spots[rng.integers(len(spots))][0]
            return replace_at(tree, path, _shift_inputs(get_at(tree, path), g))
        if xs:
            path = xs[rng.integers(len(xs))][0]
            return replace_at(tree, path, shifted(rng, g, get_at(tree, path)))
        kind = "subtree"
    if kind == "constant":
        nums = sites.numbers()
        if nums:
            path = nums[rng.integers(len(nums))][0]
            c = get_at(tree, path)
            r = rng.random()
            if r < 0.3:
                new = g.params[rng.integers(len(g.params))]
            elif r < 0.7:
                new = round(c * float(math.exp(0.4 * rng.standard_normal())), 4)
            else:
                new = round(c + float(rng.normal(0, 0.5)), 4)
            return replace_at(tree, path, float(new) if _is_number(new) else new)
        kind = "subtree"
    if kind == "operator":
        ops = sites.operators(frozenset(g.unary) | frozenset(g.binary))
        if ops:
            path = ops[rng.integers(len(ops))][0]
            node = get_at(tree, path)
            family = g.unary if node[0] in g.unary and len(node) == 2 else g.binary
            choices = [o for o in family if o != node[0] and _takes(o, len(node) - 1)]
            if choices and (len(node) == 2 or node[0] in g.binary):
                return replace_at(tree, path, [choices[rng.integers(len(choices))]] + node[1:])
        kind = "subtree"
    if kind == "hoist":  # replace a node by one of its own subexpressions (simplifies)
        inner = [p for p in spots if len(p[0]) > 0]
        if inner:
            path, scope, _ = inner[rng.integers(len(inner))]
            return replace_at(tree, (), get_at(tree, path)) if not scope else tree
        kind = "subtree"
    path, scope, in_loop = spots[rng.integers(len(spots))]
    d = max(1, g.max_depth - len(path) // 2)
    return replace_at(tree, path, grow(rng, g, int(rng.integers(1, d + 1)), scope, in_loop))


def shifted(rng, g, x):
    """A parameterized change of the input ``x``: (+ p x), (* p x) or (square (+ p x)), or
    (with more than one input) its ratio to or product with another input, (/ x y) or (* x y)
    (p a parameter: the simplifier gives each occurrence its own). Features such as
    exp(-(x-1)^2), sin((x-1)(y-1)) or exp(-(x/y)^2) are one or two steps from the plain input."""
    p = g.params[rng.integers(len(g.params))]
    r = rng.random()
    others = [y for y in g.inputs if y != x]
    if others and r < 0.2:
        y = others[rng.integers(len(others))]
        return ["/" if "/" in g.binary and rng.random() < 0.5 else "*", x, y]
    if r < 0.5:
        return ["+", p, x]
    if r < 0.75 or "square" not in g.unary:
        return ["*", p, x]
    return ["square", ["+", p, x]]


def _shift_inputs(t, g):
    """``t`` with every input x in it written (+ p x) (its own parameter each, once the
    simplifier names them)."""
    if isinstance(t, list):
        return [_shift_inputs(x, g) for x in t]
    return ["+", g.params[0], t] if isinstance(t, str) and t in g.inputs else t


def crossover(rng, g, a, b, sites_a=None, sites_b=None):
    """Insert a random subexpression of ``b`` at a random position of ``a`` where it is in scope.
    ``sites_a``, ``sites_b``: the trees' Sites, when the caller keeps them."""
    sites_a = Sites(a) if sites_a is None else sites_a
    donors = (Sites(b) if sites_b is None else sites_b).spots
    spots = sites_a.spots
    for _ in range(8):
        path, scope, in_loop = spots[rng.integers(len(spots))]
        dpath, dscope, dloop = donors[rng.integers(len(donors))]
        piece = get_at(b, dpath)
        if ((not dscope or _free_locals(piece, dscope) <= scope)  # (no locals: none free)
                and not (in_loop and _refs(piece, {"loop"}))):
            # (the child's size: the parent's with one subtree traded for the piece)
            if sites_a.size() - size(get_at(a, path)) + size(piece) <= g.max_size:
                return replace_at(a, path, piece)
    return mutate(rng, g, a, sites_a)


PYTHON = types.SimpleNamespace(grow=grow, mutate=mutate, crossover=crossover, shifted=shifted,
                               positions=positions, Sites=Sites)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_suffix(".jsonl.gz")))
