# distutils: language = c++
"""Thin Python bindings of the C++ core: parse programs, bind inputs, own machines, and the native
entries: Machine.run into a client's entry point, FitBatch.run into the native calibrations.

Nothing here walks programs or touches lanes. `bind` is the one place inputs are checked and S and
N sized; Machine.run and FitBatch.run allocate the outputs the requests ask for, release the GIL
around the native call and raise ndvm errors (limit errors are the core's own).
"""
from cython.operator cimport dereference as deref
from libc.stdint cimport SIZE_MAX, int64_t, uint32_t, uintptr_t
from libc.math cimport INFINITY, isfinite
from libc.string cimport memcpy
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from ndvm._core.core cimport (
    Binding, BindKind, ClientEntry, Datum, DatumKind, ErrorInfo, Expanded, FitRequest,
    Machine as CMachine, Optimizer, RunRequest, Scaling, SourceData, SrcPos, call_entry,
    SharedFits, check_outputs_guarded, expand_guarded, fit_batch, fit_shared, prelude_text,
    read_guarded, result_pos, reverse_guarded, shared_cancel, shared_enter, shared_leave,
    shared_quiet, shared_reset, shared_wait,
)

import threading

import numpy as np

cimport numpy as cnp

cnp.import_array()

cdef enum:
    F64 = 0
    F32 = 1

# How Machine.run reduces the reverse sweep's adjoints (see execute.hpp).
REDUCE_NONE = 0   # no sweep: a grad run keeps its tape for Machine.reverse
REDUCE_LANE = 1   # each lane's adjoint: Jacobian rows [P, S, N]
REDUCE_START = 2  # summed over a start's lanes: gradients [P, S]


cdef object _raise(ErrorInfo& e):
    from ndvm import errors
    cls = errors.error_class(e.kind)
    raise cls(
        e.message.decode("utf-8", "replace"),
        line=e.line or None,
        col=e.col or None,
        form=e.form.decode("utf-8", "replace") or None,
        file=e.file.decode("utf-8", "replace") or None,
        backtrace=e.backtrace.decode("utf-8", "replace") or None,
    )


cdef class Program:
    """A parsed, checked and name-resolved program; immutable, thread-safe and picklable."""

    cdef shared_ptr[const Expanded] _x
    cdef readonly str source
    cdef readonly str name
    cdef readonly tuple free_names
    cdef readonly dict free_positions
    cdef readonly dict free_index        # free name -> its position in free_names
    cdef readonly tuple result_position  # (line, col) of the result expression
    cdef readonly dict _compiled
    cdef object _lock

    def __reduce__(self):
        return (parse, (self.source, self.name))

    def __repr__(self):
        return f"ndvm.Program({self.name!r}, free_names={self.free_names!r})"

    @property
    def _address(self):
        return <uintptr_t>self._x.get()

    def compiled(self, client):
        """The client's compiled form of this program, compiled once and cached."""
        key = client.name
        c = self._compiled.get(key)
        if c is None:
            with self._lock:
                c = self._compiled.get(key)
                if c is None:
                    c = client.compile(self)
                    self._compiled[key] = c
        return c


cdef bytes _utf8(str text, str name):
    """Program text as UTF-8; text that cannot be encoded (a lone surrogate) is a ReadError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        from ndvm.errors import ReadError
        before = text[:e.start]
        line = before.count("\n") + 1
        col = e.start - (before.rfind("\n") + 1) + 1
        raise ReadError(f"the text is not valid Unicode: {text[e.start]!r} cannot be encoded "
                        f"as UTF-8", line=line, col=col, file=name) from None


def parse(str text, str name="<program>"):
    """Read, check and expand program text. Raises ReadError or FormError."""
    cdef string t = _utf8(text, name)
    cdef string n = name.encode("utf-8", "backslashreplace")
    cdef shared_ptr[const Expanded] x
    cdef ErrorInfo err
    cdef bool ok
    cdef SrcPos rp
    with nogil:
        ok = expand_guarded(t, n, &x, &err)
    if not ok:
        _raise(err)
    cdef Program p = Program.__new__(Program)
    p._x = x
    p.source = text
    p.name = name
    names = []
    positions = {}
    for f in deref(x).free_:
        s = f.name.decode("utf-8")
        names.append(s)
        positions[s] = (f.pos.line, f.pos.col)
    p.free_names = tuple(names)
    p.free_positions = positions
    p.free_index = {k: i for i, k in enumerate(names)}
    rp = result_pos(deref(x))
    p.result_position = (rp.line, rp.col)
    p._compiled = {}
    p._lock = threading.Lock()
    return p


class Symbol(str):
    """A symbol in read data (a ``str`` subclass, so it compares equal to its name)."""

    __slots__ = ()

    def __repr__(self):
        return f"Symbol({str.__repr__(self)})"


class Dotted:
    """A dotted list ``(a b . tail)`` in read data: ``.items`` (a list) and ``.tail``."""

    __slots__ = ("items", "tail")

    def __init__(self, items, tail):
        self.items = items
        self.tail = tail

    def __eq__(self, other):
        return isinstance(other, Dotted) and (self.items, self.tail) == (other.items, other.tail)

    def __repr__(self):
        return f"Dotted({self.items!r}, {self.tail!r})"


cdef extern from "stack.hpp" namespace "ndvm":
    bool native_stack_exhausted() nogil


cdef object _datum(SourceData* s, int i, list symbols):
    cdef const Datum* d = &s.data_[i]
    cdef int k
    if native_stack_exhausted():
        raise RecursionError
    if d.kind == DatumKind.Num:
        return int(d.num) if d.is_int and abs(d.num) < 2.0 ** 53 else d.num
    if d.kind == DatumKind.Bool:
        return d.num != 0
    if d.kind == DatumKind.Sym:
        return symbols[d.sym]
    items = [_datum(s, s.kids_[d.first + k], symbols) for k in range(d.count)]
    if d.dotted:  # (no negative indexing: the module is compiled with wraparound=False)
        return Dotted(items[:d.count - 1], items[d.count - 1])
    return items


def prelude():
    """The Scheme text of the prelude (map, filter, fold-left, ...) that every client loads."""
    return prelude_text().decode("utf-8")


from ndvm._core.core cimport P_COUNT, PrimInfo, prim_info


def primitives():
    """The core's primitives, one dict each: the Scheme ``name``, ``arity`` (min, max; max None
    when variadic) and ``family``: the numeric ones (the NDVM_NUMERIC list) first, with the form
    that calls them, then the data primitives (lists, predicates, vectors), family "data"."""
    cdef PrimInfo p
    rows = []
    for i in range(P_COUNT):
        p = prim_info(i)
        rows.append({"name": p.name.decode(), "family": p.family.decode(),
                     "arity": (p.min_args, p.max_args if p.max_args >= 0 else None)})
    return tuple(rows)


def read(str text, str name="<program>"):
    """Read program text into plain Python data (lists, floats, ints, bools, Symbols).

    ``[a b]`` reads as ``['vec', a, b]`` and ``'x`` as ``['quote', x]``. Raises ReadError.
    """
    cdef string t = _utf8(text, name)
    cdef string n = name.encode("utf-8", "backslashreplace")
    cdef shared_ptr[SourceData] src
    cdef ErrorInfo err
    if not read_guarded(t, n, &src, &err):
        _raise(err)
    symbols = [Symbol(x.decode("utf-8")) for x in src.get().symbols_]
    try:
        return [_datum(src.get(), i, symbols) for i in src.get().top_]
    except RecursionError:
        from ndvm.errors import ReadError
        raise ReadError("data nested too deeply to convert to Python lists", file=name) from None


cdef object _aligned(object a):
    """`a`, or an aligned float64 copy: the core reads inputs through double pointers, and an
    unaligned buffer (a view into a pickle or a network frame) is undefined behaviour there."""
    if isinstance(a, np.ndarray) and not (<cnp.ndarray>a).flags.aligned:
        return np.array(a, dtype=np.float64, order="C", copy=True)
    return a


_PARAM, _DATA, _CONST = 0, 1, 2


cdef object _as_array(str name, object value, str what, int max_ndim):
    """`value` as a C-contiguous, aligned float64 array with at most max_ndim dimensions."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{what} {name!r} must be numeric, got {type(value).__name__}") from None
    if a.ndim > max_ndim:
        raise ValueError(f"{what} {name!r} must have at most {max_ndim} dimension(s), "
                         f"got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{what} {name!r} is empty")
    if not a.flags.c_contiguous:
        a = a.copy()  # (ascontiguousarray would make 0-d 1-d)
    return _aligned(a)


