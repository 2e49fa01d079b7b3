"""Simplification and canonical form of candidate trees, applied before any calibration.

``canonicalize`` folds constants, collapses every parameter-only subtree into one parameter,
turns numeric literals into fitted parameters, removes identities (x-x, x/x, x*1, x+0, nested
negations and inverses, log(exp u)), flattens and orders + and *, and names parameters by order of
occurrence (one parameter per occurrence when the task has names enough), so two proposals that
are the same model up to reparametrization print the same and are calibrated once. Special forms
(let, loop) keep their structure; loop counters and their literals are never touched.
"""
import math

from ndvm.cosearch.sexpr import SPECIAL_FORMS, to_source
from ndvm.cosearch.sexpr import atoms as _atoms

__all__ = ["simplify", "canonicalize", "is_param_only", "TooManyParameters", "PARAM_MARK"]

class TooManyParameters(ValueError):
    """The simplified model has more distinct constants than the task has parameter names."""


_FOLD = {
    "sin": math.sin, "cos": math.cos, "exp": math.exp, "log": math.log, "sqrt": math.sqrt,
    "tanh": math.tanh, "tan": math.tan, "atan": math.atan, "abs": abs,
    "square": lambda a: a * a,
    "pow": math.pow, "expt": math.pow,
}
_ARITH = frozenset("+ - * /".split()) | frozenset(_FOLD)
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


def _key(tree):
    """Ordering of + and * arguments: variables before parameters, by parameter-free shape."""
    def shape(t):
        if isinstance(t, list):
            return "(" + " ".join(shape(x) for x in t) + ")"
        if _num(t) or t == _PARAM:
            return "C"
        return t
    return shape(tree)


def simplify(tree, params):
    """An equivalent (up to fitted constants) and never larger tree; see the module docstring."""
    params = frozenset(params)
    return _simp(tree, params)


def _simp(t, P):
    if not isinstance(t, list) or not t:
        return t
    head = t[0]
    if head in ("let", "let*") and len(t) >= 3 and isinstance(t[1], list):
        binds = [[b[0], _simp(b[1], P)] if isinstance(b, list) and len(b) == 2 else b
                 for b in t[1]]
        body = [_simp(x, P) for x in t[2:]]
        used = [b for b in binds if not (isinstance(b, list) and len(b) == 2)
                or any(_mentions(x, b[0]) for x in body)
                or any(_mentions(c[1], b[0]) for c in binds if c is not b and head == "let*")]
        if not used and len(body) == 1:
            return body[0]
        if head == "let" and len(used) == 1 and len(body) == 1 and _uses(body[0], used[0][0]) == 1:
            return _simp(_substitute(body[0], used[0][0], used[0][1]), P)  # a single use: inline
        return [head, used] + body
    if head == "loop" and len(t) >= 3 and isinstance(t[1], list):
        binds = [[b[0], b[1] if _num(b[1]) else _simp(b[1], P)] if isinstance(b, list)
                 and len(b) == 2 else b for b in t[1]]
        return [head, binds] + [_loop_body(x, P) for x in t[2:]]
    if not isinstance(head, str) or head not in _ARITH:
        return t  # comparisons, data operations, other special forms: kept as written
    args = [_simp(a, P) for a in t[1:]]
    if all(_num(a) for a in args):
        v = _fold(head, args)
        if v is not None:
            return v
    node = [head] + args
    if all(_pl(a, P) for a in args) and _has_param(node, P):
        return _PARAM  # a parameter-only subtree is one fitted number
    if head in ("+", "*"):
        return _assoc(head, args, P)
    if head == "-":
        return _minus(args, P)
    if head == "/":
        return _divide(args, P)
    if len(args) == 1 and isinstance(args[0], list) and len(args[0]) == 2:
        inner = args[0]
        if (head, inner[0]) in (("log", "exp"), ("exp", "log"), ("square", "sqrt")):
            return inner[1]
    return node


def _loop_body(t, P):
    """Inside a loop's (if (= k N) s (recur update (+ k 1))): simplify the state updates only."""
    if isinstance(t, list) and t and t[0] == "if" and len(t) == 4:
        return ["if", t[1], _loop_body(t[2], P), _loop_body(t[3], P)]
    if isinstance(t, list) and t and t[0] == "recur":
        return ["recur"] + [a if _counter_step(a) else _simp(a, P) for a in t[1:]]
    return _simp(t, P)


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


def _assoc(head, args, P):
    unit = 0.0 if head == "+" else 1.0
    flat = []
    for a in args:
        flat.extend(a[1:] if isinstance(a, list) and a and a[0] == head else [a])
    if head == "*" and any(_num(a) and a == 0 for a in flat):
        return 0.0
    consts = [a for a in flat if _pl(a, P)]
    rest = [a for a in flat if not _pl(a, P)]
    if len(consts) == 1 and isinstance(consts[0], str):
        rest.append(consts[0])  # one parameter keeps its name (and any sharing)
    elif any(_has_param(a, P) for a in consts):
        rest.append(_PARAM)
    else:
        v = _fold(head, consts) if consts else unit
        if v is None:
            rest.extend(consts)
        elif v != unit:
            rest.append(v)
    if head == "+":
        rest = _like_terms(rest, P)
    if not rest:
        return unit
    if len(rest) == 1:
        return rest[0]
    return [head] + sorted(rest, key=lambda a: (not _pl(a, P), _key(a)))


