"""Simplification and canonical form of candidate trees, applied before any calibration.

``canonicalize`` folds constants, collapses every parameter-only subtree into one parameter,
turns numeric literals into fitted parameters, removes identities (x-x, x/x, x*1, x+0, nested
negations and inverses, log(exp u)), flattens and orders + and *, keeps one free scale per
product and one constant per sum (wherever it sits: a ratio, a scaled sum, a difference, a
function it can stand outside of, exp(c + u) = c' exp(u)), and names parameters by order of
occurrence (one parameter per occurrence when the task has names enough), so two proposals that
are the same model up to reparametrization print the same and are calibrated once. No rewrite
makes a tree larger. Special forms (let, loop) keep their structure; loop counters and their
literals are never touched.
"""
import math

from ndvm.cosearch.sexpr import SPECIAL_FORMS, _atom, skeleton_atom, to_source

__all__ = ["simplify", "canonicalize", "Simplifier", "is_param_only", "TooManyParameters",
           "PARAM_MARK"]

class TooManyParameters(ValueError):
    """The simplified model has more distinct constants than the task has parameter names."""


_FOLD = {
    "sin": math.sin, "cos": math.cos, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "tanh": math.tanh, "tan": math.tan, "atan": math.atan, "abs": abs,
    "square": lambda a: a * a,
    "pow": math.pow, "expt": math.pow,
}
_ARITH = frozenset("+ - * /".split()) | frozenset(_FOLD)
# The core's numeric primitives (ndvm._core.primitives()) that are not in _ARITH: a subtree under
# one of them is never folded nor collapsed into a parameter (tests/test_primitives.py checks that
# the two sets cover the core's list).
UNFOLDED = frozenset({
    "floor", "ceiling", "round", "truncate", "modulo", "remainder",  # piecewise constant: one
    # fitted parameter in place of (floor a) would be another model (a real, not an integer)
    "min", "max",                 # kept as written
    "=", "<", ">", "<=", ">=",    # booleans, not numbers
})
_PARAM = "?"  # a parameter to be named by canonicalize (an atom no program can contain)
PARAM_MARK = _PARAM


def _num(a):
    t = type(a)
    if t is float or t is int:
        return True
    if t is str or t is list or t is bool:  # (the common non-numbers, decided at once)
        return False
    return isinstance(a, (int, float))


def is_param_only(tree, params):
    """True when the tree has no input or local variable: it is one number once fitted."""
    if isinstance(tree, list):
        return (bool(tree) and isinstance(tree[0], str) and tree[0] in _ARITH
                and all(is_param_only(t, params) for t in tree[1:]))
    return _num(tree) or tree == _PARAM or (isinstance(tree, str) and tree in params)


def _pl(a, P):
    """A simplified argument that is one fitted number (simplification collapses every
    parameter-only subtree into an atom, so this looks at atoms only)."""
    return _num(a) or a == _PARAM or (isinstance(a, str) and a in P)


def _fitted(a, P):
    """A simplified argument that is one fitted number with a parameter in it (not a literal)."""
    return _pl(a, P) and _has_param(a, P)


def _has_param(tree, params):
    if isinstance(tree, list):
        return any(_has_param(t, params) for t in tree)
    return tree == _PARAM or (isinstance(tree, str) and tree in params)


