"""The tagged representation the paper starts from: every runtime value is a small tagged tensor.

A value is a tensor [L, K + 3]: a one-hot tag over K kinds (number, boolean, symbol, nil, pair,
closure, primitive, vector, matrix, unspecified) followed by three payload slots: the number (or
0/1, symbol id, heap/closure/primitive address) and, for arrays, rows and columns. Literals,
symbols and addresses are broadcast to every lane like any other value. The heap holds tensors
(a pair's car and cdr, an array's [L, ...] elements); reading a tag or an address reads the tensor
(a host synchronisation in eager mode). torch autograd gives gradients through the boxing.

The numeric kernels are the split baseline's (ndvm.baselines.split), called on unboxed payloads,
so the difference between the two baselines is the representation alone. Divergent lanes are
handled as in split: the driver re-runs each side of a mixed test on its own lanes.
"""
import torch

from ndvm.baselines._interp import BaselineEvaluator, Closure
from ndvm.baselines.split import (
    NIL, UNSPEC, Arr, Pair, Prim, SplitModel, check_arity, intern,
)
from ndvm._core import Dotted
from ndvm.errors import EvalError

__all__ = ["TaggedEvaluator", "TaggedModel"]

NUM, BOOL, SYM, NILT, PAIR, CLOS, PRIM, VEC, MAT, UNSP = range(10)
K = 10
_TAG_NAMES = ["a number", "a boolean", "a symbol", "the empty list", "a pair", "a procedure",
              "a procedure", "a vector", "a matrix", "an unspecified value"]

# primitives the tagged model implements over its own heap; the rest are numeric kernels
_STRUCTURAL = {
    "cons", "car", "cdr", "cadr", "cddr", "caar", "caddr", "list", "null?", "pair?", "length",
    "list-ref", "append", "reverse", "number?", "boolean?", "symbol?", "procedure?", "vector?",
    "matrix?", "not", "eq?", "eqv?", "equal?",
}


class _Kernels(SplitModel):
    """The split kernels; in the tagged model every number is a lane tensor, even an index."""

    def index(self, v, who, bound, size=False):
        if not self.is_num(v):
            raise self.type_error(who, "a size" if size else "an index", v, 0 if size else 1)
        x = float(v[0])
        if self.L > 1 and not bool((v == x).all()):
            raise EvalError(f"{who}: {'size' if size else 'index'} must not depend on data or "
                            "parameters (it must be the same in every lane, however many there "
                            "are)")
        return self.check_index(x, who, bound, size)