cdef inline bint _plain_vector(object v):
    """A float64 1-D contiguous aligned non-empty array: bound as it is, with no conversion."""
    if type(v) is not np.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>v
    return (cnp.PyArray_TYPE(a) == cnp.NPY_DOUBLE and cnp.PyArray_NDIM(a) == 1
            and cnp.PyArray_IS_C_CONTIGUOUS(a) and cnp.PyArray_ISALIGNED(a)
            and cnp.PyArray_DIM(a, 0) > 0)


cdef class Inputs:
    """A program's inputs checked and bound once (the one place S and N are sized): a native
    binding per free name in the program's order, and the parameters in the caller's order."""

    cdef vector[Binding] _bs
    cdef vector[double] _scalars
    cdef list _values            # per free name: a float (in _scalars) or the bound array
    cdef readonly Py_ssize_t S
    cdef readonly Py_ssize_t N
    cdef readonly tuple params         # parameter names, in the caller's order
    cdef readonly tuple param_binding  # per parameter: its binding index, -1 if the program has none

    def bindings(self):
        """Per free name (kind, flat float64 array, rows, cols): kind 0 a parameter, 1 a data
        input, 2 a constant; rows 0 for a scalar. (The eager baselines bind from these.)"""
        out = []
        for i, v in enumerate(self._values):
            a = np.array([v], dtype=np.float64) if type(v) is float else v.reshape(-1)
            out.append((<int>self._bs[i].kind, a, self._bs[i].rows, self._bs[i].cols))
        return out

    def copy(self):
        """The same inputs over private copies of their arrays (safe to keep past the call)."""
        cdef Inputs c
        cdef Py_ssize_t i
        for v in self._values:
            if type(v) is not float:
                break
        else:
            return self  # numbers only: nothing the caller could change
        c = Inputs.__new__(Inputs)
        c._bs = self._bs
        c._scalars = self._scalars
        c._values = [v if type(v) is float else np.array(v) for v in self._values]
        for i in range(len(c._values)):
            v = c._values[i]
            if type(v) is float:
                c._bs[i].values = &c._scalars[i]
            else:
                c._bs[i].values = <const double*>cnp.PyArray_DATA(<cnp.ndarray>v)
        c.S, c.N, c.params, c.param_binding = self.S, self.N, self.params, self.param_binding
        return c


cdef object _size(str what, str name, object a, object have, str unit):
    n = a.size if a.ndim else 1
    if n == 1:
        return have
    if have is not None and have != n:
        raise ValueError(f"{what} {name!r} has {n} {unit}, another has {have}")
    return n


cdef dict _EMPTY = {}  # never written: the mapping of an input group that was not given


cdef dict _mapping(object d, str group, dict a, str a_name, dict b, str b_name):
    """`d` as a dict whose keys are names not given in the earlier groups a and b."""
    if d is None:
        return _EMPTY
    cdef dict m = d if type(d) is dict else dict(d)
    for k in m:
        if not isinstance(k, str):
            raise TypeError(f"{group} keys must be names (str), got {k!r}")
        if a and k in a:
            raise ValueError(f"{k!r} is given in both {a_name} and {group}")
        if b and k in b:
            raise ValueError(f"{k!r} is given in both {b_name} and {group}")
    return m