def _fold(head, args):
    """The value of ``(head args...)`` over numbers, or None when it is not a finite number."""
    try:
        if head == "+":
            v = math.fsum(args)
        elif head == "*":
            v = math.prod(args)
        elif head == "-":
            v = -args[0] if len(args) == 1 else args[0] - math.fsum(args[1:])
        elif head == "/":
            v = 1.0 / args[0] if len(args) == 1 else args[0] / math.prod(args[1:])
        elif head in _FOLD and len(args) in (1, 2):
            v = _FOLD[head](*args)
        else:
            return None
    except (ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class _Facts:
    """What is known of one subtree content: its simplified and lifted forms, source text, sort
    key and parameter count (None until first asked)."""

    __slots__ = ("simp", "lift", "src", "key", "occ", "size", "named", "marks", "skel", "pull")

    def __init__(self):
        self.simp = self.lift = self.src = self.key = self.occ = self.size = None
        self.named = self.marks = self.skel = self.pull = None


def _atom_key(a):
    """An atom as a dictionary key that tells apart what prints differently (1, 1.0, -0.0)."""
    return a if type(a) is str else (type(a), repr(a))


class Simplifier:
    """``simplify`` and ``canonicalize`` for one set of parameter names, memoized per subtree.

    Every rule is a pure function of a subtree's content, so its result is kept in that
    content's _Facts. Subtrees are hash-consed: a list gets its Facts from the Facts of its
    items, found once per list object (the memo holds the object, so its identity is never
    reused while the entry lives). A genetic operator's child shares every subtree off one
    path with its parent, and small subexpressions recur across the whole search, so a child
    costs about the nodes whose content is new. Trees handed to a long-lived Simplifier must
    never be changed in place (the search's trees never are: every operator copies). The
    module's functions use a fresh one per call.
    """

    LIMIT = 200_000  # objects or contents remembered before it starts over (bounds memory)

    def __init__(self, params):
        self.names = list(params)
        self.P = frozenset(params)
        self._objects = {}  # id(list) -> (list, Facts of its content)
        self._contents = {}  # (item Facts or atom keys, ...) -> Facts

    def _fresh(self):
        if len(self._objects) > self.LIMIT or len(self._contents) > self.LIMIT:
            self._objects.clear()
            self._contents.clear()

    def facts(self, t):
        """The _Facts of list ``t``'s content."""
        hit = self._objects.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        key = tuple([self.facts(x) if type(x) is list else _atom_key(x) for x in t])
        f = self._contents.get(key)
        if f is None:
            f = self._contents[key] = _Facts()
        self._objects[id(t)] = (t, f)
        return f

    # -- per-subtree facts --------------------------------------------------------------------

    def source(self, t):
        """``sexpr.to_source(t)``, memoized per subtree content."""
        if type(t) is not list:
            return _atom(t)
        f = self.facts(t)
        if f.src is None:
            f.src = "(" + " ".join([self.source(x) for x in t]) + ")"
        return f.src

    def size(self, t):
        """``sexpr.size(t)``: the number of atoms, memoized per subtree content."""
        if type(t) is not list:
            return 1
        f = self.facts(t)
        if f.size is None:
            f.size = sum([self.size(x) for x in t])
        return f.size

    def skeleton(self, t):
        """``sexpr.skeleton(t, params)``: parameters written P and numbers C, memoized per
        subtree content."""
        if type(t) is not list:
            return skeleton_atom(t, self.P)
        f = self.facts(t)
        if f.skel is None:
            f.skel = "(" + " ".join([self.skeleton(x) for x in t]) + ")"
        return f.skel

    def key(self, t):
        """Ordering of + and * arguments: variables before parameters, by parameter-free shape."""
        if type(t) is not list:
            return "C" if _num(t) or t == _PARAM or t in self.P else t
        f = self.facts(t)
        if f.key is None:
            f.key = "(" + " ".join([self.key(x) for x in t]) + ")"
        return f.key

    def occurrences(self, t):
        """How many parameters (named or still to be named) the tree mentions."""
        if type(t) is not list:
            return int(t == _PARAM or (isinstance(t, str) and t in self.P))
        f = self.facts(t)
        if f.occ is None:
            f.occ = sum([self.occurrences(x) for x in t])
        return f.occ

    def named(self, t):
        """The parameter names the tree mentions (a frozenset)."""
        if type(t) is not list:
            return frozenset((t,)) if isinstance(t, str) and t in self.P else frozenset()
        f = self.facts(t)
        if f.named is None:
            f.named = frozenset().union(*[self.named(x) for x in t])
        return f.named

    def marks(self, t):
        """How many parameters still to be named (PARAM_MARK atoms) the tree holds."""
        if type(t) is not list:
            return int(t == _PARAM)
        f = self.facts(t)
        if f.marks is None:
            f.marks = sum([self.marks(x) for x in t])
        return f.marks

    # -- simplification -----------------------------------------------------------------------

    def simplify(self, tree):
        """An equivalent (up to fitted constants) and never larger tree."""
        self._fresh()
        return self.simp(tree)

    def simp(self, t):
        if type(t) is not list or not t:
            return t
        f = self.facts(t)
        if f.simp is None:
            f.simp = self._simp_node(t)
        return f.simp

    def _simp_node(self, t):
        P = self.P
        head = t[0]
        if head in ("let", "let*") and len(t) >= 3 and isinstance(t[1], list):
            binds = [[b[0], self.simp(b[1])] if isinstance(b, list) and len(b) == 2 else b
                     for b in t[1]]
            body = [self.simp(x) for x in t[2:]]
            used = [b for b in binds if not (isinstance(b, list) and len(b) == 2)
                    or any(_mentions(x, b[0]) for x in body)
                    or any(_mentions(c[1], b[0]) for c in binds if c is not b and head == "let*")]
            if not used and len(body) == 1:
                return body[0]
            consts = [b for b in used if head == "let" and isinstance(b, list) and len(b) == 2
                      and _pl(b[1], P)]
            if consts and len(body) == 1:  # a binding to one fitted number is that number
                out = body[0]
                for b in consts:
                    out = _substitute(out, b[0], b[1])
                rest = [b for b in used if not any(b is c for c in consts)]
                return self.simp([head, rest, out] if rest else out)
            if (head == "let" and len(used) == 1 and len(body) == 1
                    and _uses(body[0], used[0][0]) == 1):  # a single use: inline
                return self.simp(_substitute(body[0], used[0][0], used[0][1]))
            return [head, used] + body
        if head == "loop" and len(t) >= 3 and isinstance(t[1], list):
            binds = [[b[0], b[1] if _num(b[1]) else self.simp(b[1])] if isinstance(b, list)
                     and len(b) == 2 else b for b in t[1]]
            return [head, binds] + [self._loop_body(x, self.simp) for x in t[2:]]
        if not isinstance(head, str) or head not in _ARITH:
            return t  # comparisons, data operations, other special forms: kept as written
        return self._apply(head, [self.simp(a) for a in t[1:]])

    def _apply(self, head, args):
        """The simplified form of ``(head args...)``, its arguments already simplified."""
        P = self.P
        if all(_num(a) for a in args):
            v = _fold(head, args)
            if v is not None:
                return v
        node = [head] + args
        if all(_pl(a, P) for a in args) and _has_param(node, P):
            return _PARAM  # a parameter-only subtree is one fitted number
        if head in ("+", "*"):
            out = self._assoc(head, args)
        elif head == "-":
            out = self._minus(args)
        elif head == "/":
            out = self._divide(args)
        elif (len(args) == 1 and isinstance(args[0], list) and len(args[0]) == 2 and
              (head, args[0][0]) in (("log", "exp"), ("exp", "log"), ("square", "sqrt"))):
            return args[0][1]
        else:
            out = self._outer_constant(head, args) or node
        # never larger: a rewrite that would grow the tree (-(x) - y for (c - x) - y, say)
        # leaves the node as it is
        return out if out is node or self.size(out) <= self.size(node) else node

    def _outer_constant(self, head, args):
        """A fitted constant inside a function that can stand outside it, where the groups
        around it fold it into theirs: exp(c + u) = c' exp(u), exp(c - u) = c' / exp(u),
        log(c u) = c' + log(u), square(c u) = c' square(u), sqrt(c u) = c' sqrt(u),
        pow(c u, k) = c' pow(u, k) (and c' / f(w) for a scaled 1/w), pow(c, b u) =
        pow(c', u), pow(c, d + u) = c' pow(c, u), pow(exp(u), k) = exp(k u), pow(pow(u, c), k)
        = pow(u, c k), pow(pow(c, u), k) = pow(c, u k), sqrt or square of pow(u, c) =
        pow(u, c'), log(pow(u, c)) = c' log(u), log(1/u) = -log(u): each a model with no less
        freedom and never larger; None when none applies."""
        P = self.P
        u = args[0]
        if head == "exp" and len(args) == 1:
            if _fitted_difference(u, P):
                return self._divide([_PARAM, self._apply("exp", [u[2]])])
            c, rest = self._split_sum(u)
            if c is not None:
                return self._apply("*", [_PARAM, self._apply("exp", [rest])])
            return None
        if head == "log" and len(args) == 1:
            if isinstance(u, list) and u[0] in ("pow", "expt") and _fitted(u[2], P):
                return self._apply("*", [_PARAM, self._apply("log", [u[1]])])  # log(w^c)
            if isinstance(u, list) and u[0] in ("pow", "expt") and _fitted(u[1], P):
                return self._apply("*", [_PARAM, u[2]])  # log(c^w) = c' w
            if isinstance(u, list) and u[0] == "/" and _num(u[1]) and u[1] == 1:
                return self._minus([self._apply("log", [u[2]])])  # log(1/w) = -log(w)
            if self._slotted(u) and not _fitted(u, P):
                rest = self._unscaled(u)
                if _reciprocal(rest):
                    return self._minus([_PARAM, self._apply("log", [rest[2]])])
                return self._apply("+", [_PARAM, self._apply("log", [rest])])
            return None
        if head in ("square", "sqrt") and len(args) == 1:
            if isinstance(u, list) and u[0] in ("pow", "expt") and _fitted(u[2], P):
                return [u[0], u[1], _PARAM]
            extra = []
        elif head in ("pow", "expt") and len(args) == 2:
            k = args[1]
            if _fitted(u, P):
                c, rest = self._split_sum(k)  # c^(d + w) = c^d c^w
                if c is not None:
                    return self._apply("*", [_PARAM, self._apply(head, [u, rest])])
                if self._slotted(k) and not _fitted(k, P):  # c^(b w) = (c^b)^w
                    return [head, u, self._unscaled(k)]
                return None
            if isinstance(u, list) and u[0] == "exp":  # exp(w)^k = exp(k w)
                return self._apply("exp", [self._apply("*", [k, u[1]])])
            if isinstance(u, list) and u[0] in ("pow", "expt") and (
                    self._slotted(u[2]) or _fitted(u[1], P)):  # (w^(c v))^k, (c^w)^k
                return self._apply(head, [u[1], self._apply("*", [u[2], k])])
            if not _pl(k, P):
                return None
            extra = [k]
        else:
            return None
        if self._slotted(u) and not _fitted(u, P):  # f(c w) = c' f(w), f(c / w) = c' / f(w)
            rest = self._unscaled(u)
            if _reciprocal(rest):
                return self._divide([_PARAM, self._apply(head, [rest[2]] + extra)])
            return self._apply("*", [_PARAM, self._apply(head, [rest] + extra)])
        return None

    def _terms(self, t):
        """The terms of a sum or difference, flattened: (- (+ u v) w) -> u, v, (- w)."""
        if isinstance(t, list) and t and t[0] == "+":
            return [x for u in t[1:] for x in self._terms(u)]
        if isinstance(t, list) and len(t) == 3 and t[0] == "-":
            return self._terms(t[1]) + self._terms(self._minus([t[2]]))
        return [t]

    def _pulled(self, t):
        """(group, rest) when function call ``t`` has a fitted constant that can stand outside
        it (``_outer_constant``): group "*" when t is c' rest, "+" when t is c' + rest; else
        (None, None). The groups around t fold the constant into theirs even where writing it
        outside on its own would make the tree larger."""
        if not (isinstance(t, list) and t and t[0] in _FOLD):
            return None, None
        f = self.facts(t)
        if f.pull is None:
            f.pull = (None, None)
            out = self._outer_constant(t[0], t[1:])
            if isinstance(out, list) and out[0] in ("*", "/", "+", "-") and len(out) == 3 \
                    and _fitted(out[1], self.P):
                if out[0] == "/":
                    f.pull = ("*", self._divide([1.0, out[2]]))
                elif out[0] == "-":
                    f.pull = ("+", self._minus([out[2]]))
                else:
                    f.pull = (out[0], out[2])
        return f.pull

    def _split(self, t, head):
        """(c, rest) when ``t`` is a ``head`` group (a sum or a product) with a fitted
        constant c among its arguments, rest the group without it; else (None, None)."""
        P = self.P
        if not (isinstance(t, list) and t and t[0] == head):
            return None, None
        consts = [a for a in t[1:] if _fitted(a, P)]
        if len(consts) != 1:
            return None, None
        rest = [a for a in t[1:] if a is not consts[0]]
        return consts[0], (rest[0] if len(rest) == 1 else self._apply(head, rest))

    def _loop_body(self, t, rule):
        """Inside a loop's (if (= k N) s (recur update (+ k 1))): ``rule`` (simp or lift) on
        the state updates and the result, never on the counter's step or the test."""
        if isinstance(t, list) and t and t[0] == "if" and len(t) == 4:
            return ["if", t[1], self._loop_body(t[2], rule), self._loop_body(t[3], rule)]
        if isinstance(t, list) and t and t[0] == "recur":
            return ["recur"] + [a if _counter_step(a) else rule(a) for a in t[1:]]
        return rule(t)

    def _assoc(self, head, args):
        P = self.P
        unit = 0.0 if head == "+" else 1.0
        flat = []
        for a in args:
            if isinstance(a, list) and a and a[0] == head:
                flat.extend(a[1:])
            elif head == "+" and isinstance(a, list) and len(a) == 3 and a[0] == "-":
                flat.extend(self._terms(a))  # u - v is u + (-v)
            else:
                flat.append(a)
        if head == "*" and any(_num(a) and a == 0 for a in flat):
            return 0.0
        rest = self._fold_constants(head, flat)
        if head == "+":  # (the groupings may leave constants to fold again)
            rest = self._fold_constants(head, self._like_terms(self._distribute(
                self._affine_terms(rest))))
        else:
            rest = self._scale_into_ratio(self._fold_constants(head, self._merge_scales(rest)))
        if not rest:
            return unit
        if len(rest) == 1:
            return rest[0]
        rest = sorted(rest, key=lambda a: (not _pl(a, P), self.key(a)))
        if head == "+" and len(rest) == 2 and _pl(rest[0], P) and isinstance(rest[1], list) \
                and len(rest[1]) == 2 and rest[1][0] == "-":
            return ["-", rest[0], rest[1][1]]  # c + (-w) is c - w
        return [head] + rest

    def _fold_constants(self, head, items):
        """A sum's or product's arguments with its constants folded into one: a fitted one
        when any is fitted (one parameter keeps its name), else their value."""
        P = self.P
        consts = [a for a in items if _pl(a, P)]
        rest = [a for a in items if not _pl(a, P)]
        if len(consts) == 1 and isinstance(consts[0], str):
            rest.append(consts[0])  # one parameter keeps its name (and any sharing)
        elif any(_has_param(a, P) for a in consts):
            rest.append(_PARAM)
        else:
            unit = 0.0 if head == "+" else 1.0
            v = _fold(head, consts) if consts else unit
            if v is None:
                rest.extend(consts)
            elif v != unit:
                rest.append(v)
        return rest

    def _slotted(self, t):
        """True when ``t`` has a free scale of its own (k t is t with other parameters): a
        fitted constant, a product with a slotted factor, a ratio with a slotted numerator or
        denominator, or a sum whose terms are all slotted."""
        P = self.P
        if _fitted(t, P):
            return True
        if not isinstance(t, list) or not t:
            return False
        if t[0] == "*":
            return any(self._slotted(f) for f in t[1:])
        if t[0] == "/" and len(t) == 3:
            return self._slotted(t[1]) or self._slotted(t[2])
        if t[0] == "+":
            return self._scaled_sum(t)
        return self._pulled(t)[0] == "*"

    def _unscaled(self, t):
        """``t`` (slotted) with its free scale fixed: c u -> u, (d + e u) -> (d + u)."""
        P = self.P
        if _fitted(t, P):
            return 1.0
        if t[0] == "*":
            i = min((i for i, f in enumerate(t[1:], 1) if self._slotted(f)),
                    key=lambda i: not _fitted(t[i], P))  # a constant factor first
            return self._apply("*", [f if j != i else self._unscaled(f)
                                     for j, f in enumerate(t[1:], 1)])
        if t[0] == "/":
            if self._slotted(t[1]):
                return self._divide([self._unscaled(t[1]), t[2]])
            return self._divide([t[1], self._unscaled(t[2])])
        if t[0] != "+":
            return self._pulled(t)[1]
        i = next(i for i, a in enumerate(t[1:], 1) if not _fitted(a, P))
        return self._apply("+", [a if j != i else self._unscaled(a)
                                 for j, a in enumerate(t[1:], 1)])

    def _scaled_sum(self, t):
        """True when ``t`` is a sum whose terms all have a free scale or are fitted: its own
        scale is free (c (d + e u) is d' + e' u)."""
        return (isinstance(t, list) and len(t) > 2 and t[0] == "+"
                and all(self._slotted(a) for a in t[1:]))

    def _cancel(self, factors):
        """A ratio's denominator shares parameter-free factors with the rest of the product:
        they cancel ((u / v) v -> u), as in a ratio (``_common_factors``)."""
        for i, a in enumerate(factors):
            if isinstance(a, list) and len(a) == 3 and a[0] == "/":
                others = ["*"] + factors[:i] + factors[i + 1:]
                common = self._common_factors(others, a[2])
                if common:
                    rest = self._without(others, common)
                    return self._cancel([self._divide([self._apply("*", [rest, a[1]]),
                                                       self._without(a[2], common)])])
        return factors

    def _common_factors(self, u, v):
        """The parameter-free factors u and v share (by source, with multiplicity)."""
        def factors(t):
            return t[1:] if isinstance(t, list) and t and t[0] == "*" else [t]
        vs = [self.source(f) for f in factors(v) if not self.occurrences(f)]
        out = []
        for f in factors(u):
            src = self.source(f)
            if not self.occurrences(f) and not _num(f) and src in vs:
                vs.remove(src)
                out.append(src)
        return out

    def _without(self, t, srcs):
        """Product ``t`` without one factor of each source in ``srcs``."""
        left = list(srcs)
        rest = []
        for f in (t[1:] if isinstance(t, list) and t and t[0] == "*" else [t]):
            src = self.source(f)
            if src in left:
                left.remove(src)
            else:
                rest.append(f)
        return self._apply("*", rest) if rest else 1.0

    def _merge_scales(self, factors):
        """One free scale per product: c (d u / v) w -> (c' u / v) w, c (d + e u) ->
        d + e u, (a u + b v) (c + d w) -> (a u + b v) (c + w), c u / (d + e w) ->
        c' u / (d + w), and a negated factor's sign joins the scale."""
        P = self.P
        factors = self._cancel(factors)
        carriers = [i for i, a in enumerate(factors) if self._slotted(a)]
        if not carriers:
            return factors
        factors = [_negand(a) if _negand(a) is not None else a for a in factors]
        if len(carriers) < 2:
            return factors
        # a sum's or a ratio's own scale is kept rather than a constant factor; ties by shape,
        # so the choice is the same whatever the factors' order
        keep = min(carriers, key=lambda i: (2 if _fitted(factors[i], P) else
                                            0 if self._scaled_sum(factors[i]) else 1,
                                            self.key(factors[i])))
        out = []
        for i, a in enumerate(factors):
            if i not in carriers or i == keep:
                out.append(a)
            else:
                u = self._unscaled(a)
                if not (_num(u) and u == 1):
                    out.append(u)
        return out

    def _distribute(self, terms):
        """A product with a sum among its factors is expanded when one of its terms is like
        another term of the sum around it: (b + y) x + c x -> x y + c' x."""
        def sum_factor(t):
            if isinstance(t, list) and t and t[0] == "*":
                sums = [f for f in t[1:] if isinstance(f, list) and f and f[0] == "+"]
                if len(sums) == 1:
                    return sums[0]
            return None
        for i, t in enumerate(terms):
            s = sum_factor(t)
            if s is None:
                continue
            others = [f for f in t[1:] if f is not s]
            parts = [self._apply("*", others + [u]) for u in s[1:]]
            bases = {self._base(u)[0] for u in parts}
            if any(self._base(u)[0] in bases for j, u in enumerate(terms) if j != i):
                return self._distribute(terms[:i] + parts + terms[i + 1:])
        return terms

    def _affine_terms(self, terms):
        """c (d + u) is c d + c u: in a sum with another constant (its own, or another such
        term's) the term's inner constant folds into it (a + b (c + x) -> a + b x)."""
        P = self.P
        split = [self._split_sum(t) if isinstance(t, list) and t[0] == "*" else
                 (_PARAM, self._pulled(t)[1]) if self._pulled(t)[0] == "+" else (None, None)
                 for t in terms]
        inner = sum(c is not None for c, _ in split)
        own = any(_fitted(t, P) for t in terms)
        if inner + own < 2:
            return terms
        out = [t if c is None else rest for t, (c, rest) in zip(terms, split)]
        return out if own else out + [_PARAM]

    def _split_sum(self, t):
        """(c, rest) when ``t`` is a sum with a fitted constant c, or (- c w) (rest: -w), or
        a fitted scale times one of those, s (c + w) (c: a new constant, rest: s w)."""
        P = self.P
        if _fitted_difference(t, P):
            return t[1], self._minus([t[2]])
        if isinstance(t, list) and len(t) == 3 and t[0] == "*" and _fitted(t[1], P):
            c, rest = self._split_sum(t[2])
            return (None, None) if c is None else (_PARAM, self._apply("*", [t[1], rest]))
        c, rest = self._split(t, "+")
        if c is None and isinstance(t, list) and t[0] == "+":
            for i, u in enumerate(t[1:], 1):  # a term's own constant: d + c (e + u) + w
                c, r = self._split_sum(u) if isinstance(u, list) and u[0] == "*" else (None,
                                                                                       None)
                if c is not None:
                    return c, self._apply("+", [r if j == i else v
                                                for j, v in enumerate(t[1:], 1)])
        return c, rest

    def _scale_into_ratio(self, factors):
        """c (k / v) w -> (c' / v) w: a product's fitted scale joins the constant numerator of
        one of its ratios (two constants where one is fitted)."""
        P = self.P
        scale = next((a for a in factors if _pl(a, P)), None)
        ratio = next((a for a in factors if isinstance(a, list) and len(a) == 3 and a[0] == "/"
                      and _pl(a[1], P)), None)
        if scale is None or ratio is None:
            return factors
        k = ratio[1]
        if _num(scale) and _num(k):
            merged = _fold("*", [scale, k])
            if merged is None:
                return factors
        elif _num(k) and k == 1:
            merged = scale  # (a keeps its name)
        elif _num(scale) and scale == 1:
            merged = k
        else:
            merged = _PARAM
        out = [a for a in factors if a is not scale]
        return [["/", merged, ratio[2]] if a is ratio else a for a in out]

    def _base(self, term):
        """A sum's term without its fitted scale: (* c u v) -> (u v), u -> (u,), (- u) ->
        (u,)."""
        if isinstance(term, list) and len(term) == 2 and term[0] == "-":
            term = term[1]
        if isinstance(term, list) and term and term[0] == "*":
            factors = [f for f in term[1:] if not _pl(f, self.P)]
            if len(factors) >= len(term) - 2:  # at most one constant factor
                return tuple(self.source(f) for f in factors), factors
        return (self.source(term),), [term]

    def _like_terms(self, terms):
        """c1*u + c2*u -> c*u (and u + c*u): like terms share one fitted scale."""
        groups, order = {}, []
        for t in terms:
            if t == _PARAM or _num(t):
                order.append((None, t))
                continue
            key, factors = self._base(t)
            if key in groups:
                groups[key][1] = True
            else:
                groups[key] = [factors, False, t]
                order.append((key, None))
        out = []
        for key, t in order:
            if key is None:
                out.append(t)
            elif groups[key][1]:
                out.append(["*", _PARAM] + groups[key][0])
            else:
                out.append(groups[key][2])
        return out

    def _minus(self, args):
        P = self.P
        if len(args) == 1:
            a = args[0]
            inner = _negand(a)
            if inner is not None:
                return inner
            if self._slotted(a):  # -(c u) is c' u
                return self._apply("*", [_PARAM, self._unscaled(a)])
            c, rest = self._split_sum(a)  # -(c + w) is c' - w
            if c is not None:
                return self._apply("+", [_PARAM, self._minus([rest])])
            return ["-", a]
        if len(args) != 2:
            return ["-"] + args
        u, v = args
        if u == v and not _has_param(u, P):
            return 0.0
        if _num(v) and v == 0:
            return u
        if _num(u) and u == 0:
            inner = _negand(v)
            return ["-", 0.0, v] if inner is None else inner
        if _pl(v, P):  # u - c is u + c' with c' = -c fitted
            return self._assoc("+", [u, _PARAM if _has_param(v, P) else -v])
        inner = _negand(v)
        if inner is not None:  # u - (-w) is u + w
            return self._apply("+", [u, inner])
        c, rest = self._split_sum(v)  # u - (c + w) is (u - w) + c'
        if c is not None:
            return self._apply("+", [self._minus([u, rest]), _PARAM])
        c, rest = self._split_sum(u)  # (c + w) - v is c + (w - v)
        if c is not None:
            return self._apply("+", [c, self._minus([rest, v])])
        if isinstance(v, list) and v[0] == "+":  # u - (v + w) is u + (-v) + (-w)
            return self._apply("+", [u] + [self._minus([t]) for t in v[1:]])
        if isinstance(u, list) and u[0] == "+":  # (u + w) - v is u + w + (-v)
            return self._apply("+", u[1:] + [self._minus([v])])
        if self._slotted(v) or self._base(u)[0] == self._base(v)[0]:
            return self._apply("+", [u, self._minus([v])])  # u - c w is u + c' w
        return ["-", u, v]

    def _divide(self, args):
        P = self.P
        if len(args) > 2:  # u / v / w ... is u / (v w ...)
            args = [args[0], self._assoc("*", args[1:])]
        if len(args) != 2:
            return ["/"] + args
        u, v = args
        if u == v and not _has_param(u, P):
            return 1.0
        if _num(v) and v == 1:
            return u
        if _num(u) and u == 0:
            return 0.0
        if _pl(v, P) and _has_param(v, P):  # u / c is u * c' with c' = 1/c fitted
            return self._assoc("*", [u, _PARAM])
        if _num(v) and v != 0:  # u / k is u * (1/k): the literal joins u's other factors
            return self._assoc("*", [u, 1.0 / v])
        if isinstance(v, list) and len(v) == 3 and v[0] == "/" and _num(v[1]) and v[1] == 1:
            return self._assoc("*", [u, v[2]]) if not (_num(u) and u == 1) else v[2]
        if isinstance(v, list) and len(v) == 3 and v[0] == "/":  # u / (p / q) is u q / p
            return self._divide([self._apply("*", [u, v[2]]), v[1]])
        if isinstance(u, list) and len(u) == 3 and u[0] == "/":  # (p / q) / v is p / (q v)
            return self._divide([u[1], self._apply("*", [u[2], v])])
        common = self._common_factors(u, v)
        if common:  # (x u) / (x v) is u / v
            return self._divide([self._without(u, common), self._without(v, common)])
        if self._slotted(u) and self._slotted(v) and not (
                isinstance(v, list) and v[0] == "*" and any(_pl(f, P) for f in v[1:])):
            # c u / (d + e w) is c' u / (d' + w): one of the two scales is free
            return self._divide([u, self._unscaled(v)])
        if isinstance(v, list) and v[0] == "*" and any(_pl(f, P) for f in v[1:]):
            # u / (c w) is c' u / w: the denominator's fitted scale joins the numerator's (or
            # becomes its own factor when the numerator has none)
            scale = [f for f in v[1:] if _pl(f, P)]
            rest = [f for f in v[1:] if not _pl(f, P)]
            w = rest[0] if len(rest) == 1 else ["*"] + rest
            if not _has_param(scale, P):  # literals: u / (k w) is (1/k) u / w
                k = _fold("*", scale)
                if k is None or k == 0:
                    return ["/", u, v]
                return self._assoc("*", [1.0 / k, self._divide([u, w])])
            if _fitted(u, P) or (isinstance(u, list) and u[0] == "*"
                                 and any(_fitted(f, P) for f in u[1:])):
                return self._divide([u, w])  # (a literal numerator stays fixed: not this way)
            return self._assoc("*", [_PARAM, self._divide([u, w])])
        return ["/", u, v]

    # -- canonical form -----------------------------------------------------------------------

    def lift(self, t):
        """Every numeric literal in an arithmetic position becomes a parameter (integer
        exponents of pow/expt and loop control stay literal: they are structure, not
        constants)."""
        if type(t) is not list or not t:
            return _PARAM if _num(t) else t
        f = self.facts(t)
        if f.lift is None:
            f.lift = self._lift_node(t)
        return f.lift

    def _lift_node(self, t):
        head = t[0]
        if head in ("let", "let*") and len(t) >= 3 and isinstance(t[1], list):
            binds = [[b[0], self.lift(b[1])] if isinstance(b, list) and len(b) == 2
                     else b for b in t[1]]
            return [head, binds] + [self.lift(x) for x in t[2:]]
        if head == "loop" and len(t) >= 3 and isinstance(t[1], list):
            binds = [[b[0], b[1] if _num(b[1]) else self.lift(b[1])]
                     if isinstance(b, list) and len(b) == 2 else b for b in t[1]]
            return [head, binds] + [self._loop_body(x, self.lift) for x in t[2:]]
        if not isinstance(head, str) or head not in _ARITH:
            return t
        out = [head]
        for i, a in enumerate(t[1:], 1):
            if head in ("pow", "expt") and i == 2 and _num(a) and float(a).is_integer():
                out.append(a)
            elif head == "-" and i == 1 and len(t) == 3 and _num(a) and a == 0:
                out.append(a)  # (- 0 u) is a negation, not a constant
            else:
                out.append(self.lift(a))
        return out

    def rename(self, t, shared):
        """(tree, source) with parameters named in order of occurrence: each occurrence its own
        name, or (``shared``) each distinct parameter its own name. A subtree without
        parameters is kept as it is; the source is written in the same walk."""
        return self._rename(t, shared, {}, iter(self.names))

    def _rename(self, x, shared, mapping, it):  # (a method: a recursive closure is a cycle)
        if type(x) is list:
            if not self.occurrences(x):
                return x, self.source(x)
            pairs = [self._rename(y, shared, mapping, it) for y in x]
            return [p[0] for p in pairs], "(" + " ".join([p[1] for p in pairs]) + ")"
        if x == _PARAM or (isinstance(x, str) and x in self.P):
            if x == _PARAM or not shared:
                name = next(it)
            else:
                name = mapping.get(x)
                if name is None:
                    name = mapping[x] = next(it)
            return name, name
        return x, _atom(x)

    def canonical_form(self, tree):
        """(tree, source, size) of the canonical simplified tree (see the module function
        ``canonicalize``); raises TooManyParameters as it does."""
        self._fresh()
        names = self.names
        t = self.simp(tree)
        lifted = self.simp(self.lift(t))
        for _ in range(4):  # until lifting and simplifying again changes nothing (a rule may
            again = self.simp(self.lift(lifted))  # pick another of equal parameters once the
            if self.source(again) == self.source(lifted):  # literals it kept are parameters)
                break
            lifted = again
        if self.occurrences(lifted) <= len(names):
            return self.rename(lifted, shared=False) + (self.size(lifted),)
        if self.occurrences(t) <= len(names):
            return self.rename(t, shared=False) + (self.size(t),)
        if len(self.named(t)) + self.marks(t) <= len(names):
            return self.rename(t, shared=True) + (self.size(t),)
        raise TooManyParameters(f"the simplified model needs more than {len(names)} parameters")

    def canonicalize(self, tree):
        """The canonical simplified tree (see the module function ``canonicalize``)."""
        return self.canonical_form(tree)[0]


def simplify(tree, params):
    """An equivalent (up to fitted constants) and never larger tree; see the module docstring."""
    return Simplifier(params).simplify(tree)


def _counter_step(a):
    return (isinstance(a, list) and len(a) == 3 and a[0] == "+" and isinstance(a[1], str)
            and _num(a[2]))


def _uses(t, name):
    """How often ``name`` occurs in ``t``; many when ``t`` binds names (no inlining there)."""
    if isinstance(t, list):
        if t and t[0] in SPECIAL_FORMS:
            return 2
        return sum(_uses(x, name) for x in t)
    return int(t == name)


def _substitute(t, name, value):
    if isinstance(t, list):
        return [_substitute(x, name, value) for x in t]
    return value if t == name else t


def _mentions(t, name):
    if isinstance(t, list):
        return any(_mentions(x, name) for x in t)
    return t == name


def _reciprocal(t):
    """True when ``t`` is (/ 1 w)."""
    return isinstance(t, list) and len(t) == 3 and t[0] == "/" and _num(t[1]) and t[1] == 1


def _fitted_difference(t, P):
    """True when ``t`` is (- c w) with c a fitted constant."""
    return isinstance(t, list) and len(t) == 3 and t[0] == "-" and _fitted(t[1], P)


def _neg(a):
    return isinstance(a, list) and len(a) == 3 and a[0] == "-" and _num(a[1]) and a[1] == 0


def _negand(x):
    """x's operand when x is a negation, (- y) or (- 0 y); else None."""
    if isinstance(x, list) and len(x) == 2 and x[0] == "-":
        return x[1]
    return x[2] if _neg(x) else None


def canonicalize(tree, params):
    """The canonical simplified tree of a candidate, its parameters drawn from ``params``.

    Parameters are renamed in order of occurrence, one per occurrence when ``params`` has names
    enough (a model never loses freedom by it); otherwise literals stay literal and parameters
    keep their sharing; raises TooManyParameters when even that needs more names.
    """
    return Simplifier(params).canonicalize(tree)


def canonical_source(tree, params):
    """Source of the canonical form (the key that detects duplicate models)."""
    return to_source(canonicalize(tree, params))