def _base(term, P):
    """A sum's term without its fitted scale: (* c u v) -> (u v), u -> (u,)."""
    if isinstance(term, list) and term and term[0] == "*":
        factors = [f for f in term[1:] if not _pl(f, P)]
        if len(factors) >= len(term) - 2:  # at most one constant factor
            return tuple(to_source(f) for f in factors), factors
    return (to_source(term),), [term]


def _like_terms(terms, P):
    """c1*u + c2*u -> c*u (and u + c*u): like terms share one fitted scale."""
    groups, order = {}, []
    for t in terms:
        if t == _PARAM or _num(t):
            order.append((None, t))
            continue
        key, factors = _base(t, P)
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


def _neg(a):
    return isinstance(a, list) and len(a) == 3 and a[0] == "-" and _num(a[1]) and a[1] == 0


def _minus(args, P):
    if len(args) == 1:
        a = args[0]
        inner = _negand(a)
        return ["-", a] if inner is None else inner
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
        return _assoc("+", [u, _PARAM if _has_param(v, P) else -v], P)
    return ["-", u, v]


def _negand(x):
    """x's operand when x is a negation, (- y) or (- 0 y); else None."""
    if isinstance(x, list) and len(x) == 2 and x[0] == "-":
        return x[1]
    return x[2] if _neg(x) else None


def _divide(args, P):
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
        return _assoc("*", [u, _PARAM], P)
    if isinstance(v, list) and len(v) == 3 and v[0] == "/" and _num(v[1]) and v[1] == 1:
        return _assoc("*", [u, v[2]], P) if not (_num(u) and u == 1) else v[2]
    return ["/", u, v]


def _literals_to_params(t):
    """Every numeric literal in an arithmetic position becomes a parameter (integer exponents of
    pow/expt and loop control stay literal: they are structure, not constants)."""
    if not isinstance(t, list) or not t:
        return _PARAM if _num(t) else t
    head = t[0]
    if head in ("let", "let*") and len(t) >= 3 and isinstance(t[1], list):
        binds = [[b[0], _literals_to_params(b[1])] if isinstance(b, list) and len(b) == 2
                 else b for b in t[1]]
        return [head, binds] + [_literals_to_params(x) for x in t[2:]]
    if head == "loop" and len(t) >= 3 and isinstance(t[1], list):
        binds = [[b[0], b[1] if _num(b[1]) else _literals_to_params(b[1])]
                 if isinstance(b, list) and len(b) == 2 else b for b in t[1]]
        return [head, binds] + [_loop_literals(x) for x in t[2:]]
    if not isinstance(head, str) or head not in _ARITH:
        return t
    out = [head]
    for i, a in enumerate(t[1:], 1):
        if head in ("pow", "expt") and i == 2 and _num(a) and float(a).is_integer():
            out.append(a)
        elif head == "-" and i == 1 and len(t) == 3 and _num(a) and a == 0:
            out.append(a)  # (- 0 u) is a negation, not a constant
        else:
            out.append(_literals_to_params(a))
    return out


def _loop_literals(t):
    if isinstance(t, list) and t and t[0] == "if" and len(t) == 4:
        return ["if", t[1], _loop_literals(t[2]), _loop_literals(t[3])]
    if isinstance(t, list) and t and t[0] == "recur":
        return ["recur"] + [a if _counter_step(a) else _literals_to_params(a) for a in t[1:]]
    return _literals_to_params(t)


def _occurrences(t, P):
    if isinstance(t, list):
        return sum(_occurrences(x, P) for x in t)
    return int(t == _PARAM or (isinstance(t, str) and t in P))


def _rename(t, P, names, shared):
    """Name parameters in order of occurrence: each occurrence its own name, or (``shared``)
    each distinct parameter its own name."""
    mapping, it = {}, iter(names)

    def walk(x):
        if isinstance(x, list):
            return [walk(y) for y in x]
        if x == _PARAM or (isinstance(x, str) and x in P):
            if x == _PARAM or not shared:
                return next(it)
            if x not in mapping:
                mapping[x] = next(it)
            return mapping[x]
        return x
    return walk(t)


def canonicalize(tree, params):
    """The canonical simplified tree of a candidate, its parameters drawn from ``params``.

    Parameters are renamed in order of occurrence, one per occurrence when ``params`` has names
    enough (a model never loses freedom by it); otherwise literals stay literal and parameters
    keep their sharing; raises TooManyParameters when even that needs more names.
    """
    names = list(params)
    P = frozenset(params)
    t = _simp(tree, P)
    lifted = _simp(_literals_to_params(t), P)
    if _occurrences(lifted, P) <= len(names):
        return _rename(lifted, P, names, shared=False)
    if _occurrences(t, P) <= len(names):
        return _rename(t, P, names, shared=False)
    distinct = {x for x in _atoms(t) if isinstance(x, str) and x in P}
    if len(distinct) + _count(t, _PARAM) <= len(names):
        return _rename(t, P, names, shared=True)
    raise TooManyParameters(f"the simplified model needs more than {len(names)} parameters")


def _count(t, atom):
    return sum(1 for x in _atoms(t) if x == atom)


def canonical_source(tree, params):
    """Source of the canonical form (the key that detects duplicate models)."""
    return to_source(canonicalize(tree, params))