cdef inline object _input(str name, object v, str what):
    """A parameter or data input as a float or a float64 vector [n >= 1]."""
    if type(v) is float or _plain_vector(v):
        return v
    if type(v) is int:
        return float(v)
    v = _as_array(name, v, what, 1)
    return float(v) if v.ndim == 0 else v


cdef object _count(dict group, dict converted, str what, str unit):
    """The number of starts/points the vectors of a params/data group agree on (None when all
    are scalars); inputs that needed a conversion are kept in `converted`."""
    n = None
    for k, v in group.items():
        if type(v) is float:
            continue
        a = _input(k, v, what)
        if a is not v:
            converted[k] = a
        if type(a) is not float:
            n = _size(what, k, a, n, unit)
    return n


def bind(Program prog, params=None, data=None, consts=None, points=None):
    """Check inputs against the program's free names and bind them; returns Inputs.

    params: name -> scalar or [S]; data: name -> scalar or [N]; consts: name -> number, vector or
    matrix; points: the N a target fixes (data must agree). Every input sizes S and N, whether
    the program uses it or not.
    """
    cdef dict P = _mapping(params, "params", None, None, None, None)
    cdef dict D = _mapping(data, "data", P, "params", None, None)
    cdef dict C = _mapping(consts, "consts", P, "params", D, "data")
    cdef dict converted = {}
    S = _count(P, converted, "parameter", "starts")
    N = _count(D, converted, "data input", "points")
    if points is not None:
        if N is not None and N != points:
            raise ValueError(f"the data has {N} points but target has {points}")
        N = points
    cdef Inputs b = Inputs.__new__(Inputs)
    cdef tuple names = prog.free_names
    cdef Py_ssize_t i, nf = len(names)
    b.S = S or 1
    b.N = N or 1
    b._bs.resize(nf)
    b._scalars.resize(nf if nf else 1)
    b._values = []
    for i in range(nf):
        name = names[i]
        if name in P:
            b._bs[i].kind = <BindKind>_PARAM
            v = P[name]
        elif name in D:
            b._bs[i].kind = <BindKind>_DATA
            v = D[name]
        elif name in C:
            v = _as_array(name, C[name], "constant", 2)
            if v.ndim == 2 and v.shape[0] > 65535:
                raise ValueError(f"constant {name!r} has more than 65535 rows")
            b._bs[i].kind = <BindKind>_CONST
            b._bs[i].cols = v.shape[1] if v.ndim == 2 else 0
            b._bs[i].rows = v.shape[0] if v.ndim >= 1 else 0
            b._bs[i].values = <const double*>cnp.PyArray_DATA(<cnp.ndarray>v)
            b._values.append(v)
            continue
        else:
            from ndvm.errors import UnboundError
            line, col = prog.free_positions[name]
            raise UnboundError(
                f"unbound variable '{name}': not defined by the program and not given as a "
                f"parameter, data input or constant", line=line, col=col, form=name,
                file=prog.name)
        if type(v) is not float:
            v = converted.get(name, v) if converted else v
        b._bs[i].cols = 0
        if type(v) is float:
            b._scalars[i] = v
            b._bs[i].values = &b._scalars[i]
            b._bs[i].rows = 0
        else:
            n = (<cnp.ndarray>v).size
            b._bs[i].values = <const double*>cnp.PyArray_DATA(<cnp.ndarray>v)
            b._bs[i].rows = 0 if n == 1 else n
        b._values.append(v)
    cdef dict index = prog.free_index
    b.params = tuple(P)
    b.param_binding = tuple([index.get(k, -1) for k in b.params])
    return b


cdef void* _out_ptr(object a, int typenum, size_t n) except NULL:
    """The data of `a`, an output array that must be C-contiguous, writable, of type `typenum`
    and with n elements."""
    if (type(a) is not np.ndarray or cnp.PyArray_TYPE(<cnp.ndarray>a) != typenum
            or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a)
            or <size_t>cnp.PyArray_SIZE(<cnp.ndarray>a) != n or n == 0):
        raise ValueError(f"an output array has the wrong type or size (want {n} elements)")
    return cnp.PyArray_DATA(<cnp.ndarray>a)