class TaggedModel:
    """Values and primitives of the tagged representation, for one run over ``L`` lanes."""

    PRIMS = SplitModel.PRIMS

    def __init__(self, L, dtype, compat):
        self.L = L
        self.dtype = dtype
        self.k = _Kernels(L, dtype, compat)
        self.heap = []
        self.procs = []
        eye = torch.eye(K, dtype=dtype)
        self.tag_rows = [eye[t].expand(L, K) for t in range(K)]
        self.pad = torch.zeros(L, 2, dtype=dtype)
        self.literals = {}
        self.true = self.box(BOOL, 1.0)
        self.false = self.box(BOOL, 0.0)
        self.unspec = self.box(UNSP, 0.0)
        self.nil = self.box(NILT, 0.0)

    # -- boxing ------------------------------------------------------------------------------
    def box(self, tag, p0, p1=None, p2=None):
        """A tagged value: p0 a lane tensor [L] or a number broadcast to every lane."""
        if type(p0) is not torch.Tensor:
            p0 = torch.full((self.L,), float(p0), dtype=self.dtype)
        rest = self.pad if p1 is None else torch.tensor(
            [[float(p1), float(p2)]], dtype=self.dtype).expand(self.L, 2)
        return torch.cat([self.tag_rows[tag], p0.reshape(self.L, 1), rest], 1)

    @staticmethod
    def tag(v):
        return int(v[0, :K].argmax())

    @staticmethod
    def addr(v):
        return int(v[0, K])

    def alloc(self, item):
        self.heap.append(item)
        return len(self.heap) - 1

    def decode(self, v):
        """A tagged value as the split kernels see it (payload tensors, heap arrays)."""
        t = self.tag(v)
        if t == NUM:
            return v[:, K]
        if t == BOOL:
            return v[:, K] != 0
        if t == VEC or t == MAT:
            return Arr(self.heap[self.addr(v)], t == MAT)
        if t == SYM:
            return self.addr(v)
        if t == PAIR:
            return Pair(None, None)
        if t == CLOS or t == PRIM:
            return self.procs[self.addr(v)]
        return NIL if t == NILT else UNSPEC

    def encode(self, x):
        """A kernel's result (float, lane tensor, bool, Arr, symbol id) as a tagged value."""
        if type(x) is float:
            return self.box(NUM, x)
        if type(x) is bool:
            return self.true if x else self.false
        if type(x) is torch.Tensor:
            if x.dtype == torch.bool:
                return self.box(BOOL, x.to(self.dtype))
            return self.box(NUM, x)
        if type(x) is Arr:
            t = x.t if x.varying else x.t.expand(self.L, *x.t.shape)
            shape = x.shape
            a = self.alloc(t)
            return self.box(MAT, a, *shape) if x.mat else self.box(VEC, a, shape[0], 0)
        if type(x) is int:
            return self.box(SYM, x)
        raise EvalError(f"internal: cannot box {x!r}")

    def describe(self, v):
        t = self.tag(v)
        if t == VEC or t == MAT:
            return self.k.describe(self.decode(v))
        return _TAG_NAMES[t]

    # -- the interpreter's interface ---------------------------------------------------------
    def literal(self, x):
        if type(x) is bool:
            return self.true if x else self.false
        v = self.literals.get(x)
        if v is None:
            v = self.literals[x] = self.box(NUM, self.k.u(float(x)))
        return v

    def datum(self, x):
        if isinstance(x, (list, Dotted)):
            tail = self.datum(x.tail) if type(x) is Dotted else self.nil
            for e in reversed(x.items if type(x) is Dotted else x):
                tail = self.cons(self.datum(e), tail)
            return tail
        if isinstance(x, str):
            return self.box(SYM, intern(x))
        return self.literal(x)

    def truth(self, v):
        if self.tag(v) != BOOL:
            return True
        return self.k.truth(v[:, K] != 0)

    def closure(self, clo):
        self.procs.append(clo)
        return self.box(CLOS, len(self.procs) - 1)

    def prim_value(self, name):
        meth, lo, hi = self.PRIMS[name]
        if name in _STRUCTURAL:
            fn = getattr(self, "s_" + meth[2:])
        else:
            kernel = getattr(self.k, meth)

            def fn(name, args, kernel=kernel):
                return self.encode(kernel(name, [self.decode(a) for a in args]))
        self.procs.append(Prim(name, fn, lo, hi))
        return self.box(PRIM, len(self.procs) - 1)

    def procedure(self, f):
        t = self.tag(f)
        if t == CLOS or t == PRIM:
            return self.procs[self.addr(f)]
        raise EvalError(f"cannot call {self.describe(f)}: not a procedure")

    def apply_prim(self, p, args):
        check_arity(p, len(args))
        return p.fn(p.name, args)

    def list(self, items):
        tail = self.nil
        for e in reversed(items):
            tail = self.cons(e, tail)
        return tail

    def input_number(self, x):
        return self.box(NUM, x if type(x) is torch.Tensor else self.k.u(x))

    def input_const(self, arr, rows, cols):
        return self.encode(self.k.input_const(arr, rows, cols))

    def result(self, v):
        if self.tag(v) != NUM:
            raise EvalError(f"the program's result must be a number, got {self.describe(v)}")
        return v[:, K]

    # -- structural primitives over the tensor heap ------------------------------------------
    def cons(self, a, d):
        return self.box(PAIR, self.alloc((a, d)))

    def cell(self, v, who):
        if self.tag(v) != PAIR:
            raise self.k.type_error(who, "a pair", self.decode(v))
        return self.heap[self.addr(v)]

    def items(self, v, who):
        out = []
        x = v
        while self.tag(x) == PAIR:
            car, x = self.heap[self.addr(x)]
            out.append(car)
        if self.tag(x) != NILT:
            raise self.k.type_error(who, "a proper list", self.decode(v))
        return out

    def s_cons(self, name, a):
        return self.cons(a[0], a[1])

    def s_car(self, name, a):
        return self.cell(a[0], name)[0]

    def s_cdr(self, name, a):
        return self.cell(a[0], name)[1]

    def s_cadr(self, name, a):
        return self.cell(self.cell(a[0], name)[1], name)[0]

    def s_cddr(self, name, a):
        return self.cell(self.cell(a[0], name)[1], name)[1]

    def s_caar(self, name, a):
        return self.cell(self.cell(a[0], name)[0], name)[0]

    def s_caddr(self, name, a):
        return self.cell(self.cell(self.cell(a[0], name)[1], name)[1], name)[0]

    def s_list(self, name, a):
        return self.list(a)

    def s_nullp(self, name, a):
        return self.encode(self.tag(a[0]) == NILT)

    def s_pairp(self, name, a):
        return self.encode(self.tag(a[0]) == PAIR)

    def s_length(self, name, a):
        return self.encode(float(len(self.items(a[0], name))))

    def s_list_ref(self, name, a):
        xs = self.items(a[0], name)
        return xs[self.k.index(self.decode(a[1]), name, len(xs))]

    def s_append(self, name, a):
        if not a:
            return self.nil
        tail = a[-1]
        for x in reversed(a[:-1]):
            for e in reversed(self.items(x, name)):
                tail = self.cons(e, tail)
        return tail

    def s_reverse(self, name, a):
        tail = self.nil
        for e in self.items(a[0], name):
            tail = self.cons(e, tail)
        return tail

    def s_numberp(self, name, a):
        return self.encode(self.tag(a[0]) == NUM)

    def s_booleanp(self, name, a):
        return self.encode(self.tag(a[0]) == BOOL)

    def s_symbolp(self, name, a):
        return self.encode(self.tag(a[0]) == SYM)

    def s_procedurep(self, name, a):
        return self.encode(self.tag(a[0]) in (CLOS, PRIM))

    def s_vectorp(self, name, a):
        return self.encode(self.tag(a[0]) == VEC)

    def s_matrixp(self, name, a):
        return self.encode(self.tag(a[0]) == MAT)

    def s_not(self, name, a):
        if self.tag(a[0]) != BOOL:
            return self.false
        return self.box(BOOL, (a[0][:, K] == 0).to(self.dtype))

    def eqv(self, a, b):
        ta, tb = self.tag(a), self.tag(b)
        if ta != tb:
            return self.false
        if ta == NUM or ta == BOOL:
            return self.box(BOOL, (a[:, K] == b[:, K]).to(self.dtype))
        if ta == NILT or ta == UNSP:
            return self.true
        return self.encode(bool((a[0, K:] == b[0, K:]).all()))

    def s_eqv(self, name, a):
        return self.eqv(a[0], a[1])

    def equal(self, a, b):
        ta, tb = self.tag(a), self.tag(b)
        if ta == PAIR and tb == PAIR:
            (ca, da), (cb, db) = self.heap[self.addr(a)], self.heap[self.addr(b)]
            return self.encode(self.k.band(self.decode(self.equal(ca, cb)),
                                           self.decode(self.equal(da, db))))
        if ta == tb and ta in (VEC, MAT):
            return self.encode(self.k.equal(self.decode(a), self.decode(b)))
        return self.eqv(a, b)

    def s_equal(self, name, a):
        return self.equal(a[0], a[1])


class TaggedEvaluator(BaselineEvaluator):
    """The tagged-tensor eager baseline: every value a one-hot tag plus payload, torch autograd."""

    model = TaggedModel
    name = "tagged"
