"""The split representation in eager Python: structure as Python data, numbers as torch lanes.

Structure never touches torch: symbols are Python ints (interned ids), booleans that agree in all
lanes are Python bools, pairs/closures/nil are Python objects (their address is their identity).
A number is a Python float when it is the same in every lane and depends on no parameter (literals,
loop counters), else a torch tensor of shape [L]; a vector/matrix is one tensor [n] / [r, c], with a
leading lane dimension [L, ...] when it varies. torch autograd gives gradients.

Divergent lanes: a test whose lanes disagree stops the run and the driver re-runs each side on its
own lanes (see ndvm.baselines._interp), so results and gradients are exact per lane.
"""
import math
import operator

import numpy as np
import torch

from ndvm.baselines._interp import BaselineEvaluator, Closure, Diverge
from ndvm._core import Dotted
from ndvm.errors import EvalError

__all__ = ["SplitEvaluator", "SplitModel"]

Tensor = torch.Tensor


class Pair:
    __slots__ = ("car", "cdr")

    def __init__(self, car, cdr):
        self.car = car
        self.cdr = cdr


class Prim:
    """A primitive procedure: scheme name, the model method, arity bounds (hi -1: variadic)."""

    __slots__ = ("name", "fn", "lo", "hi")

    def __init__(self, name, fn, lo, hi):
        self.name = name
        self.fn = fn
        self.lo = lo
        self.hi = hi


class Arr:
    """A vector (``t`` [..., n]) or matrix (``t`` [..., r, c]); a leading lane axis iff varying."""

    __slots__ = ("t", "mat")

    def __init__(self, t, mat):
        self.t = t
        self.mat = mat

    @property
    def varying(self):
        return self.t.dim() == (3 if self.mat else 2)

    @property
    def shape(self):
        return tuple(self.t.shape[-2:]) if self.mat else tuple(self.t.shape[-1:])

    @property
    def size(self):
        return math.prod(self.shape)


class _Marker:
    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


NIL = _Marker("()")
UNSPEC = _Marker("#<unspecified>")

_symbols = {}
_symbol_names = []


def intern(name):
    """The id of a symbol name (shared by all runs)."""
    i = _symbols.get(name)
    if i is None:
        i = _symbols[name] = len(_symbol_names)
        _symbol_names.append(str(name))
    return i


class _Pow(torch.autograd.Function):
    """pow with ndvm's partials: d/da 0 where b == 0; d/db 0 where a <= 0 (never NaN)."""

    @staticmethod
    def forward(ctx, a, b):
        y = torch.pow(a, b)
        ctx.save_for_backward(a, b, y)
        return y

    @staticmethod
    def backward(ctx, g):
        a, b, y = ctx.saved_tensors
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = _sum_to(g * torch.where(b == 0, 0.0, b * torch.pow(a, b - 1)), a.shape)
        if ctx.needs_input_grad[1]:
            gb = _sum_to(g * torch.where(a > 0, y * torch.log(a), 0.0), b.shape)
        return ga, gb


def _sum_to(g, shape):
    return g.sum() if len(shape) == 0 and g.dim() else g


def _ufloat(f):
    """A uniform (Python float) kernel with IEEE results: numpy instead of math's exceptions."""
    return lambda *a: float(f(*(np.float64(x) for x in a)))


def _mod(a, b):
    r = np.fmod(a, b)
    if r != 0 and ((r < 0) != (b < 0)):
        r += b
    return r


def _tmod(a, b):
    r = torch.fmod(a, b)
    return torch.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