cdef class Machine:
    """The native state one evaluation runs on (lanes, arenas, tape, limits); reused across calls.

    Not thread-safe: use one Machine per thread (ndvm.Evaluator does this for you).
    """

    cdef void* _ptr
    cdef readonly int dtype_code
    cdef readonly str dtype
    cdef readonly unsigned long long generation  # counts runs; a kept tape belongs to one
    cdef Inputs _inputs                          # the last run's inputs (for reverse())
    cdef int64_t _max_memory

    def __cinit__(self, str dtype="float64", bint compat_reference=False,
                  int64_t max_steps=10000000, int64_t max_depth=10000,
                  int64_t max_memory=2 << 30):
        if dtype == "float64":
            self._ptr = new CMachine[double]()
            self.dtype_code = F64
        elif dtype == "float32":
            self._ptr = new CMachine[float]()
            self.dtype_code = F32
        else:
            raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
        self.dtype = dtype
        self.set_limits(max_steps, max_depth, max_memory)
        if self.dtype_code == F64:
            (<CMachine[double]*>self._ptr).compat_ref_ = compat_reference
        else:
            (<CMachine[float]*>self._ptr).compat_ref_ = compat_reference

    def __dealloc__(self):
        cdef CMachine[double]* m64
        cdef CMachine[float]* m32
        if self._ptr != NULL:
            if self.dtype_code == F64:
                m64 = <CMachine[double]*>self._ptr
                del m64
            else:
                m32 = <CMachine[float]*>self._ptr
                del m32

    def set_limits(self, int64_t max_steps, int64_t max_depth, int64_t max_memory):
        """Set the step, recursion-depth and memory (bytes) limits."""
        if max_steps <= 0 or max_depth <= 0 or max_memory <= 0:
            raise ValueError("limits must be positive")
        self._max_memory = max_memory
        if self.dtype_code == F64:
            (<CMachine[double]*>self._ptr).limits_.max_steps = max_steps
            (<CMachine[double]*>self._ptr).limits_.max_depth = max_depth
            (<CMachine[double]*>self._ptr).limits_.max_memory = max_memory
        else:
            (<CMachine[float]*>self._ptr).limits_.max_steps = max_steps
            (<CMachine[float]*>self._ptr).limits_.max_depth = max_depth
            (<CMachine[float]*>self._ptr).limits_.max_memory = max_memory

    @property
    def bytes_in_use(self):
        """Bytes held by the machine's buffers (kept between calls)."""
        if self.dtype_code == F64:
            return (<CMachine[double]*>self._ptr).bytes_in_use()
        return (<CMachine[float]*>self._ptr).bytes_in_use()

    cdef _check_outputs(self, Program prog, Py_ssize_t S, Py_ssize_t N, Py_ssize_t arrays):
        """Raises the core's LimitError (before anything is allocated) when `arrays` float64
        outputs of S x N lanes cannot fit the lane range or the memory limit."""
        cdef ErrorInfo err
        if not check_outputs_guarded(prog._x.get(), self._max_memory, S, N, arrays, &err):
            _raise(err)

    cdef _call(self, Program prog, uintptr_t entry, uintptr_t compiled, RunRequest* rq):
        cdef ErrorInfo err
        cdef bool ok
        self.generation += 1
        with nogil:
            ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                            <const void*>prog._x.get(), <const void*>compiled, rq, &err)
        if not ok:
            _raise(err)

    def run(self, Program prog, uintptr_t entry, uintptr_t compiled, Inputs inputs,
            bint grad=False, int reduce=REDUCE_START, seed=None, target=None):
        """The one native entry: run a client's entry point on bound inputs.

        With grad, one reverse sweep seeded with ones, with `seed` [S, N] (d / d value), or, with
        `target` [N], with the mean-squared-error residual; reduced per lane (REDUCE_LANE), per
        start (REDUCE_START) or not at all (REDUCE_NONE: the tape is kept for reverse()).
        Returns (value [S, N], gradients [P, S, N] or [P, S] in inputs.params order or None,
        loss [S] with a target or None).
        """
        cdef Py_ssize_t S = inputs.S, N = inputs.N, P = len(inputs.params), j, i
        cdef RunRequest rq
        cdef vector[double*] outp
        cdef const double[::1] sv
        cdef const double[::1] tv
        cdef cnp.ndarray value, out = None, loss = None
        cdef Py_ssize_t lanes_each = 0
        sweep = grad and reduce != REDUCE_NONE
        if sweep:
            lanes_each = N if reduce == REDUCE_LANE else 1
        self._check_outputs(prog, S, N, 1 + (P if sweep and reduce == REDUCE_LANE else 0))
        if seed is not None:
            sv = _aligned(np.ascontiguousarray(seed, dtype=np.float64).reshape(-1))
            if sv.shape[0] != S * N:
                raise ValueError(f"seed must have {S * N} values, got {sv.shape[0]}")
            rq.seed = &sv[0]
        if target is not None:
            tv = _aligned(np.ascontiguousarray(target, dtype=np.float64).reshape(-1))
            if tv.shape[0] != N:
                raise ValueError(f"target has {tv.shape[0]} values, the data has {N} points")
            rq.target = &tv[0]
            loss = np.empty(S, dtype=np.float64)
            rq.loss_out = <double*>cnp.PyArray_DATA(loss)
        cdef cnp.npy_intp dims[3]
        dims[0] = S
        dims[1] = N
        value = cnp.PyArray_EMPTY(2, dims, cnp.NPY_DOUBLE, 0)
        outp.resize(inputs._bs.size())
        if sweep:
            dims[0] = P
            dims[1] = S
            dims[2] = lanes_each
            out = cnp.PyArray_ZEROS(3 if reduce == REDUCE_LANE else 2, dims, cnp.NPY_DOUBLE, 0)
            for j in range(P):
                i = inputs.param_binding[j]
                if i >= 0:
                    outp[i] = <double*>cnp.PyArray_DATA(out) + j * S * lanes_each
            if reduce == REDUCE_LANE:
                rq.jac_out = outp.data()
            else:
                rq.grad_out = outp.data()
        rq.bindings = inputs._bs.data()
        rq.nbind = inputs._bs.size()
        rq.S = S
        rq.N = N
        rq.grad = grad
        rq.value_out = <double*>cnp.PyArray_DATA(value)
        self._inputs = inputs
        self._call(prog, entry, compiled, &rq)
        return value, out, loss

    def reverse(self, seed, int reduce=REDUCE_START):
        """Sweep the last run's kept tape seeded with `seed` [S, N]: gradients [P, S] (per start)
        or [P, S, N] (per lane) in that run's inputs.params order. Only valid right after
        run(grad=True, reduce=REDUCE_NONE) on this machine (check `generation`)."""
        cdef Inputs inputs = self._inputs
        cdef Py_ssize_t S = inputs.S, N = inputs.N, P = len(inputs.params), j, i
        cdef const double[::1] sv = _aligned(np.ascontiguousarray(seed, dtype=np.float64)
                                             .reshape(-1))
        cdef vector[double*] outp
        cdef cnp.ndarray out
        cdef ErrorInfo err
        cdef bool ok
        cdef Py_ssize_t each = N if reduce == REDUCE_LANE else 1
        if sv.shape[0] != S * N:
            raise ValueError(f"seed must have {S * N} values, got {sv.shape[0]}")
        out = np.zeros((P, S, each), dtype=np.float64)
        if reduce != REDUCE_LANE:
            out = out.reshape(P, S)
        outp.resize(inputs._bs.size())
        for j in range(P):
            i = inputs.param_binding[j]
            if i >= 0:
                outp[i] = <double*>cnp.PyArray_DATA(out) + j * S * each
        cdef double** jac = NULL
        cdef double** per_start = NULL
        if reduce == REDUCE_LANE:
            jac = outp.data()
        else:
            per_start = outp.data()
        with nogil:
            if self.dtype_code == F64:
                ok = reverse_guarded[double](self._ptr, &sv[0], jac, per_start, outp.size(), &err)
            else:
                ok = reverse_guarded[float](self._ptr, &sv[0], jac, per_start, outp.size(), &err)
        if not ok:
            _raise(err)
        return out



