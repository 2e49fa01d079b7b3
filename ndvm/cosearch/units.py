"""Units and dimensional analysis for a search whose inputs and target have known units.

A unit ("kg*m^2/s^2", "m/s", "1") is parsed into a dimension: a vector of rational exponents over
the SI base dimensions BASE. ``admits`` infers a candidate tree's dimension (fitted parameters are
wildcards, see ``Dimensions``) and ``pi_groups`` finds a monomial of the inputs with the target's
unit and a basis of dimensionless groups (Buckingham Pi), from which ``seeds`` builds c*M*h(pi).
"""
import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from ndvm.cosearch import structure
from ndvm.cosearch.sexpr import substitute

__all__ = [
    "BASE",
    "DERIVED",
    "TARGET",
    "Dimensions",
    "Inconsistent",
    "Units",
    "format_unit",
    "infer",
    "integer_null_space",
    "monomial",
    "parse_unit",
    "pi_groups",
    "seeds",
    "units_of",
]

BASE = ("m", "s", "kg", "K", "A", "mol", "cd")
# derived SI units a unit string may name (no prefixes: a scale is a fitted constant's job);
# "ohm" for the ohm; "T" is the tesla (the kelvin is "K")
DERIVED = {"N": "kg*m/s^2", "J": "N*m", "W": "J/s", "Pa": "N/m^2", "Hz": "1/s", "C": "A*s",
           "V": "W/A", "F": "C/V", "ohm": "V/A", "S": "A/V", "Wb": "V*s", "T": "Wb/m^2",
           "H": "Wb/A", "rad": "1", "sr": "1"}
TARGET = "target"  # the key of the target's unit in a units mapping
_ZERO = (Fraction(0),) * len(BASE)
# the Pi models proposed at most (smallest first): with many groups the library of h's grows
# combinatorially and would take a short search's whole budget before anything evolves
PI_SEEDS = 500


# -- units as text ------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(\*\*|[*/^()])|([A-Za-z_]+)|(-?\d+(?:\.\d+)?))")


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b))


def _scale(a, k):
    return tuple(x * k for x in a)


def parse_unit(text):
    """The dimension of a unit string: products (*) and quotients (/, left to right) of BASE and
    DERIVED names, each with an optional power (^ or **: an integer, or (p/q)), parentheses, and
    "1" for dimensionless. ValueError names what is wrong and where."""
    if not isinstance(text, str):
        raise ValueError(f"a unit must be a string like 'kg*m/s^2', got {text!r}")
    toks, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"bad unit {text!r}: unexpected {text[pos:].strip()[0]!r} at "
                             f"column {pos + 1}")
        toks.append((m.group(1) or m.group(2) or m.group(3), m.start(m.lastindex) + 1))
        pos = m.end()
    if not toks:
        raise ValueError("a unit may not be empty (write '1' for dimensionless)")
    parser = _UnitParser(text, toks)
    dim = parser.product()
    if parser.i != len(toks):
        tok, col = toks[parser.i]
        raise ValueError(f"bad unit {text!r}: unexpected {tok!r} at column {col}")
    return dim


class _UnitParser:
    """Recursive descent over the tokens of one unit string."""

    def __init__(self, text, toks):
        self.text, self.toks, self.i = text, toks, 0

    def _fail(self, what):
        col = self.toks[self.i][1] if self.i < len(self.toks) else len(self.text) + 1
        raise ValueError(f"bad unit {self.text!r}: {what} at column {col}")

    def _peek(self):
        return self.toks[self.i][0] if self.i < len(self.toks) else None

    def product(self):
        dim = self.power()
        while self._peek() in ("*", "/"):
            op = self.toks[self.i][0]
            self.i += 1
            rhs = self.power()
            dim = _add(dim, rhs if op == "*" else _scale(rhs, -1))
        return dim

    def power(self):
        dim = self.atom()
        if self._peek() in ("^", "**"):
            self.i += 1
            dim = _scale(dim, self.exponent())
        return dim

    def exponent(self):
        tok = self._peek()
        if tok == "(":  # (p/q) or (-p/q)
            self.i += 1
            num = self._number()
            den = 1
            if self._peek() == "/":
                self.i += 1
                den = self._number()
            if self._peek() != ")":
                self._fail("expected ')' closing the exponent")
            self.i += 1
            if den == 0:
                self._fail("a zero denominator in the exponent")
            return Fraction(num) / Fraction(den)
        return self._number()

    def _number(self):
        tok = self._peek()
        if tok is None or not re.fullmatch(r"-?\d+(?:\.\d+)?", tok):
            self._fail("expected a number")
        self.i += 1
        return Fraction(tok)

    def atom(self):
        tok = self._peek()
        if tok == "(":
            self.i += 1
            dim = self.product()
            if self._peek() != ")":
                self._fail("expected ')'")
            self.i += 1
            return dim
        if tok == "1":
            self.i += 1
            return _ZERO
        if tok is None or not re.fullmatch(r"[A-Za-z_]+", tok):
            self._fail("expected a unit name" if tok is None else f"unexpected {tok!r}")
        self.i += 1
        if tok in BASE:
            return tuple(Fraction(int(b == tok)) for b in BASE)
        if tok in DERIVED:
            return parse_unit(DERIVED[tok])
        self.i -= 1
        self._fail(f"unknown unit {tok!r} (known: {' '.join(BASE)} {' '.join(DERIVED)})")


