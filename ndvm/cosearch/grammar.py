"""A grammar of scalar model programs and the genetic operators over their trees.

Trees are grown from unary and binary primitives, inputs, parameters and small constants, with
``let`` and ``loop``/``recur`` (a counted iteration ``s <- f(s, x)``). Loop counters and their tests
are control: no operator ever rewrites them, so a grown or mutated loop always terminates.
"""
import itertools
from dataclasses import dataclass, field

from ndvm._core._core import (BREED_KINDS, Sites, breed_choice, breed_get_at,
                              breed_kind_weights, breed_positions, breed_refs, breed_replace_at,
                              breeder)
from ndvm.fit import did_you_mean

__all__ = ["Grammar", "Sites", "breeder", "choice", "positions", "get_at", "replace_at", "grow",
           "mutate", "crossover", "shifted", "simplify", "small_programs", "polynomials",
           "separable_shapes"]


# The core's numeric primitives (ndvm._core.primitives()) that the default grammar does not propose
# (tests/test_primitives.py checks that Grammar's unary and binary defaults and this set cover the
# core's list); a Grammar may still be given any of them.
NOT_PROPOSED = frozenset({
    "abs", "tan", "atan", "min", "max",       # not in the default set
    "expt",                                   # pow's alias
    "floor", "ceiling", "round", "truncate",  # piecewise constant: a zero gradient
    "modulo", "remainder",
    "=", "<", ">", "<=", ">=",                # booleans: the grammar grows numbers
})


@dataclass
class Grammar:
    """Allowed primitives and terminals; how trees are grown."""

    inputs: tuple = ("x",)
    params: tuple = ("a", "b", "c", "d")
    unary: tuple = ("sin", "cos", "exp", "log", "sqrt", "tanh", "square")
    binary: tuple = ("+", "-", "*", "/", "pow")
    constants: tuple = (0.5, 1.0, 2.0, 3.0)
    let: bool = True
    loop: bool = True
    loop_steps: tuple = (8, 12)
    max_depth: int = 4
    max_size: int = 40
    mutation_rates: dict = field(default_factory=lambda: {
        "subtree": 0.4, "constant": 0.2, "operator": 0.2, "hoist": 0.08, "extend": 0.12,
        "shift": 0.1})

    def check(self):
        """Raise ValueError for a grammar no program can be grown from: operators that are not
        the core's numeric primitives of that arity (``unary`` takes one argument, ``binary``
        two; a name given as a string instead of a list of names), no operator of a kind, no
        terminal, a non-positive size or depth; returns the grammar."""
        prims = _numeric_primitives()
        for kind, arity in (("unary", 1), ("binary", 2)):
            ops = getattr(self, kind)
            if isinstance(ops, str) or not all(isinstance(o, str) for o in ops):
                raise ValueError(f"{kind} must be a list of primitive names such as "
                                 f"{list(getattr(Grammar, kind)[:2])}, got {ops!r}")
            if not ops:
                raise ValueError(f"{kind} is empty: the grammar grows programs from at least one "
                                 f"{kind} operator")
            for o in ops:
                lo, hi = prims.get(o, (None, None))
                if lo is None or lo > arity or (hi is not None and hi < arity):
                    fits = sorted(n for n, (a, b) in prims.items()
                                  if a <= arity and (b is None or b >= arity))
                    hint = did_you_mean(o, fits)
                    raise ValueError(f"{kind} operator {o!r} is not a numeric primitive taking "
                                     f"{arity} argument{'s' * (arity > 1)}{hint}; those are: "
                                     f"{' '.join(fits)}")
        for kind in ("inputs", "params"):
            names = getattr(self, kind)
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ValueError(f"{kind} must be a list of names, got {names!r}")
        if not self.params:
            raise ValueError("params is empty: the grammar needs at least one parameter name")
        for kind in ("max_size", "max_depth"):
            v = getattr(self, kind)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{kind} must be a whole number >= 1, got {v!r}")
        rates = self.mutation_rates
        try:  # (a weight for each kind, by the rule the operators draw the kind with)
            if not isinstance(rates, dict) or set(rates) != set(BREED_KINDS):
                raise ValueError("no weight for each kind")
            breed_kind_weights(rates)
        except ValueError:
            raise ValueError(f"mutation_rates must give each of {', '.join(BREED_KINDS)} a "
                             f"weight, finite and >= 0, not all 0; got {rates!r}") from None
        return self

    def describe(self):
        """The grammar as text, for prompts and help."""
        forms = ["(OP E E) for OP in " + " ".join(self.binary),
                 "(F E) for F in " + " ".join(self.unary)]
        if self.let:
            forms.append("(let ((u E)) E)")
        if self.loop:
            lo, hi = self.loop_steps
            forms.append(f"(loop ((s E) (k 0)) (if (= k N) s (recur E (+ k 1)))) with N in "
                         f"{lo}..{hi}, s usable in the recur expression")
        terms = (f"inputs {' '.join(self.inputs)}; parameters {' '.join(self.params)}; "
                 "numeric literals")
        return "E := " + " | ".join(forms) + " | " + terms