cdef cnp.ndarray _contiguous(object a, int typenum, Py_ssize_t n, str what):
    """`a` as a C-contiguous aligned array of n values of type `typenum` (`a` itself if it is
    one already: the fits of a batch share their target and starting points)."""
    cdef cnp.ndarray c
    if (type(a) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>a) == typenum
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            and cnp.PyArray_ISALIGNED(<cnp.ndarray>a)):
        c = <cnp.ndarray>a
    else:
        c = np.array(a, dtype=cnp.PyArray_DescrFromType(typenum), order="C", copy=True)
    if cnp.PyArray_SIZE(c) != n:
        raise ValueError(f"{what} has {cnp.PyArray_SIZE(c)} values, expected {n}")
    return c


cdef cnp.ndarray _view(cnp.ndarray base, size_t offset, int nd, Py_ssize_t d0, Py_ssize_t d1,
                       Py_ssize_t d2, int typenum):
    """An nd-dimensional array of type `typenum` over `base`'s data from element `offset` (in
    units of base's items), which keeps `base` alive."""
    cdef cnp.npy_intp dims[3]
    dims[0] = d0
    dims[1] = d1
    dims[2] = d2
    cdef char* at = <char*>cnp.PyArray_DATA(base) + offset * cnp.PyArray_ITEMSIZE(base)
    cdef cnp.ndarray a = cnp.PyArray_SimpleNewFromData(nd, dims, typenum, at)
    cnp.set_array_base(a, base)
    return a


cdef struct Slot:
    # where one staged fit keeps its initial values (in FitBatch._init) and its outputs (offsets
    # into the batch's float64 and uint8 arrays)
    size_t init
    size_t params     # [P, S] float64: in, the initial values; out, each start's best point
    size_t losses     # [S]
    size_t history    # [steps, S]
    size_t cov        # [S, P, P] (uncertainty only)
    size_t stderr_    # [S, P] (uncertainty only)
    size_t status     # [S] int8 (in the uint8 array)
    size_t converged  # [S] uint8
    size_t flags      # [S, P] uint8
    Py_ssize_t P
    Py_ssize_t S
    Py_ssize_t steps
    bint uncertainty


cdef class FitSpec:
    """One calibration's setup but its program (see FitBatch.add): the bound inputs, the fitted
    bindings, target, optimizer and its settings, bounds and starting values, checked and
    converted once. A FitPlan builds one per set of free names and stages every program having
    them with it (FitBatch.add_spec), so staging a program copies a prepared request. Immutable
    and shared by threads."""

    cdef FitRequest _rq  # the request but its program and outputs
    cdef vector[double] _x0
    cdef Py_ssize_t _P, _S
    cdef list _keep  # the Python objects the request points into

    def __init__(self, uintptr_t entry, Inputs inputs, fitted, target, int optimizer, int steps,
                 double lr, lower, upper, init, double tol=1e-10, double ftol=1e-10,
                 double gtol=1e-10, int loss=0, positive=None, bint uncertainty=True,
                 int scaling=2):
        cdef Py_ssize_t P = len(fitted), S = inputs.S
        cdef cnp.ndarray x0 = _contiguous(init, cnp.NPY_DOUBLE, P * S, "init")
        cdef cnp.ndarray a
        cdef FitRequest* rq = &self._rq
        self._keep = [inputs]
        self._P = P
        self._S = S
        rq.entry = <ClientEntry>entry
        rq.bindings = inputs._bs
        rq.param_binding.clear()
        for i in fitted:
            rq.param_binding.push_back(i)
        rq.S = S
        rq.N = inputs.N
        rq.target = NULL
        if target is not None:
            a = _contiguous(target, cnp.NPY_DOUBLE, inputs.N, "target")
            rq.target = <const double*>cnp.PyArray_DATA(a)
            self._keep.append(a)
        rq.optimizer = <Optimizer>optimizer
        rq.steps = steps
        rq.lr = lr
        rq.tol = tol
        rq.ftol = ftol
        rq.gtol = gtol
        rq.loss = loss
        rq.uncertainty = uncertainty
        rq.scaling = <Scaling>scaling
        rq.positive = NULL
        if positive is not None:
            a = _contiguous(positive, cnp.NPY_UINT8, P, "positive")
            rq.positive = <const unsigned char*>cnp.PyArray_DATA(a)
            self._keep.append(a)
        rq.lower = NULL
        rq.upper = NULL
        if lower is not None:
            a = _contiguous(lower, cnp.NPY_DOUBLE, P, "lower")
            rq.lower = <const double*>cnp.PyArray_DATA(a)
            self._keep.append(a)
        if upper is not None:
            a = _contiguous(upper, cnp.NPY_DOUBLE, P, "upper")
            rq.upper = <const double*>cnp.PyArray_DATA(a)
            self._keep.append(a)
        self._x0.resize(P * S)
        if P:
            memcpy(self._x0.data(), cnp.PyArray_DATA(x0), P * S * sizeof(double))


# the Slot fields a FitOutputs table keeps per fit (pickled as int64 columns)
cdef enum:
    _SLOT_COLUMNS = 11