# name: (uniform kernel, lane kernel)
_UNARY = {
    "neg": (operator.neg, torch.neg),
    "abs": (abs, torch.abs),
    "sqrt": (_ufloat(np.sqrt), torch.sqrt),
    "exp": (_ufloat(np.exp), torch.exp),
    "log": (_ufloat(np.log), torch.log),
    "sin": (_ufloat(np.sin), torch.sin),
    "cos": (_ufloat(np.cos), torch.cos),
    "tan": (_ufloat(np.tan), torch.tan),
    "tanh": (_ufloat(np.tanh), torch.tanh),
    "atan": (_ufloat(np.arctan), torch.atan),
    "floor": (_ufloat(np.floor), torch.floor),
    "ceiling": (_ufloat(np.ceil), torch.ceil),
    "round": (_ufloat(np.round), torch.round),
    "truncate": (_ufloat(np.trunc), torch.trunc),
}
_BINARY = {
    "+": (operator.add, operator.add),
    "-": (operator.sub, operator.sub),
    "*": (operator.mul, operator.mul),
    "/": (_ufloat(np.divide), operator.truediv),
    "pow": (_ufloat(np.power), _Pow.apply),
    "atan2": (_ufloat(np.arctan2), torch.atan2),
    "modulo": (_ufloat(_mod), _tmod),
    "remainder": (_ufloat(np.fmod), torch.fmod),
}
_CMP = {"=": operator.eq, "<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}
# unary functions that also apply elementwise to vectors and matrices
_ELEMENTWISE = {"neg", "sqrt", "exp", "log", "sin", "cos", "tanh"}

# scheme name: (method, min args, max args or -1)
_PRIM_TABLE = {
    "+": ("p_add", 0, -1), "-": ("p_sub", 1, -1), "*": ("p_mul", 0, -1), "/": ("p_div", 1, -1),
    "=": ("p_cmp", 1, -1), "<": ("p_cmp", 1, -1), ">": ("p_cmp", 1, -1),
    "<=": ("p_cmp", 1, -1), ">=": ("p_cmp", 1, -1),
    "min": ("p_min", 1, -1), "max": ("p_max", 1, -1),
    "abs": ("p_unary", 1, 1), "sqrt": ("p_unary", 1, 1), "exp": ("p_unary", 1, 1),
    "log": ("p_unary", 1, 1), "sin": ("p_unary", 1, 1), "cos": ("p_unary", 1, 1),
    "tan": ("p_unary", 1, 1), "tanh": ("p_unary", 1, 1), "atan": ("p_atan", 1, 2),
    "pow": ("p_pow", 2, 2), "expt": ("p_pow", 2, 2), "square": ("p_square", 1, 1),
    "floor": ("p_unary", 1, 1), "ceiling": ("p_unary", 1, 1), "round": ("p_unary", 1, 1),
    "truncate": ("p_unary", 1, 1), "modulo": ("p_binary", 2, 2), "remainder": ("p_binary", 2, 2),
    "cons": ("p_cons", 2, 2), "car": ("p_car", 1, 1), "cdr": ("p_cdr", 1, 1),
    "cadr": ("p_cadr", 1, 1), "cddr": ("p_cddr", 1, 1), "caar": ("p_caar", 1, 1),
    "caddr": ("p_caddr", 1, 1), "list": ("p_list", 0, -1), "null?": ("p_nullp", 1, 1),
    "pair?": ("p_pairp", 1, 1), "length": ("p_length", 1, 1), "list-ref": ("p_list_ref", 2, 2),
    "append": ("p_append", 0, -1), "reverse": ("p_reverse", 1, 1),
    "number?": ("p_numberp", 1, 1), "boolean?": ("p_booleanp", 1, 1),
    "symbol?": ("p_symbolp", 1, 1), "procedure?": ("p_procedurep", 1, 1),
    "zero?": ("p_sign", 1, 1), "positive?": ("p_sign", 1, 1), "negative?": ("p_sign", 1, 1),
    "not": ("p_not", 1, 1), "eq?": ("p_eqv", 2, 2), "eqv?": ("p_eqv", 2, 2),
    "equal?": ("p_equal", 2, 2), "vector?": ("p_vectorp", 1, 1), "matrix?": ("p_matrixp", 1, 1),
    "vec": ("p_vec", 0, -1), "mat": ("p_mat", 1, -1), "ref": ("p_ref", 2, 3),
    "dot": ("p_dot", 2, 2), "cross": ("p_cross", 2, 2), "norm": ("p_norm", 1, 1),
    "normalize": ("p_normalize", 1, 1), "vsum": ("p_vsum", 1, 1), "vlen": ("p_vlen", 1, 1),
    "scale": ("p_scale", 2, 2), "matvec": ("p_matvec", 2, 2), "matmul": ("p_matmul", 2, 2),
    "transpose": ("p_transpose", 1, 1), "trace": ("p_trace", 1, 1), "outer": ("p_outer", 2, 2),
    "det": ("p_det", 1, 1), "logdet": ("p_logdet", 1, 1), "inv": ("p_inv", 1, 1),
    "solve": ("p_solve", 2, 2), "eye": ("p_eye", 1, 1), "zeros": ("p_zeros", 1, 2),
    "ones": ("p_ones", 1, 2),
}


def _plural(n):
    return f"{n} argument" + ("" if n == 1 else "s")


def check_arity(p, n):
    """EvalError unless a primitive accepts ``n`` arguments."""
    if n < p.lo or (p.hi >= 0 and n > p.hi):
        if p.hi < 0:
            want = "at least " + _plural(p.lo)
        elif p.lo == p.hi:
            want = _plural(p.lo)
        else:
            want = f"{p.lo} to {_plural(p.hi)}"
        raise EvalError(f"{p.name}: expects {want}, got {n}")


class SplitModel:
    """Values and primitives of the split representation, for one run over ``L`` lanes."""

    PRIMS = _PRIM_TABLE
    unspec = UNSPEC

    def __init__(self, L, dtype, compat):
        self.L = L
        self.dtype = dtype
        self.compat = compat == "reference"
        self.f32 = dtype == torch.float32

    # -- the interpreter's interface ---------------------------------------------------------
    def literal(self, x):
        return x if type(x) is bool else self.u(float(x))

    def datum(self, x):
        if isinstance(x, (list, Dotted)):
            tail = self.datum(x.tail) if type(x) is Dotted else NIL
            for e in reversed(x.items if type(x) is Dotted else x):
                tail = Pair(self.datum(e), tail)
            return tail
        if isinstance(x, str):
            return intern(x)
        return self.literal(x)

    def truth(self, v):
        if v is False:
            return False
        if type(v) is Tensor and v.dtype == torch.bool:
            if bool(v.all()):
                return True
            if not bool(v.any()):
                return False
            raise Diverge(v)
        return True

    def closure(self, clo):
        return clo

    def prim_value(self, name):
        meth, lo, hi = self.PRIMS[name]
        return Prim(name, getattr(self, meth), lo, hi)

    def procedure(self, f):
        if type(f) is Closure or type(f) is Prim:
            return f
        raise EvalError(f"cannot call {self.describe(f)}: not a procedure")

    def apply_prim(self, p, args):
        check_arity(p, len(args))
        return p.fn(p.name, args)

    def list(self, items):
        tail = NIL
        for e in reversed(items):
            tail = Pair(e, tail)
        return tail

    def input_number(self, x):
        return x if type(x) is Tensor else self.u(x)

    def input_const(self, arr, rows, cols):
        if rows == 0:
            return self.u(float(arr[0]))
        t = torch.tensor(arr, dtype=self.dtype)
        return Arr(t.reshape(rows, cols), True) if cols else Arr(t, False)

    def result(self, v):
        if not self.is_num(v):
            raise EvalError(f"the program's result must be a number, got {self.describe(v)}")
        return self.lanes(v)

    # -- helpers -----------------------------------------------------------------------------
    def u(self, x):
        """A uniform number, rounded to float32 when that is the run's dtype."""
        return float(np.float32(x)) if self.f32 else x

    def lanes(self, x):
        return x if type(x) is Tensor else torch.full((self.L,), x, dtype=self.dtype)

    def tens(self, x):
        return x if type(x) is Tensor else torch.tensor(x, dtype=self.dtype)

    @staticmethod
    def is_num(v):
        return type(v) is float or (type(v) is Tensor and v.dtype != torch.bool)

    @staticmethod
    def is_bool(v):
        return type(v) is bool or (type(v) is Tensor and v.dtype == torch.bool)

    def describe(self, v):
        if self.is_num(v):
            return "a number"
        if self.is_bool(v):
            return "a boolean"
        if type(v) is int:
            return f"the symbol {_symbol_names[v]}"
        if type(v) is Pair:
            return "a pair"
        if v is NIL:
            return "the empty list"
        if type(v) is Closure or type(v) is Prim:
            return "a procedure"
        if type(v) is Arr:
            if v.mat:
                return f"a {v.shape[0]}x{v.shape[1]} matrix"
            return f"a vector of length {v.shape[0]}"
        return "an unspecified value"

    def type_error(self, who, want, v, i=0):
        """The core's message: argument i + 1 named, except the first (i = 0 names none)."""
        return self.type_error_at(who, want, v, i or None)

    def type_error_at(self, who, want, v, at):
        """The core's message naming argument ``at`` + 1 (None: none)."""
        pos = "" if at is None else f" (argument {at + 1})"
        return EvalError(f"{who}: expected {want}{pos}, got {self.describe(v)}")

    def num(self, v, who, i=0):
        if not self.is_num(v):
            raise self.type_error(who, "a number", v, i)
        return v

    def arr(self, v, who, mat=None, i=0):
        if type(v) is not Arr or (mat is not None and v.mat != mat):
            want = {None: "a vector or a matrix", True: "a matrix", False: "a vector"}[mat]
            raise self.type_error(who, want, v, i)
        return v

    def square_mat(self, v, who):
        A = self.arr(v, who, True)
        if A.shape[0] != A.shape[1]:
            raise EvalError(f"{who}: expected a square matrix, got {self.describe(A)}")
        return A

    def index(self, v, who, bound, size=False):
        """A non-negative integer below ``bound``, the same in every lane."""
        what = "size" if size else "index"
        if not self.is_num(v):
            raise self.type_error(who, "a size" if size else "an index", v, 0 if size else 1)
        if type(v) is Tensor:
            raise EvalError(f"{who}: {what} must not depend on data or parameters (it must "
                            "be the same in every lane, however many there are)")
        return self.check_index(v, who, bound, size)

    @staticmethod
    def check_index(x, who, bound, size):
        what = "size" if size else "index"
        if not math.isfinite(x) or x != math.floor(x):
            raise EvalError(f"{who}: {what} must be an integer, got {x}")
        if x < 0 or x >= bound:
            extra = f" (0 to {bound - 1})" if size else f" for length {bound}"
            raise EvalError(f"{who}: {what} {x:g} out of range{extra}")
        return int(x)

    def scalar_out(self, t):
        """A reduction's result: a Python float when no lane axis is left."""
        return self.u(float(t)) if t.dim() == 0 else t

    def shape_error(self, who, a, b):
        return EvalError(f"{who}: shape mismatch between {self.describe(a)} and "
                         f"{self.describe(b)}")

    # -- numbers -----------------------------------------------------------------------------
    def unary(self, name, a, who):
        if self.compat and name in ("sqrt", "log"):
            if type(a) is float:
                return self.u(_UNARY[name][0](max(a, 1e-8) if a == a else a))
            return _UNARY[name][1](torch.clamp(a, min=1e-8))
        if type(a) is float:
            return self.u(_UNARY[name][0](a))
        return _UNARY[name][1](a)

    def binary(self, name, a, b):
        if type(a) is float and type(b) is float:
            return self.u(_BINARY[name][0](a, b))
        if name in ("+", "-", "*", "/"):
            return _BINARY[name][1](a, b)
        return _BINARY[name][1](self.tens(a), self.tens(b))

    def arith(self, name, a, b, ia=None, ib=1):
        """a (name) b elementwise; ia, ib: the form's argument indices of a and b, for an
        error (None: not an argument, the value so far), as the core names them."""
        an, bn = self.is_num(a), self.is_num(b)
        if an and bn:
            return self.binary(name, a, b)
        aa, ba = type(a) is Arr, type(b) is Arr
        for v, ok, i in ((a, an or aa, ia), (b, bn or ba, ib)):
            if not ok:
                raise self.type_error_at(name, "a number, vector or matrix", v, i)
        if aa and ba:
            if a.mat != b.mat or a.shape != b.shape:
                raise self.shape_error(name, a, b)
            return Arr(_BINARY[name][1](a.t, b.t), a.mat)
        shape = a if aa else b
        x = a.t if aa else self.broadcast_scalar(a, shape)
        y = b.t if ba else self.broadcast_scalar(b, shape)
        return Arr(_BINARY[name][1](x, y), shape.mat)

    def broadcast_scalar(self, s, shape):
        if type(s) is float:
            return s
        return s.reshape((self.L, 1, 1) if shape.mat else (self.L, 1))

    def fold(self, name, args, unit):
        if not args:
            return self.u(unit)
        acc = args[0]
        if len(args) == 1 and not (self.is_num(acc) or type(acc) is Arr):
            raise self.type_error(name, "a number, vector or matrix", acc)
        for i, b in enumerate(args[1:], 1):
            acc = self.arith(name, acc, b, 0 if i == 1 else None, i)
        return acc

    def p_add(self, name, a):
        return self.fold("+", a, 0.0)

    def p_mul(self, name, a):
        return self.fold("*", a, 1.0)

    def p_sub(self, name, a):
        if len(a) == 1:
            return self.p_unary("neg", a)
        return self.fold("-", a, 0.0)

    def p_div(self, name, a):
        if len(a) == 1:
            return self.arith("/", 1.0, a[0], None, 0)
        return self.fold("/", a, 1.0)

    def p_unary(self, name, a):
        x = a[0]
        if type(x) is Arr and name in _ELEMENTWISE:
            return Arr(self.unary(name, x.t, name), x.mat)
        who = "-" if name == "neg" else name
        return self.unary(name, self.num(x, who), who)

    def p_square(self, name, a):
        return self.arith("*", a[0], a[0])

    def p_atan(self, name, a):
        if len(a) == 2:
            return self.binary("atan2", self.num(a[0], name), self.num(a[1], name, 1))
        return self.unary("atan", self.num(a[0], name), name)

    def p_pow(self, name, a):
        return self.binary("pow", self.num(a[0], name), self.num(a[1], name, 1))

    def p_binary(self, name, a):
        return self.binary(name, self.num(a[0], name), self.num(a[1], name, 1))

    def compare(self, op, a, b):
        r = op(a, b)
        return bool(r) if type(r) is not Tensor else r

    @staticmethod
    def band(x, y):
        if x is False or y is False:
            return False
        if x is True:
            return y
        if y is True:
            return x
        return x & y

    def p_cmp(self, name, a):
        for i, x in enumerate(a):
            self.num(x, name, i)
        r = True
        for x, y in zip(a, a[1:]):
            r = self.band(r, self.compare(_CMP[name], x, y))
        return r

    def minmax(self, name, a):
        for i, x in enumerate(a):
            self.num(x, name, i)
        if all(type(x) is float for x in a):
            if any(x != x for x in a):
                return math.nan
            return min(a) if name == "min" else max(a)
        s = torch.stack([self.lanes(x) for x in a])
        return s.amin(0) if name == "min" else s.amax(0)

    def p_min(self, name, a):
        return self.minmax(name, a)

    def p_max(self, name, a):
        return self.minmax(name, a)

    def p_sign(self, name, a):
        op = {"zero?": operator.eq, "positive?": operator.gt, "negative?": operator.lt}[name]
        return self.compare(op, self.num(a[0], name), 0.0)

    # -- lists and predicates ----------------------------------------------------------------
    def pair(self, v, who):
        if type(v) is not Pair:
            raise self.type_error(who, "a pair", v)
        return v

    def p_cons(self, name, a):
        return Pair(a[0], a[1])

    def p_car(self, name, a):
        return self.pair(a[0], name).car

    def p_cdr(self, name, a):
        return self.pair(a[0], name).cdr

    def p_cadr(self, name, a):
        return self.pair(self.pair(a[0], name).cdr, name).car

    def p_cddr(self, name, a):
        return self.pair(self.pair(a[0], name).cdr, name).cdr

    def p_caar(self, name, a):
        return self.pair(self.pair(a[0], name).car, name).car

    def p_caddr(self, name, a):
        return self.pair(self.pair(self.pair(a[0], name).cdr, name).cdr, name).car

    def p_list(self, name, a):
        return self.list(a)

    def items(self, v, who):
        out = []
        x = v
        while type(x) is Pair:
            out.append(x.car)
            x = x.cdr
        if x is not NIL:
            raise self.type_error(who, "a proper list", v)
        return out

    def p_nullp(self, name, a):
        return a[0] is NIL

    def p_pairp(self, name, a):
        return type(a[0]) is Pair

    def p_length(self, name, a):
        return float(len(self.items(a[0], name)))

    def p_list_ref(self, name, a):
        xs = self.items(a[0], name)
        return xs[self.index(a[1], name, len(xs))]

    def p_append(self, name, a):
        if not a:
            return NIL
        tail = a[-1]
        for x in reversed(a[:-1]):
            for e in reversed(self.items(x, name)):
                tail = Pair(e, tail)
        return tail

    def p_reverse(self, name, a):
        tail = NIL
        for e in self.items(a[0], name):
            tail = Pair(e, tail)
        return tail

    def p_numberp(self, name, a):
        return self.is_num(a[0])

    def p_booleanp(self, name, a):
        return self.is_bool(a[0])

    def p_symbolp(self, name, a):
        return type(a[0]) is int

    def p_procedurep(self, name, a):
        return type(a[0]) is Closure or type(a[0]) is Prim

    def p_vectorp(self, name, a):
        return type(a[0]) is Arr and not a[0].mat

    def p_matrixp(self, name, a):
        return type(a[0]) is Arr and a[0].mat

    def p_not(self, name, a):
        x = a[0]
        if type(x) is bool:
            return not x
        if type(x) is Tensor and x.dtype == torch.bool:
            return ~x
        return False

    def eqv(self, a, b):
        if self.is_num(a) and self.is_num(b):
            return self.compare(operator.eq, a, b)
        if self.is_bool(a) and self.is_bool(b):
            if type(a) is bool and type(b) is bool:
                return a == b
            return self.tens(a) == self.tens(b)
        if type(a) is int or type(b) is int:
            return type(a) is type(b) and a == b
        return a is b

    def p_eqv(self, name, a):
        return self.eqv(a[0], a[1])

    def equal(self, a, b):
        if type(a) is Pair and type(b) is Pair:
            r = True
            while type(a) is Pair and type(b) is Pair:
                r = self.band(r, self.equal(a.car, b.car))
                if r is False:
                    return r
                a, b = a.cdr, b.cdr
            return self.band(r, self.equal(a, b))
        if type(a) is Arr and type(b) is Arr:
            if a.mat != b.mat or a.shape != b.shape:
                return False
            eq = a.t == b.t
            r = (eq.flatten(-2) if a.mat else eq).all(-1)
            return bool(r) if r.dim() == 0 else r
        return self.eqv(a, b)

    def p_equal(self, name, a):
        return self.equal(a[0], a[1])

    # -- vectors and matrices ----------------------------------------------------------------
    def p_vec(self, name, a):
        if a and type(a[0]) is Arr:
            return self.p_mat("vec", a)
        for i, x in enumerate(a):
            if not self.is_num(x):
                raise self.type_error("vec", "numbers (or vectors, for the rows of a matrix)", x, i)
        if all(type(x) is float for x in a):
            return Arr(torch.tensor(a, dtype=self.dtype), False)
        return Arr(torch.stack([self.lanes(x) for x in a], -1), False)

    def p_mat(self, name, a):
        for i, r in enumerate(a):
            self.arr(r, name, False, i)
            if r.shape != a[0].shape:
                raise EvalError(f"{name}: rows of different lengths ({a[0].shape[0]} and "
                                f"{r.shape[0]})")
        if any(r.varying for r in a):
            rows = [r.t if r.varying else r.t.expand(self.L, -1) for r in a]
        else:
            rows = [r.t for r in a]
        return Arr(torch.stack(rows, -2), True)

    def p_ref(self, name, a):
        x = a[0]
        if type(x) is not Arr:
            raise self.type_error("ref", "a vector or a matrix", x)
        if not x.mat:
            if len(a) != 2:
                raise EvalError(f"ref: a vector takes one index, got {len(a) - 1}")
            return self.scalar_out(x.t[..., self.index(a[1], "ref", x.shape[0])])
        r = self.index(a[1], "ref", x.shape[0])
        if len(a) == 2:
            return Arr(x.t[..., r, :], False)
        return self.scalar_out(x.t[..., r, self.index(a[2], "ref", x.shape[1])])

    def p_dot(self, name, a):
        u, v = self.arr(a[0], name, False), self.arr(a[1], name, False, 1)
        if u.shape != v.shape:
            raise self.shape_error(name, u, v)
        return self.scalar_out((u.t * v.t).sum(-1))

    def p_cross(self, name, a):
        u, v = self.arr(a[0], name, False), self.arr(a[1], name, False, 1)
        if u.shape != (3,) or v.shape != (3,):
            raise EvalError(f"cross: expects two vectors of length 3, got lengths "
                            f"{u.shape[0]} and {v.shape[0]}")
        x, y = u.t, v.t
        if x.dim() != y.dim():
            x, y = torch.broadcast_tensors(x, y)
        return Arr(torch.linalg.cross(x, y, dim=-1), False)

    def self_dot(self, v):
        t = v.t.flatten(-2) if v.mat else v.t
        return self.scalar_out((t * t).sum(-1))

    def p_norm(self, name, a):
        return self.unary("sqrt", self.self_dot(self.arr(a[0], name)), name)

    def p_normalize(self, name, a):
        v = self.arr(a[0], name, False)
        return self.arith("/", v, self.unary("sqrt", self.self_dot(v), name))

    def p_vsum(self, name, a):
        v = self.arr(a[0], name)
        return self.scalar_out(v.t.flatten(-2).sum(-1) if v.mat else v.t.sum(-1))

    def p_vlen(self, name, a):
        return float(self.arr(a[0], name).shape[0])

    def p_scale(self, name, a):
        return self.arith("*", self.num(a[0], name), self.arr(a[1], name, None, 1))

    def p_matvec(self, name, a):
        M, v = self.arr(a[0], name, True), self.arr(a[1], name, False, 1)
        if M.shape[1] != v.shape[0]:
            raise self.shape_error(name, M, v)
        return Arr((M.t @ v.t.unsqueeze(-1)).squeeze(-1), False)

    def p_matmul(self, name, a):
        A = self.arr(a[0], name, True)
        if type(a[1]) is Arr and not a[1].mat:
            return self.p_matvec(name, a)
        B = self.arr(a[1], name, True, 1)
        if A.shape[1] != B.shape[0]:
            raise self.shape_error(name, A, B)
        return Arr(A.t @ B.t, True)

    def p_transpose(self, name, a):
        x = self.arr(a[0], name)
        return x if not x.mat else Arr(x.t.transpose(-1, -2), True)

    def p_trace(self, name, a):
        A = self.square_mat(a[0], name)
        return self.scalar_out(A.t.diagonal(dim1=-2, dim2=-1).sum(-1))

    def p_outer(self, name, a):
        u, v = self.arr(a[0], name, False), self.arr(a[1], name, False, 1)
        return Arr(u.t.unsqueeze(-1) * v.t.unsqueeze(-2), True)

    def p_det(self, name, a):
        return self.scalar_out(torch.linalg.det(self.square_mat(a[0], name).t))

    def p_logdet(self, name, a):
        # (as the core's: log|det| from the factorization, NaN for a negative determinant)
        sign, log_abs = torch.linalg.slogdet(self.square_mat(a[0], name).t)
        return self.scalar_out(torch.where(sign < 0, torch.nan, log_abs))

    def p_inv(self, name, a):
        return Arr(torch.linalg.inv(self.square_mat(a[0], name).t), True)

    def p_solve(self, name, a):
        A = self.square_mat(a[0], name)
        B = self.arr(a[1], name, None, 1)
        if B.shape[0] != A.shape[0]:
            raise self.shape_error(name, A, B)
        b = B.t if B.mat else B.t.unsqueeze(-1)
        At = A.t
        if At.dim() != b.dim():
            lead = torch.broadcast_shapes(At.shape[:-2], b.shape[:-2])
            At = At.expand(*lead, *At.shape[-2:])
            b = b.expand(*lead, *b.shape[-2:])
        x = torch.linalg.solve(At, b)
        return Arr(x if B.mat else x.squeeze(-1), B.mat)

    def p_eye(self, name, a):
        n = self.index(a[0], name, 65536, True)
        return Arr(torch.eye(n, dtype=self.dtype), True)

    def filled(self, name, a, fill):
        r = self.index(a[0], name, 65536, True)
        if len(a) == 1:
            return Arr(torch.full((r,), fill, dtype=self.dtype), False)
        c = self.index(a[1], name, 1 << 24, True)
        return Arr(torch.full((r, c), fill, dtype=self.dtype), True)

    def p_zeros(self, name, a):
        return self.filled(name, a, 0.0)

    def p_ones(self, name, a):
        return self.filled(name, a, 1.0)


class SplitEvaluator(BaselineEvaluator):
    """The split-representation eager baseline (structure in Python, numbers as torch lanes)."""

    model = SplitModel
    name = "split"