def format_unit(dim):
    """A dimension as a unit string over BASE ("kg*m^2/s^2"; "1" when dimensionless)."""
    def part(name, e):
        return name if e == 1 else f"{name}^{e}" if e.denominator == 1 else f"{name}^({e})"
    num = [part(b, e) for b, e in zip(BASE, dim) if e > 0]
    den = [part(b, -e) for b, e in zip(BASE, dim) if e < 0]
    text = "*".join(num) or "1"
    if den:
        text += "/" + (den[0] if len(den) == 1 else "(" + "*".join(den) + ")")
    return text


@dataclass(frozen=True)
class Units:
    """The units of a task's inputs (name -> dimension) and of its target."""

    inputs: dict
    target: tuple

    @classmethod
    def of(cls, mapping, names):
        """Units from ``mapping`` (input name -> unit string, and the target's under TARGET)
        for the inputs ``names``; ValueError names an unknown or missing name or a bad unit."""
        if isinstance(mapping, Units):
            if list(mapping.inputs) != list(names):
                raise ValueError(f"units for inputs {', '.join(mapping.inputs)}, but the inputs "
                                 f"are {', '.join(names)}")
            return mapping
        if not isinstance(mapping, dict):
            raise ValueError(f"units must be a dict of input name -> unit string (the target's "
                             f"under {TARGET!r}), got {type(mapping).__name__}")
        names = list(names)
        if TARGET in names:
            raise ValueError(f"an input is named {TARGET!r}, the key of the target's unit; "
                             "rename that input to give units")
        unknown = [k for k in mapping if k != TARGET and k not in names]
        if unknown:
            raise ValueError(f"units given for unknown input(s) {', '.join(map(repr, unknown))} "
                             f"(the inputs are {', '.join(names)}; the target's key is "
                             f"{TARGET!r})")
        missing = [k for k in names if k not in mapping]
        if missing:
            raise ValueError(f"no unit for input(s) {', '.join(map(repr, missing))} (give "
                             "every input a unit; '1' for a dimensionless one)")
        if TARGET not in mapping:
            raise ValueError(f"no unit for the target: give it under the key {TARGET!r}")
        dims = {}
        for k in names + [TARGET]:
            try:
                dims[k] = parse_unit(mapping[k])
            except ValueError as e:
                raise ValueError(f"unit of {k!r}: {e}") from None
        return cls(inputs={k: dims[k] for k in names}, target=dims[TARGET])


# -- dimension inference ------------------------------------------------------------------------

class Inconsistent(ValueError):
    """A program's dimensions do not agree; the message names where."""


class Unsupported(Exception):
    """A form the inference does not read (loops, conditionals): such programs are admitted."""