cdef class FitOutputs:
    """The outputs of one ``FitBatch.run``: every fit's arrays in one float64 and one uint8
    buffer, where each fit's lie and its number of evaluations. Immutable; shared by the
    FitResults read from it (they hold it, so their arrays outlive the batch), and pickled
    compactly (the two buffers and one table) to move a chunk's results between processes.
    ``fit_result(k, cls, meta)`` makes fit k's lazy result; a failed fit's slot is never read."""

    cdef cnp.ndarray _f64, _u8
    cdef vector[Slot] _slot
    cdef vector[int64_t] _evals

    @property
    def size(self):
        return self._slot.size()

    def __reduce__(self):
        cdef Py_ssize_t k, n = self._slot.size()
        cdef cnp.ndarray table = np.empty((n, _SLOT_COLUMNS), dtype=np.int64)
        cdef int64_t* t = <int64_t*>cnp.PyArray_DATA(table)
        cdef Slot* sl
        for k in range(n):
            sl = &self._slot[k]
            t[0] = sl.params
            t[1] = sl.losses
            t[2] = sl.history
            t[3] = sl.cov
            t[4] = sl.stderr_
            t[5] = sl.status
            t[6] = sl.converged
            t[7] = sl.flags
            t[8] = sl.P
            t[9] = sl.S
            t[10] = sl.steps * 2 + (1 if sl.uncertainty else 0)
            t += _SLOT_COLUMNS
        evals = np.array([self._evals[k] for k in range(n)], dtype=np.int64)
        return (_fit_outputs, (self._f64, self._u8, table, evals))

    cdef Slot* _at(self, Py_ssize_t k) except NULL:
        if k < 0 or <size_t>k >= self._slot.size():
            raise IndexError(f"no fit {k} in these outputs")
        return &self._slot[k]

    def arrays(self, Py_ssize_t k):
        """Fit k's outputs as FitBatch.result gives them."""
        cdef Slot* sl = self._at(k)
        cdef Py_ssize_t P = sl.P, S = sl.S
        cdef cnp.ndarray f = self._f64, u = self._u8
        cov = se = None
        if sl.uncertainty:
            cov = _view(f, sl.cov, 3, S, P, P, cnp.NPY_DOUBLE)
            se = _view(f, sl.stderr_, 2, S, P, 0, cnp.NPY_DOUBLE)
        return (_view(f, sl.params, 2, P, S, 0, cnp.NPY_DOUBLE),
                _view(f, sl.losses, 1, S, 0, 0, cnp.NPY_DOUBLE),
                _view(f, sl.history, 2, sl.steps, S, 0, cnp.NPY_DOUBLE),
                _view(u, sl.converged, 1, S, 0, 0, cnp.NPY_BOOL),
                self._evals[k],
                _view(u, sl.status, 1, S, 0, 0, cnp.NPY_INT8),
                cov, se,
                _view(u, sl.flags, 2, S, P, 0, cnp.NPY_UINT8))

    def fit_result(self, Py_ssize_t k, cls, tuple meta):
        """Fit k's result as a ``cls`` (ndvm.FitResult) whose fields are read from these
        outputs on first access (``LazyFit.field``): meta is (names, optimizer, steps, tols,
        want_cov), shared by the fits of one plan."""
        cdef Slot* sl = self._at(k)
        if len(<tuple>meta[0]) != sl.P:
            raise ValueError(f"fit {k} has {sl.P} parameters, got {len(meta[0])} names")
        cdef LazyFit lazy = LazyFit.__new__(LazyFit)
        lazy.outputs = self
        lazy.k = k
        lazy.meta = meta
        r = cls.__new__(cls)
        r._lazy = lazy
        return r


def _fit_outputs(f64, u8, table, evals):
    """A FitOutputs from what its __reduce__ gave."""
    cdef FitOutputs out = FitOutputs.__new__(FitOutputs)
    cdef cnp.ndarray t = np.ascontiguousarray(table, dtype=np.int64)
    cdef Py_ssize_t k, n = cnp.PyArray_DIM(t, 0)
    cdef int64_t* row
    if cnp.PyArray_NDIM(t) != 2 or cnp.PyArray_DIM(t, 1) != _SLOT_COLUMNS or len(evals) != n:
        raise ValueError("not a FitOutputs table")
    out._f64 = np.ascontiguousarray(f64, dtype=np.float64)
    out._u8 = np.ascontiguousarray(u8, dtype=np.uint8)
    out._slot.resize(n)
    out._evals.resize(n)
    cdef Slot* sl
    for k in range(n):
        row = <int64_t*>cnp.PyArray_DATA(t) + k * _SLOT_COLUMNS
        sl = &out._slot[k]
        sl.init = 0
        sl.params, sl.losses, sl.history = row[0], row[1], row[2]
        sl.cov, sl.stderr_, sl.status = row[3], row[4], row[5]
        sl.converged, sl.flags, sl.P, sl.S = row[6], row[7], row[8], row[9]
        sl.steps = row[10] // 2
        sl.uncertainty = row[10] % 2
        out._evals[k] = evals[k]
    return out