def _numeric_primitives():
    """name -> (least, most arguments; None: any) of the core's numeric primitives (every
    family but the structural "data" one, as tests/test_primitives.py counts them)."""
    from ndvm._core._core import primitives
    return {p["name"]: p["arity"] for p in primitives() if p["family"] != "data"}


def _refs(tree, names):
    """Whether ``tree`` mentions one of ``names`` (a set of symbols)."""
    return breed_refs(tree, names)


# The genetic operators are the core's (ndvm/_core/breed.pxi: Breeder, one per grammar); these
# are their Python names. Each takes the search's rng (an ndvm Draws, or a numpy Generator read
# through one) and draws from it as the Python operators did (tests/breed_golden.py has them and
# the children they made; tests/test_breed.py checks the core makes every one again).

def positions(tree, scope=frozenset(), counters=frozenset(), path=()):
    """[(path, scope, in_loop), ...] for every expression position a genetic operator may
    rewrite, depth first.

    scope: the local variable names bound there. A position that mentions a loop counter is not
    rewritten; children of a node that has a counter as a direct argument are not visited.
    """
    return breed_positions(tree, scope, counters, path)


def get_at(tree, path):
    """The subtree at ``path``."""
    return breed_get_at(tree, path)


def replace_at(tree, path, new):
    """A copy of ``tree`` with the subtree at ``path`` replaced by ``new`` (the lists off the
    path shared with ``tree``)."""
    return breed_replace_at(tree, path, new)


def grow(rng, g, depth=None, scope=frozenset(), in_loop=False):
    """A random expression of at most ``depth`` levels over the grammar: a leaf (a parameter
    half the time, else an input or local, or a constant), a loop, a let, a unary or a binary
    call."""
    return breeder(g).grow(rng, depth, scope, in_loop)


def choice(rng, items, p):
    """``rng.choice(items, p=p)`` for one draw, at a fraction of its cost: numpy draws one
    uniform and takes the first entry of the normalized cumulative ``p`` above it, and so does
    this (the same draw, the same stream; tests/test_search.py checks it against numpy's)."""
    return breed_choice(rng, items, p)


def mutate(rng, g, tree, sites=None):
    """One random mutation (``g.mutation_rates``): a new subtree, a constant changed or turned
    into a parameter, an operator swapped, a hoist, an extension (a new term, or a unary function
    of one of the tree's own parts, perhaps with its inputs shifted; added, multiplied or divided
    in) or a shift (an input, or every input of one part, replaced by a parameterized shift,
    scale or square, or a ratio or product of inputs: ``shifted``).
    ``sites``: the tree's Sites, when the caller keeps them."""
    return breeder(g).mutate(rng, tree, sites)