# functions whose argument and value are dimensionless
_TRANSCENDENTAL = frozenset({"exp", "sin", "cos", "tan", "tanh", "atan", "asin", "acos", "sinh",
                             "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "sigmoid"})
_SAME = frozenset({"+", "-", "min", "max"})  # every argument has one unit, the value's
_KEEP = frozenset({"abs", "neg", "floor", "ceiling", "round", "truncate"})


class _Affine:
    """A dimension that may depend on unknown parameter units: const + sum coef[u] * unit(u)."""

    __slots__ = ("coef", "const")

    def __init__(self, coef, const):
        self.coef, self.const = coef, const

    def plus(self, other, k=1):
        coef = dict(self.coef)
        for u, c in other.coef.items():
            v = coef.get(u, 0) + k * c
            if v:
                coef[u] = v
            else:
                coef.pop(u, None)
        return _Affine(coef, _add(self.const, _scale(other.const, k)))

    def times(self, k):
        if not k:
            return _Affine({}, tuple(0 * x for x in self.const))
        return _Affine({u: c * k for u, c in self.coef.items()}, _scale(self.const, k))


class _Inference:
    """One walk over a tree: each node's affine dimension, and the equations (affine forms that
    must vanish) that sums, transcendental functions and the target impose."""

    def __init__(self, inputs, params, n_dims=len(BASE)):
        self.inputs, self.params = inputs, params
        self.zero = (Fraction(0),) * n_dims
        self.dimensionless = _Affine({}, self.zero)
        self.unknowns = {}
        self.equations = []  # (affine, node)

    def equal(self, a, b, node):
        d = a.plus(b, -1)
        if not d.coef:
            if any(d.const):
                raise Inconsistent(f"{_text(node)}: {format_unit(a.const)} and "
                                   f"{format_unit(b.const)} do not match")
            return
        self.equations.append((d, node))

    def walk(self, t, env):
        if isinstance(t, bool):
            raise Unsupported("a boolean")
        if isinstance(t, (int, float)):
            return self.dimensionless  # literals are pure numbers (pi, 2, 0.5)
        if isinstance(t, str):
            if t in env:
                return env[t]
            if t in self.inputs:
                return _Affine({}, self.inputs[t])
            if t in self.params:
                u = self.unknowns.setdefault(t, len(self.unknowns))
                return _Affine({u: Fraction(1)}, self.zero)
            raise Unsupported(f"unknown name {t!r}")
        head, args = t[0], t[1:]
        if head in ("let", "let*") and len(args) == 2:
            inner = dict(env)
            for name, value in args[0]:
                inner[name] = self.walk(value, inner if head == "let*" else env)
            return self.walk(args[1], inner)
        if not isinstance(head, str) or not args:
            raise Unsupported(f"the form {head!r}")
        dims = [self.walk(a, env) for a in args]
        if head in _SAME:
            for d in dims[1:]:
                self.equal(d, dims[0], t)
            return dims[0]
        if head == "*":
            out = dims[0]
            for d in dims[1:]:
                out = out.plus(d)
            return out
        if head == "/":
            if len(dims) == 1:
                return dims[0].times(-1)
            out = dims[0]
            for d in dims[1:]:
                out = out.plus(d, -1)
            return out
        if len(dims) == 1:
            (d,) = dims
            if head == "square":
                return d.times(2)
            if head == "sqrt":
                return d.times(Fraction(1, 2))
            if head == "cube":
                return d.times(3)
            if head in _KEEP:
                return d
            if head == "log":
                # log(x) of a dimensioned x is log(x / x0) + log(x0) with a fitted x0 (the
                # simplifier writes log(a x) as (+ a (log x))): its value is dimensionless
                return self.dimensionless
            if head in _TRANSCENDENTAL:
                self.equal(d, self.dimensionless, t)
                return self.dimensionless
        if head in ("pow", "expt") and len(args) == 2:
            base, e = args
            if isinstance(e, (int, float)) and not isinstance(e, bool):
                return dims[0].times(Fraction(e).limit_denominator(1000))
            # a fitted exponent: both it and the base are pure numbers (x^b of a length has no
            # unit that a fitted b could keep)
            self.equal(dims[1], self.dimensionless, t)
            self.equal(dims[0], self.dimensionless, t)
            return self.dimensionless
        raise Unsupported(f"the form {head!r}")

    def solvable(self):
        """True when some units of the parameters satisfy every equation (exact elimination)."""
        n = len(self.unknowns)
        rows = [[e.coef.get(u, Fraction(0)) for u in range(n)] + list(e.const)
                for e, _ in self.equations]
        rref, pivots = _rref(rows, n)
        return all(not any(row[n:]) for row in rref[len(pivots):])


def _text(node):
    from ndvm.cosearch.sexpr import to_source
    try:
        return to_source(node)
    except Exception:  # noqa: BLE001 - (a message only)
        return repr(node)


def infer(tree, inputs, params=(), target=None, n_dims=len(BASE)):
    """The dimension of ``tree`` (a parsed program) given its inputs' dimensions; parameters
    (``params``) are wildcards. Returns the dimension, or None when it depends on the
    parameters' units; raises Inconsistent when no units of the parameters make the program
    consistent (with ``target``, a dimension: its value must have that one), and Unsupported
    for forms it does not read. ``n_dims``: the length of the dimension vectors given (the
    messages name BASE's first ones)."""
    inf = _Inference(inputs, frozenset(params), n_dims)
    out = inf.walk(tree, {})
    if target is not None:
        inf.equal(out, _Affine({}, target), tree)
    if not inf.solvable():
        raise Inconsistent(f"{_text(tree)}: no units of its parameters make its dimensions "
                           "agree" + ("" if target is None else
                                      f" with the target's {format_unit(target)}"))
    return None if out.coef else out.const


class Dimensions:
    """What a search of a task with units uses: ``admits(tree)`` (is the candidate dimensionally
    consistent, its value in the target's unit?) and ``seeds()`` (the Buckingham Pi models).

    Fitted parameters are wildcards: each takes whatever unit makes the program consistent, so
    c*x and x + c pass while x + t (a length and a time), exp(x) or sin(x) of a dimensioned x, and
    x^b of a dimensioned x with a fitted b do not; literals are pure numbers; log takes any
    argument (log(x/x0) = log x - log x0, x0 fitted). Programs with loops or conditionals are
    admitted unchecked."""

    CACHE = 100_000

    def __init__(self, units, grammar):
        self.units, self.grammar = units, grammar
        # the inference runs over the base dimensions the task uses only (a shorter vector)
        used = [j for j in range(len(BASE))
                if units.target[j] or any(d[j] for d in units.inputs.values())]
        self._inputs = {x: tuple(d[j] for j in used) for x, d in units.inputs.items()}
        self._target = tuple(units.target[j] for j in used)
        self._params = frozenset(grammar.params)
        self._seen = {}

    def __getstate__(self):  # (an island between epochs: the memo stays behind)
        return {**vars(self), "_seen": {}}

    def admits(self, tree):
        """True when some units of the parameters make ``tree`` consistent, with the target's
        unit."""
        from ndvm.cosearch.sexpr import to_source
        key = to_source(tree) if isinstance(tree, list) else tree
        out = self._seen.get(key)
        if out is None:
            if len(self._seen) > self.CACHE:
                self._seen.clear()
            try:
                infer(tree, self._inputs, self._params, self._target, len(self._target))
                out = True
            except Inconsistent:
                out = False
            except Unsupported:
                out = True
            self._seen[key] = out
        return out

    def seeds(self):
        """The Pi models c*M*h(pi_1..pi_k) (``seeds``) for this task's units and grammar."""
        return seeds(self.units, self.grammar)


# -- Buckingham Pi ------------------------------------------------------------------------------

def _rref(rows, n):
    """Reduced row echelon form of ``rows`` (lists of Fractions) over the first ``n`` columns:
    (rows, pivot columns)."""
    rows = [list(r) for r in rows]
    pivots, r = [], 0
    for col in range(n):
        piv = next((i for i in range(r, len(rows)) if rows[i][col]), None)
        if piv is None:
            continue
        rows[r], rows[piv] = rows[piv], rows[r]
        p = rows[r][col]
        rows[r] = [x / p for x in rows[r]]
        for i in range(len(rows)):
            if i != r and rows[i][col]:
                f = rows[i][col]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[r])]
        pivots.append(col)
        r += 1
    return rows, pivots