cdef class LazyFit:
    """Where a lazy FitResult's fields come from: fit ``k`` of ``outputs`` with ``meta``
    (names, optimizer, steps, tols, want_cov). ``field(name)`` builds one field as the eager
    result had it: params (the best start's, as floats), loss, all_params (views of [S] each),
    all_losses, history, n_evals, converged, optimizer, names, status, covariance and stderr
    (the best start's, when uncertainty is asked for), all_covariance, all_stderr and stop_info
    (flags, steps, tolerances). The best start is the first of least finite loss (0 when none
    is finite), as ``np.argmin(np.where(np.isfinite(losses), losses, np.inf))``."""

    cdef readonly FitOutputs outputs
    cdef readonly Py_ssize_t k
    cdef readonly tuple meta

    cdef Py_ssize_t _best(self, Slot* sl):
        cdef double* f = <double*>cnp.PyArray_DATA(self.outputs._f64)
        cdef double least = INFINITY, v
        cdef Py_ssize_t i, best = 0
        for i in range(sl.S):
            v = f[sl.losses + i]
            if isfinite(v) and v < least:
                least = v
                best = i
        return best

    def field(self, str name):
        cdef Slot* sl = self.outputs._at(self.k)
        cdef Py_ssize_t P = sl.P, S = sl.S, i, best
        cdef cnp.ndarray f64 = self.outputs._f64, u8 = self.outputs._u8
        cdef double* f = <double*>cnp.PyArray_DATA(f64)
        cdef tuple names = self.meta[0]
        if name == "params":
            best = self._best(sl)
            return {names[i]: f[sl.params + i * S + best] for i in range(P)}
        if name == "loss":
            return f[sl.losses + self._best(sl)]
        if name == "all_params":
            return {names[i]: _view(f64, sl.params + i * S, 1, S, 0, 0, cnp.NPY_DOUBLE)
                    for i in range(P)}
        if name == "all_losses":
            return _view(f64, sl.losses, 1, S, 0, 0, cnp.NPY_DOUBLE)
        if name == "history":
            return _view(f64, sl.history, 2, sl.steps, S, 0, cnp.NPY_DOUBLE)
        if name == "n_evals":
            return self.outputs._evals[self.k]
        if name == "converged":
            return _view(u8, sl.converged, 1, S, 0, 0, cnp.NPY_BOOL)
        if name == "optimizer":
            return self.meta[1]
        if name == "names":
            return names
        if name == "status":
            return _view(u8, sl.status, 1, S, 0, 0, cnp.NPY_INT8)
        if name == "covariance":
            if not (sl.uncertainty and self.meta[4]):
                return None
            return _view(f64, sl.cov + self._best(sl) * P * P, 2, P, P, 0, cnp.NPY_DOUBLE)
        if name == "stderr":
            if not (sl.uncertainty and self.meta[4]):
                return None
            best = self._best(sl)
            return {names[i]: f[sl.stderr_ + best * P + i] for i in range(P)}
        if name == "all_covariance":
            return _view(f64, sl.cov, 3, S, P, P, cnp.NPY_DOUBLE) if sl.uncertainty else None
        if name == "all_stderr":
            return _view(f64, sl.stderr_, 2, S, P, 0, cnp.NPY_DOUBLE) if sl.uncertainty else None
        if name == "stop_info":
            return (_view(u8, sl.flags, 2, S, P, 0, cnp.NPY_UINT8), self.meta[2], self.meta[3])
        raise AttributeError(name)