def shifted(rng, g, x):
    """A parameterized change of the input ``x``: (+ p x), (* p x) or (square (+ p x)), or
    (with more than one input) its ratio to or product with another input, (/ x y) or (* x y)
    (p a parameter: the simplifier gives each occurrence its own). Features such as
    exp(-(x-1)^2), sin((x-1)(y-1)) or exp(-(x/y)^2) are one or two steps from the plain input."""
    return breeder(g).shifted(rng, x)


def _shift_inputs(t, g):
    """``t`` with every input x in it written (+ p x) (its own parameter each, once the
    simplifier names them)."""
    return breeder(g).shift_inputs(t)


def crossover(rng, g, a, b, sites_a=None, sites_b=None):
    """Insert a random subexpression of ``b`` at a random position of ``a`` where it is in scope
    (8 tries, each within ``g.max_size``; else a mutation of ``a``).
    ``sites_a``, ``sites_b``: the trees' Sites, when the caller keeps them."""
    return breeder(g).crossover(rng, a, b, sites_a, sites_b)


# The enumerations a search tries before it evolves anything grow with the inputs: the small
# models as d^2, the shape library as d^3 (33,156 shapes on 9 inputs, 1.3 million on 30, ten on 60
# filled 3 GB before the first candidate). Each is cut at its first so many, in its own order
# (smallest first): all of them up to 20 inputs (the small models) and 10 (the library).
SMALL_MAX = 20_000
LIBRARY_MAX = 50_000


def small_programs(g, limit=SMALL_MAX):
    """Every small model over the grammar's inputs, smallest first, for a search to try before it
    evolves anything: x, u(x), x op y, c op x, a + b u(c x), a u(x) v(y) and a u(b x) v(c x)
    for unary u, v and inputs x, y; the first ``limit`` of them (a list)."""
    return [t[0] if len(t) == 1 else t for t in itertools.islice(_small_programs(g), limit)]


def _small_programs(g):
    p = g.params[0]
    xs = list(g.inputs)
    yield [p]
    yield from ([x] for x in xs)
    yield from ([u, x] for x in xs for u in g.unary)
    yield from ([b, x, y] for b in g.binary for x in xs for y in xs if x != y or b != "-")
    yield from ([b, p, x] for b in g.binary for x in xs)
    yield from ([b, x, p] for b in ("-", "/", "pow") if b in g.binary for x in xs)
    if len(g.params) >= 3:
        a, b, c = g.params[:3]
        yield from (["+", a, ["*", b, [u, ["*", c, x]]]] for x in xs for u in g.unary)
    yield from (["*", p, [u, x], [v, y]] for x in xs for y in xs if x < y
                for u in g.unary for v in g.unary)
    if len(g.params) >= 3:  # products of two scaled features of one input: exp(-ax) cos(bx)
        a, b, c = g.params[:3]
        yield from (["*", a, [u, ["*", b, x]], [v, ["*", c, x]]] for x in xs
                    for i, u in enumerate(g.unary) for v in g.unary[i + 1:])
    if "+" in g.binary and "*" in g.binary and len(xs) <= POLYNOMIAL_INPUTS:
        yield from polynomials(xs, g.params)


def _features(g):
    """The inputs and, between two inputs, their ratios and product (the arguments the shape
    library applies its response shapes to), one at a time."""
    xs = list(g.inputs)
    yield from xs
    if "/" in g.binary:
        yield from (["/", x, y] for x in xs for y in xs if x != y)
    if "*" in g.binary and len(xs) <= 2:
        yield from (["*", x, y] for i, x in enumerate(xs) for y in xs[i + 1:])


def _shapes(g, f, p):
    """Common one-argument response shapes of the feature ``f``, with fitted parameters drawn
    from ``p`` (a list, consumed): a bump exp(b f^2) (centered at 0 or shifted), a rational bump
    1/(b + (f + c)^2) and a power law f^b."""
    out = []
    if "exp" in g.unary and "square" in g.unary:
        out.append(["exp", ["*", p[0], ["square", f]]])
        out.append(["exp", ["*", p[0], ["square", ["+", p[1], f]]]])
    if "/" in g.binary and "square" in g.unary:
        out.append(["/", 1.0, ["+", p[0], ["square", ["+", p[1], f]]]])
    if "pow" in g.binary:
        out.append(["pow", f, p[0]])
    return out