def _integer_rows(units, names):
    """The dimension matrix (one row per base dimension, one column per input) scaled row by
    row to integers (a row's scale changes no null vector)."""
    rows = []
    for j in range(len(BASE)):
        row = [units.inputs[x][j] for x in names]
        lcm = 1
        for e in row:
            lcm = lcm * e.denominator // math.gcd(lcm, e.denominator)
        if any(row):
            rows.append([int(e * lcm) for e in row])
    return rows


def integer_null_space(rows, n):
    """A basis of the integer vectors v with rows . v = 0 (the lattice, not only its span): the
    columns of a unimodular U with rows . U in column echelon form, those past the pivots
    (Euclid's algorithm on columns, each step done to U as well)."""
    A = [list(r) for r in rows]
    U = [[int(i == j) for j in range(n)] for i in range(n)]  # U[col] is a column of U

    def combine(dst, src, q):  # column dst -= q * column src, in A and U
        for r in A:
            r[dst] -= q * r[src]
        U[dst] = [a - q * b for a, b in zip(U[dst], U[src])]

    def swap(i, j):
        for r in A:
            r[i], r[j] = r[j], r[i]
        U[i], U[j] = U[j], U[i]

    p = 0
    for r in range(len(A)):
        while True:
            live = [c for c in range(p, n) if A[r][c]]
            if len(live) <= 1:
                break
            c0 = min(live, key=lambda c: abs(A[r][c]))
            for c in live:
                if c != c0:
                    combine(c, c0, A[r][c] // A[r][c0])
        if live:
            swap(p, live[0])
            p += 1
    return [U[c] for c in range(p, n)]


def _norm(v):
    return (sum(abs(x) for x in v), sum(1 for x in v if x))


def _reduce(v, basis):
    """v plus an integer combination of ``basis`` that is no larger (L1 norm, then the number
    of inputs it uses), by greedy single steps."""
    improved = True
    while improved:
        improved = False
        for b in basis:
            for k in (1, -1):
                w = [x + k * y for x, y in zip(v, b)]
                if _norm(w) < _norm(v):
                    v, improved = w, True
    return v


def _positive(v):
    """v or -v, whichever has its first nonzero entry positive."""
    first = next((x for x in v if x), 1)
    return [-x for x in v] if first < 0 else list(v)


def pi_groups(units):
    """Buckingham Pi for ``units`` (a Units): (M, groups), M a dict input -> exponent whose
    monomial has the target's unit (None when no monomial of the inputs has it; {} when the
    target is dimensionless), groups a list of such dicts, a basis of the lattice of
    dimensionless monomials with integer exponents (small: each basis vector reduced against the
    others, smallest first; inputs with exponent 0 left out)."""
    names = list(units.inputs)
    n = len(names)
    basis = integer_null_space(_integer_rows(units, names), n)
    changed = True
    while changed:  # (adding a multiple of another basis vector keeps a lattice basis)
        changed = False
        for i in range(len(basis)):
            v = _reduce(basis[i], basis[:i] + basis[i + 1:])
            if v != basis[i]:
                basis[i], changed = v, True
    basis = sorted((_positive(v) for v in basis), key=_norm)
    # M: a rational solution of sum_i e_i dim_i = target, reduced against the groups
    rows = [[units.inputs[x][j] for x in names] + [units.target[j]] for j in range(len(BASE))]
    rref, pivots = _rref(rows, n)
    M = None
    if all(not row[n] for row in rref[len(pivots):]):
        v = [Fraction(0)] * n
        for r, p in enumerate(pivots):
            v[p] = rref[r][n]
        M = _reduce(v, basis)

    def named(v):
        return {x: Fraction(e) for x, e in zip(names, v) if e}
    return (None if M is None else named(M)), [named(v) for v in basis]


def monomial(exponents):
    """The product of x^e over ``exponents`` (input -> nonzero exponent) as a tree: the positive
    powers over the negative ones; 1.0 when there are none (structure.monomial, any operator)."""
    return structure.monomial(list(exponents), list(exponents.values()))


def seeds(units, grammar):
    """The Buckingham Pi models: c*M*h(pi_1, .., pi_k) for the first PI_SEEDS small models and
    shapes h the grammar proposes over k inputs (grammar.small_programs, separable_shapes), each pi
    group's monomial put in place of one input; c*M alone when k = 0, c*h when the target is
    dimensionless, and h alone (the parameters carry the unit) when no monomial has the
    target's unit."""
    from ndvm.cosearch import grammar as gp
    M, groups = pi_groups(units)
    m = None if M is None else monomial(M)
    taken = set(grammar.inputs) | set(grammar.params)
    slots = []
    for i in range(len(groups)):
        name = f"pi{i}"
        while name in taken:
            name = "_" + name
        slots.append(name)
    if groups:
        g = replace(grammar, inputs=tuple(slots))
        hs = (gp.small_programs(g) + gp.separable_shapes(g))[:PI_SEEDS]
        table = {s: monomial(v) for s, v in zip(slots, groups)}
        hs = [substitute(h, table) for h in hs]
    else:
        hs = [grammar.params[0]]
    if m is None:
        return hs
    out = []
    for h in hs:
        used = _atoms(h)
        c = next((p for p in grammar.params if p not in used), None)
        factors = ([] if c is None else [c]) + ([] if M == {} else [m]) + [h]
        out.append(factors[0] if len(factors) == 1 else ["*"] + factors)
    return out


def _atoms(tree):
    if isinstance(tree, list):
        out = set()
        for t in tree:
            out |= _atoms(t)
        return out
    return {tree} if isinstance(tree, str) else set()


def units_of(task, grammar):
    """The Dimensions a search of ``task`` over ``grammar`` uses, or None when the task has no
    units (then nothing changes)."""
    units = getattr(task, "data_units", None)
    return None if units is None else Dimensions(units, grammar)
