"""Export of search programs to SymPy expressions and LaTeX.

Arithmetic programs (and ``let``) translate; a ``loop`` has no closed form and raises ValueError.
Fitted parameters are substituted when given, else they stay symbols.
"""
import math
import re

__all__ = ["to_sympy", "to_latex", "latex", "NOT_EXPORTED"]

# The core's numeric primitives (ndvm._core.primitives()) that have no SymPy form here
# (tests/test_primitives.py checks that _table and this set cover the core's list).
NOT_EXPORTED = frozenset({
    "=", "<", ">", "<=", ">=",        # booleans: only `if` would use them, and it is not exported
    "round", "truncate", "remainder",  # no SymPy function rounds half to even or truncates
})


# The language's named constants, which no program binds (ndvm.parse: not free names)
_CONSTANTS = {"pi": lambda sp: sp.pi}


def _table(sp):
    return {
        "+": lambda *a: sp.Add(*a), "*": lambda *a: sp.Mul(*a),
        "-": lambda a, *b: -a if not b else a - sp.Add(*b),
        "/": lambda a, *b: 1 / a if not b else a / sp.Mul(*b),
        "sin": sp.sin, "cos": sp.cos, "tan": sp.tan, "exp": sp.exp, "log": sp.log,
        "sqrt": sp.sqrt, "tanh": sp.tanh, "abs": sp.Abs,
        "atan": lambda a, *b: sp.atan2(a, *b) if b else sp.atan(a),
        "square": lambda a: a ** 2, "pow": lambda a, b: a ** b, "expt": lambda a, b: a ** b,
        "min": sp.Min, "max": sp.Max, "floor": sp.floor, "ceiling": sp.ceiling,
        "modulo": sp.Mod,  # floored: the sign of the divisor, as R7RS modulo
    }


def to_sympy(tree, params=None, digits=None):
    """The SymPy expression of a program tree; ``params`` (name -> value) are substituted,
    rounded to ``digits`` significant digits when given."""
    import sympy as sp
    ops = _table(sp)

    def num(v):
        v = float(v)
        if digits is not None and v != 0 and math.isfinite(v):
            v = float(f"{v:.{digits}g}")
        return sp.Integer(int(v)) if v.is_integer() and abs(v) < 2**53 else sp.Float(v)

    def walk(t, env):
        if isinstance(t, bool):
            raise ValueError("booleans have no SymPy form here")
        if isinstance(t, (int, float)):
            return num(t)
        if isinstance(t, str):
            if t in env:
                return env[t]
            if params and t in params:
                return num(params[t])
            if t in _CONSTANTS:  # (the language's own: not a free name of the program)
                return _CONSTANTS[t](sp)
            return sp.Symbol(t)
        head = t[0]
        if head in ("let", "let*") and not isinstance(t[1], list):
            raise ValueError(f"a named {head} (a loop) has no SymPy translation")
        if head in ("let", "let*"):
            inner = dict(env)
            for name, expr in t[1]:
                inner[name] = walk(expr, inner if head == "let*" else env)
            return walk(t[-1], inner)
        if head not in ops:
            raise ValueError(f"{head!r} has no SymPy translation (loops and data forms have no "
                             "closed form)")
        return ops[head](*[walk(a, env) for a in t[1:]])

    return walk(tree, {})


def to_latex(tree, params=None, digits=6):
    """LaTeX of a program tree (parameters substituted, ``digits`` significant digits)."""
    return latex(to_sympy(tree, params, digits=digits))


_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9]*(_[A-Za-z0-9]+)?\Z")  # (SymPy's own: x, x_1, alpha)
_TEX_SPECIAL = {c: "\\" + c for c in "&%$#_{}"}
_TEX_SPECIAL.update({"\\": r"\textbackslash{}", "~": r"\textasciitilde{}",
                     "^": r"\textasciicircum{}"})


def latex(expr):
    r"""LaTeX of a SymPy expression whose symbols may be any column names: a name SymPy would
    not typeset as one symbol (``mass kg`` read as the product mass k g, ``v-rel``) is set
    upright as text, \text{mass kg}."""
    import sympy as sp
    names = {s: r"\text{" + "".join(_TEX_SPECIAL.get(c, c) for c in s.name) + "}"
             for s in expr.free_symbols if isinstance(s, sp.Symbol) and not _PLAIN.match(s.name)}
    return sp.latex(expr, symbol_names=names) if names else sp.latex(expr)