cdef class FitBatch:
    """Calibrations of many programs, run back to back in one native call that releases the GIL.

    add() stages one fit on checked, bound inputs (ndvm.fit does the checking); run() runs every
    staged fit on one machine; result(k) gives fit k's outputs, views into arrays allocated once
    for the whole batch, or raises fit k's error (the others are unaffected). reset() empties the
    batch for reuse: its native buffers are kept, so a reused batch allocates nothing per fit.
    Or shared by several threads: open() it (on the thread that staged it), drain() it from any
    number of threads, each on its own machine (they claim its fits one at a time, without the
    GIL), then close() it (waits for the last fits) before reading results. Staging, run, open,
    close and reading belong to one thread.
    """

    cdef vector[FitRequest] _rq
    cdef vector[ErrorInfo] _err
    cdef vector[unsigned char] _ok
    cdef vector[Slot] _slot
    cdef vector[double] _init
    cdef list _keep  # the Python objects the staged requests point into
    cdef readonly Py_ssize_t size
    cdef size_t _n64, _n8
    cdef cnp.ndarray _f64, _u8
    cdef FitOutputs _out
    cdef bint _ran
    cdef bint _open  # opened for drain() and not yet closed
    cdef SharedFits* _claims

    def __cinit__(self):
        self._keep = []
        self._claims = new SharedFits()

    def __dealloc__(self):
        del self._claims

    def reset(self):
        """Drop every staged fit and its results (the native buffers are kept for reuse); an
        open batch's fits not yet claimed never run, its running ones are waited for."""
        with nogil:
            if self._open:
                shared_cancel(self._claims, self.size)
            shared_quiet(self._claims)  # (no thread is still inside a drain of these fits)
        self.size = 0
        self._n64 = self._n8 = 0
        self._init.clear()
        self._keep = []
        self._f64 = self._u8 = None
        self._out = None
        self._ran = False
        self._open = False

    def add(self, Program prog, uintptr_t entry, uintptr_t compiled, Inputs inputs,
            fitted, target, int optimizer, int steps, double lr, lower, upper, init,
            double tol=1e-10, double ftol=1e-10, double gtol=1e-10, int loss=0, positive=None,
            bint uncertainty=True, int scaling=2):
        """Stage one calibration (see ndvm.fit); returns its index in the batch.

        fitted: binding indices optimized; init: [P, S] starting values; target: [N] (None for
        loss=1, the program's own value); lower, upper: [P] or None; tol: xtol; positive: [P]
        uint8 or None (optimized as logarithms); uncertainty: also the covariance and standard
        errors; scaling: LM's trust-region scaling, 0 "jac", 1 "none", 2 "both". (The same as
        ``add_spec(prog, compiled, FitSpec(entry, inputs, ...))``.)
        """
        return self.add_spec(prog, compiled, FitSpec(entry, inputs, fitted, target, optimizer,
                                                     steps, lr, lower, upper, init, tol, ftol,
                                                     gtol, loss, positive, uncertainty,
                                                     scaling))

    def add_spec(self, Program prog, uintptr_t compiled, FitSpec spec):
        """Stage the calibration ``spec`` describes of ``prog`` (whose free names are those
        ``spec``'s inputs were bound for), compiled as ``compiled``; returns its index."""
        if self._ran:
            raise RuntimeError("this FitBatch has run: reset() it before staging more fits")
        cdef Py_ssize_t k = self.size, P = spec._P, S = spec._S
        if <size_t>k == self._rq.size():
            self._rq.resize(k + 1)
            self._err.resize(k + 1)
            self._ok.resize(k + 1)
            self._slot.resize(k + 1)
        cdef FitRequest* rq = &self._rq[k]
        cdef Slot* sl = &self._slot[k]
        self._keep.append(prog)
        self._keep.append(spec)
        rq[0] = spec._rq
        rq.expanded = <const void*>prog._x.get()
        rq.compiled = <const void*>compiled
        # the outputs' places; run() points the request at them once the arrays exist
        sl.P = P
        sl.S = S
        sl.steps = max(spec._rq.steps, 1)
        sl.uncertainty = spec._rq.uncertainty and P > 0
        sl.init = self._init.size()
        self._init.resize(sl.init + P * S)
        if P:
            memcpy(&self._init[sl.init], spec._x0.data(), P * S * sizeof(double))
        sl.params = self._n64
        sl.losses = sl.params + P * S
        sl.history = sl.losses + S
        sl.cov = sl.history + sl.steps * S
        sl.stderr_ = sl.cov + (S * P * P if sl.uncertainty else 0)
        self._n64 = sl.stderr_ + (S * P if sl.uncertainty else 0)
        sl.status = self._n8
        sl.converged = sl.status + S
        sl.flags = sl.converged + S
        self._n8 = sl.flags + S * P
        self.size = k + 1
        return k

    def run(self, Machine machine):
        """Run every staged fit on ``machine``, back to back, in one call without the GIL."""
        self._prepare()
        machine.generation += 1
        with nogil:
            fit_batch(self._rq.data(), self.size, machine._ptr, machine.dtype_code,
                      self._err.data(), self._ok.data())
        self._finish()

    def open(self):
        """Make the staged fits ready for drain() from several threads."""
        self._prepare()
        shared_reset(self._claims)
        self._open = True

    def drain(self, Machine machine, limit=None):
        """Run fits of the opened batch on ``machine`` (this thread's), claiming one at a time
        without the GIL, until every fit is claimed (another thread's last one may still run) or
        ``limit`` fits are run. Returns how many this call ran; nothing happens on a batch that is
        not open (closed already)."""
        cdef size_t most = SIZE_MAX if limit is None else <size_t>max(0, int(limit))
        cdef size_t ran = 0
        if not self._open:
            return 0
        machine.generation += 1
        shared_enter(self._claims)  # (under the GIL, with the check above: reset waits for it)
        try:
            with nogil:
                ran = fit_shared(self._rq.data(), self.size, self._claims, machine._ptr,
                                 machine.dtype_code, self._err.data(), self._ok.data(), most)
        finally:
            shared_leave(self._claims)
        return ran

    def close(self):
        """Wait until every fit of the opened batch has finished; then its results are read as
        after run()."""
        if not self._open:
            raise RuntimeError("this FitBatch is not open")
        with nogil:
            shared_wait(self._claims, self.size)
        self._open = False
        self._finish()

    cdef _prepare(self):
        """The output arrays of the staged fits, and every request pointed at its places."""
        cdef Py_ssize_t k, n = self.size
        cdef cnp.npy_intp dims[1]
        cdef double* f64
        cdef unsigned char* u8
        cdef FitRequest* rq
        cdef Slot* sl
        if self._ran:
            raise RuntimeError("this FitBatch has run already: reset() it first")
        dims[0] = max(self._n64, 1)
        self._f64 = cnp.PyArray_EMPTY(1, dims, cnp.NPY_DOUBLE, 0)
        dims[0] = max(self._n8, 1)
        self._u8 = cnp.PyArray_ZEROS(1, dims, cnp.NPY_UINT8, 0)
        f64 = <double*>cnp.PyArray_DATA(self._f64)
        u8 = <unsigned char*>cnp.PyArray_DATA(self._u8)
        for k in range(n):
            rq = &self._rq[k]
            sl = &self._slot[k]
            rq.params = NULL
            if sl.P:
                rq.params = f64 + sl.params
                memcpy(rq.params, &self._init[sl.init], sl.P * sl.S * sizeof(double))
            rq.losses = f64 + sl.losses
            rq.history = f64 + sl.history
            rq.converged = u8 + sl.converged
            rq.status = <signed char*>(u8 + sl.status)
            rq.cov = f64 + sl.cov if sl.uncertainty else NULL
            rq.stderr_ = f64 + sl.stderr_ if sl.uncertainty else NULL
            rq.flags = u8 + sl.flags if sl.P else NULL
        self._ran = True

    cdef _finish(self):
        """The FitOutputs of the fits that ran."""
        cdef Py_ssize_t k, n = self.size
        cdef FitOutputs out = FitOutputs.__new__(FitOutputs)
        out._f64 = self._f64
        out._u8 = self._u8
        out._slot.assign(self._slot.begin(), self._slot.begin() + n)
        out._evals.resize(n)
        for k in range(n):
            out._evals[k] = self._rq[k].n_evals
        self._out = out

    cdef _check(self, Py_ssize_t k):
        """Raise fit k's error (IndexError when there is no fit k in a batch that ran)."""
        if not self._ran or k < 0 or k >= self.size:
            raise IndexError(f"no result {k} in this batch (run it first)")
        if self._open:
            raise RuntimeError("this FitBatch is open: close() it before reading results")
        if not self._ok[k]:
            _raise(self._err[k])

    def result(self, Py_ssize_t k):
        """Fit k's outputs, or its error raised: (params [P, S], losses [S], history [steps, S],
        converged [S] bool, number of evaluations, status [S] int8, cov [S, P, P] or None,
        stderr [S, P] or None, flags [S, P] uint8), views into the batch's arrays."""
        self._check(k)
        return self._out.arrays(k)

    @property
    def outputs(self):
        """The FitOutputs of the last run (None before it runs)."""
        return self._out

    def fit_result(self, Py_ssize_t k, cls, tuple meta):
        """Fit k's result as a ``cls`` (ndvm.FitResult), or its error raised: see
        ``FitOutputs.fit_result``; meta is (names, optimizer, steps, tols, want_cov)."""
        self._check(k)
        return self._out.fit_result(k, cls, meta)