def separable_shapes(g, limit=LIBRARY_MAX):
    """Products of response shapes (_shapes) of one or two features (_features): a S(f), a S(f) h
    and a S(f) / h for another feature h, and a S(f) T(h); the shape library a search tries
    after the small models (proposers.Mutate keeps them out of its parents: they are flexible
    enough to fit a small sample with the wrong structure, and their mutants would crowd the
    population). Many published formulas are such products (a normal density in a ratio, a
    Gaussian bump over a rational one). The first ``limit`` of them (a list)."""
    return list(itertools.islice(_separable_shapes(g), limit))


def _separable_shapes(g):
    if len(g.params) < 5 or "*" not in g.binary:
        return
    a, b, c, d, e5 = g.params[:5]
    for f in _features(g):
        yield from (["*", a, s] for s in _shapes(g, f, [b, c]))
    for f in _features(g):
        of_f = _shapes(g, f, [b, c])
        for h in _features(g):
            if h == f or (isinstance(h, list) and isinstance(f, list)):
                continue
            for s in of_f:
                yield ["*", a, s, h]
                if "/" in g.binary:
                    yield ["/", ["*", a, s], h]
                yield from (["*", a, s, t] for t in _shapes(g, h, [d, e5]))


POLYNOMIAL_INPUTS = 3  # polynomial bases are proposed for problems with at most this many inputs


def _horner(x, coefs):
    """coefs[0] + x (coefs[1] + x (coefs[2] + ...)) as a tree."""
    t = coefs[-1]
    for c in reversed(coefs[:-1]):
        t = ["+", c, ["*", x, t]]
    return t


def polynomials(xs, params):
    """Polynomial models as far as the parameters go, fewest parameters first: in each input
    (degree 2 and up, with and without an intercept, in Horner form) and, for each pair of
    inputs, a sum of one polynomial in each (degrees 1 and up, with and without one shared
    intercept). Linear in
    their parameters, so a least-squares calibration fits them exactly; selection keeps the
    lowest degree that explains the data."""
    P = len(params)
    out = []
    for x in xs:
        out += [(d + 1, _horner(x, list(params[:d + 1]))) for d in range(2, P)]
        out += [(d, ["*", x, _horner(x, list(params[:d]))]) for d in range(2, P + 1)]
    for i, x in enumerate(xs):
        for y in xs[i + 1:]:
            for dx in range(1, P):
                for dy in range(1, P + 1 - dx):
                    ps = list(params[:dx + dy])
                    pair = [["*", x, _horner(x, ps[:dx])], ["*", y, _horner(y, ps[dx:])]]
                    out.append((dx + dy, ["+"] + pair))
                    if dx + dy < P:  # room for an intercept too
                        ps = list(params[1:dx + dy + 1])
                        out.append((dx + dy + 1, ["+", params[0],
                                                  ["*", x, _horner(x, ps[:dx])],
                                                  ["*", y, _horner(y, ps[dx:])]]))
    return [t for _, t in sorted(out, key=lambda pt: pt[0])]


def simplify(tree):
    """Drop ``let`` bindings whose variable the body never uses (bloat from mutation)."""
    if not isinstance(tree, list):
        return tree
    tree = [simplify(t) for t in tree]
    if (len(tree) == 3 and tree[0] == "let" and isinstance(tree[1], list)
            and all(isinstance(b, list) and len(b) == 2 for b in tree[1])):
        kept = [b for b in tree[1] if _refs(tree[2], {b[0]})]
        if not kept:
            return tree[2]
        if len(kept) < len(tree[1]):
            return ["let", kept, tree[2]]
    return tree
