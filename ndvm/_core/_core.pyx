# distutils: language = c++
"""Thin Python bindings of the C++ core: parse programs, own machines, call a client's entry point.

Nothing here walks programs or touches lanes; it validates nothing the Python API has not already
validated, converts arguments, releases the GIL around the native call and raises ndvm errors.
"""
from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uint32_t, uintptr_t
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector

from ndvm._core.core cimport (
    Binding, BindKind, ClientEntry, Datum, DatumKind, ErrorInfo, Expanded, FitRequest,
    Machine as CMachine, Optimizer, RunRequest, SourceData, SrcPos, call_entry, expand_guarded,
    fit_guarded, prelude_text, read_guarded, result_pos, reverse_guarded,
)

import threading

import numpy as np

cimport numpy as cnp

cnp.import_array()

cdef enum:
    F64 = 0
    F32 = 1


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


cdef class RawVector:
    """A float64 vector given by address and length (e.g. a torch tensor's data_ptr()), for the
    native fast path; `owner` keeps the memory alive while the vector is in use."""

    cdef readonly uintptr_t ptr
    cdef readonly Py_ssize_t n
    cdef readonly object owner

    def __cinit__(self, uintptr_t ptr, Py_ssize_t n, owner=None):
        self.ptr = ptr
        self.n = n
        self.owner = owner


cdef list _fill_bindings(vector[Binding]* bs, list bindings):
    """Fills the native bindings from (kind, float64 array, rows, cols) tuples; returns the
    arrays, which the caller keeps alive for the duration of the native call."""
    cdef const double[::1] mv
    cdef size_t i, nb = len(bindings)
    keep = []
    bs.resize(nb)
    for i in range(nb):
        kind, arr, rows, cols = bindings[i]
        arr = _aligned(arr)
        mv = arr
        keep.append(arr)
        bs[0][i].kind = <BindKind>(<int>kind)
        bs[0][i].values = &mv[0]
        bs[0][i].rows = rows
        bs[0][i].cols = cols
    return keep


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
    cdef size_t _nbind
    cdef size_t _lanes
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

    cdef bint _outputs_fit(self, double S, double N, double arrays):
        """Whether `arrays` float64 outputs of S x N lanes fit the lane range and memory limit."""
        return S * N <= 4294967295.0 and S * N * 8.0 * arrays <= <double>self._max_memory

    cdef _check_outputs(self, Program prog, double S, double N, double arrays):
        """Raises LimitError (before anything is allocated) when the outputs cannot fit."""
        if self._outputs_fit(S, N, arrays):
            return
        from ndvm.errors import LimitError
        line, col = prog.result_position
        if S * N > 4294967295.0:
            msg = (f"too many lanes: {S:.0f} starts x {N:.0f} data points "
                   f"(at most 2^32 - 1)")
        else:
            msg = (f"memory limit exceeded: the values and gradients of {S:.0f} x {N:.0f} "
                   f"lanes need {S * N * 8.0 * arrays / 2.0 ** 20:.0f} MiB, more than "
                   f"{self._max_memory >> 20} MiB (raise it with Evaluator(max_memory=...))")
        raise LimitError(msg, line=line, col=col, file=prog.name)

    def run(self, Program prog, uintptr_t entry, uintptr_t compiled, list bindings,
            uint32_t S, uint32_t N, bint grad, bint sweep=True):
        """Run a client's entry point. bindings: per free name (kind, float64 array, rows, cols).

        Returns (values [S*N], {free-name index: jacobian [S*N]} for parameters when grad).
        With grad and not sweep, the tape is recorded but not swept: call reverse(seed) next.
        """
        cdef size_t nb = len(bindings)
        cdef vector[Binding] bs
        cdef vector[double*] jp
        cdef RunRequest rq
        cdef ErrorInfo err
        cdef const double[::1] mv
        cdef double[::1] out_mv
        cdef double[::1] jv
        cdef size_t L = <size_t>S * N
        cdef size_t i
        cdef bool ok
        nparams = sum(1 for b in bindings if b[0] == 0) if grad and sweep else 0
        self._check_outputs(prog, S, N, 1 + nparams)
        jp.resize(nb)
        jac = {}
        value = np.empty(L, dtype=np.float64)
        out_mv = value
        keep = _fill_bindings(&bs, bindings)
        for i in range(nb):
            jp[i] = NULL
            if grad and sweep and bindings[i][0] == 0:
                j = np.empty(L, dtype=np.float64)
                jac[i] = j
                jv = j
                jp[i] = &jv[0]
        rq.bindings = bs.data()
        rq.nbind = nb
        rq.S = S
        rq.N = N
        rq.grad = grad
        rq.value_out = &out_mv[0]
        rq.jac_out = jp.data() if sweep else NULL
        self.generation += 1
        self._nbind = nb
        self._lanes = L
        with nogil:
            ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                            <const void*>prog._x.get(), <const void*>compiled, &rq, &err)
        if not ok:
            _raise(err)
        return value, jac

    def reverse(self, seed, list params):
        """Sweep the last run's tape seeded with `seed` [S*N]; returns {index: adjoints [S*N]}.

        params: the binding indices of the parameters. Only valid right after run(grad=True,
        sweep=False) on this machine (check `generation`).
        """
        cdef const double[::1] sv = _aligned(seed)
        cdef vector[double*] jp
        cdef double[::1] jv
        cdef ErrorInfo err
        cdef bool ok
        if sv.shape[0] != self._lanes:
            raise ValueError(f"seed must have {self._lanes} values, got {sv.shape[0]}")
        jp.resize(self._nbind)
        out = {}
        for i in params:
            j = np.empty(self._lanes, dtype=np.float64)
            out[i] = j
            jv = j
            jp[i] = &jv[0]
        with nogil:
            if self.dtype_code == F64:
                ok = reverse_guarded[double](self._ptr, &sv[0], jp.data(), self._nbind, &err)
            else:
                ok = reverse_guarded[float](self._ptr, &sv[0], jp.data(), self._nbind, &err)
        if not ok:
            _raise(err)
        return out

    def fit(self, Program prog, uintptr_t entry, uintptr_t compiled, list bindings,
            list fitted, uint32_t S, uint32_t N, target, int optimizer, int steps, double lr,
            lower, upper, init, double tol=1e-10, double ftol=1e-10, double gtol=1e-10,
            int loss=0, positive=None, bint uncertainty=True, status=None, cov=None,
            stderr=None, flags=None):
        """Run a whole calibration natively (see ndvm.fit). fitted: binding indices optimized.

        init: [P, S] starting values; target: [N] (None for loss=1, the program's own value);
        tol: xtol; positive: [P] uint8 or None (optimized as logarithms). Optional outputs,
        filled in place: status [S] int8, cov [S, P, P], stderr [S, P], flags [S, P] uint8.
        Returns (params [P, S], losses [S], history [steps, S], converged [S] bool, number of
        evaluations).
        """
        cdef FitRequest rq
        cdef ErrorInfo err
        cdef const double[::1] mv
        cdef const double[::1] tv
        cdef const double[::1] lo
        cdef const double[::1] hi
        cdef const unsigned char[::1] posv
        cdef double[:, ::1] pv
        cdef double[::1] lv
        cdef double[:, ::1] hv
        cdef unsigned char[::1] cv
        cdef size_t i
        cdef bool ok
        keep = _fill_bindings(&rq.bindings, bindings)
        for i in fitted:
            rq.param_binding.push_back(i)
        P = len(fitted)
        params = np.array(init, dtype=np.float64).reshape(P, S)
        losses = np.empty(S, dtype=np.float64)
        history = np.empty((max(steps, 1), S), dtype=np.float64)
        converged = np.zeros(S, dtype=np.uint8)
        pv = params
        lv = losses
        hv = history
        cv = converged
        rq.entry = <ClientEntry>entry
        rq.machine = self._ptr
        rq.dtype = self.dtype_code
        rq.expanded = <const void*>prog._x.get()
        rq.compiled = <const void*>compiled
        rq.S = S
        rq.N = N
        rq.target = NULL
        if target is not None:
            tv = _aligned(target)
            rq.target = &tv[0]
        rq.optimizer = <Optimizer>optimizer
        rq.steps = steps
        rq.lr = lr
        rq.tol = tol
        rq.ftol = ftol
        rq.gtol = gtol
        rq.loss = loss
        rq.uncertainty = uncertainty
        rq.positive = NULL
        if positive is not None:
            posv = np.ascontiguousarray(positive, dtype=np.uint8)
            rq.positive = &posv[0]
        rq.lower = NULL
        rq.upper = NULL
        if lower is not None:
            lo = _aligned(lower)
            rq.lower = &lo[0]
        if upper is not None:
            hi = _aligned(upper)
            rq.upper = &hi[0]
        rq.params = &pv[0, 0] if P else NULL
        rq.losses = &lv[0]
        rq.history = &hv[0, 0]
        rq.converged = &cv[0]
        rq.status = NULL
        rq.cov = NULL
        rq.stderr_ = NULL
        rq.flags = NULL
        if status is not None:
            rq.status = <signed char*>_out_ptr(status, cnp.NPY_INT8, S)
        if P:
            if cov is not None:
                rq.cov = <double*>_out_ptr(cov, cnp.NPY_DOUBLE, S * P * P)
            if stderr is not None:
                rq.stderr_ = <double*>_out_ptr(stderr, cnp.NPY_DOUBLE, S * P)
            if flags is not None:
                rq.flags = <unsigned char*>_out_ptr(flags, cnp.NPY_UINT8, S * P)
        self.generation += 1
        with nogil:
            ok = fit_guarded(&rq, &err)
        if not ok:
            _raise(err)
        return (params, losses, history if steps >= 1 else history[:steps],
                converged.view(np.bool_), rq.n_evals)

    def evaluate_fast(self, Program prog, uintptr_t entry, uintptr_t compiled, dict params,
                      dict data, bint grad, bint sweep=True):
        """The common evaluation without Python-level binding: every free name bound by
        `params` or `data` to a number or a 1-D float64 array. Returns (value [S, N],
        jacobians [P, S, N] in params order or None, S, N), or None when the inputs need the
        general path (which also produces every error message)."""
        cdef tuple names = prog.free_names
        cdef Py_ssize_t nf = len(names), i, j, P = len(params)
        cdef vector[Binding] bs
        cdef vector[double] scalars
        cdef vector[double*] jp
        cdef RunRequest rq
        cdef ErrorInfo err
        cdef Py_ssize_t S = 1, N = 1, n
        cdef cnp.ndarray arr
        cdef cnp.ndarray value
        cdef cnp.ndarray block
        cdef bool ok
        cdef int kind
        bs.resize(nf)
        scalars.resize(nf if nf else 1)
        if data:
            for k in params:
                if k in data:
                    return None
        for i in range(nf):
            name = names[i]
            v = params.get(name)
            kind = 0
            if v is None:
                v = data.get(name)
                kind = 1
                if v is None:
                    return None
            bs[i].kind = <BindKind>kind
            bs[i].cols = 0
            if type(v) is float or type(v) is int:
                scalars[i] = v
                bs[i].values = &scalars[i]
                bs[i].rows = 0
                continue
            if type(v) is RawVector:
                n = (<RawVector>v).n
                if n == 0:
                    return None
                bs[i].values = <const double*>(<RawVector>v).ptr
            else:
                if type(v) is not np.ndarray:
                    return None
                arr = <cnp.ndarray>v
                if (cnp.PyArray_TYPE(arr) != cnp.NPY_DOUBLE or cnp.PyArray_NDIM(arr) != 1
                        or not cnp.PyArray_IS_C_CONTIGUOUS(arr) or not cnp.PyArray_ISALIGNED(arr)):
                    return None
                n = cnp.PyArray_DIM(arr, 0)
                if n == 0:
                    return None
                bs[i].values = <const double*>cnp.PyArray_DATA(arr)
            bs[i].rows = 0 if n == 1 else n
        # every input (used by the program or not) sizes S and N, and must be valid
        for group in (params, data):
            for k, v in group.items():
                if type(k) is not str:
                    return None
                if type(v) is float or type(v) is int:
                    continue
                if type(v) is RawVector:
                    n = (<RawVector>v).n
                else:
                    if type(v) is not np.ndarray:
                        return None
                    arr = <cnp.ndarray>v
                    if cnp.PyArray_NDIM(arr) != 1 or cnp.PyArray_TYPE(arr) != cnp.NPY_DOUBLE:
                        return None
                    n = cnp.PyArray_DIM(arr, 0)
                if n == 0:
                    return None
                if n == 1:
                    continue
                if group is params:
                    if S != 1 and S != n:
                        return None
                    S = n
                else:
                    if N != 1 and N != n:
                        return None
                    N = n
        if not self._outputs_fit(S, N, 1 + (P if grad else 0)):
            return None  # the general path raises the LimitError
        value = np.empty((S, N), dtype=np.float64)
        block = None
        jp.resize(nf)
        if grad and sweep:
            block = np.zeros((P, S, N), dtype=np.float64)
            j = 0
            index = {}
            for k in params:
                index[k] = j
                j += 1
            for i in range(nf):
                jp[i] = NULL
                if bs[i].kind == BindKind.Param:
                    jp[i] = <double*>cnp.PyArray_DATA(block) + <Py_ssize_t>index[names[i]] * S * N
        rq.bindings = bs.data()
        rq.nbind = nf
        rq.S = S
        rq.N = N
        rq.grad = grad
        rq.value_out = <double*>cnp.PyArray_DATA(value)
        rq.jac_out = jp.data() if sweep else NULL  # no sweep: the tape is kept for reverse()
        self.generation += 1
        self._nbind = nf
        self._lanes = S * N
        with nogil:
            ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                            <const void*>prog._x.get(), <const void*>compiled, &rq, &err)
        if not ok:
            _raise(err)
        return value, block, S, N

    def mse(self, Program prog, uintptr_t entry, uintptr_t compiled, list bindings,
            list params, uint32_t S, uint32_t N, target, bint grad):
        """Mean squared error against `target` [N] per start, and its gradient: (loss [S],
        {binding index: gradient [S]}), with the reverse sweep seeded by d loss / d value (no
        per-lane Jacobian)."""
        cdef size_t nb = len(bindings), i
        cdef vector[Binding] bs
        cdef vector[double*] gp
        cdef RunRequest rq
        cdef ErrorInfo err
        cdef const double[::1] mv
        cdef const double[::1] tv = _aligned(target)
        cdef double[::1] gv
        cdef double[::1] lv
        cdef bool ok
        if tv.shape[0] != N:
            raise ValueError(f"target has {tv.shape[0]} values, the data has {N} points")
        self._check_outputs(prog, S, N, 1)
        gp.resize(nb)
        keep = _fill_bindings(&bs, bindings)
        for i in range(nb):
            gp[i] = NULL
        grads = {}
        if grad:
            for i in params:
                g = np.empty(S, dtype=np.float64)
                grads[i] = g
                gv = g
                gp[i] = &gv[0]
        value = np.empty(<size_t>S * N, dtype=np.float64)
        loss = np.empty(S, dtype=np.float64)
        out_mv = value
        lv = loss
        rq.bindings = bs.data()
        rq.nbind = nb
        rq.S = S
        rq.N = N
        rq.grad = grad
        rq.value_out = <double*>cnp.PyArray_DATA(value)
        rq.jac_out = NULL
        rq.target = &tv[0]
        rq.loss_out = &lv[0]
        rq.grad_out = gp.data()
        self.generation += 1
        with nogil:
            ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                            <const void*>prog._x.get(), <const void*>compiled, &rq, &err)
        if not ok:
            _raise(err)
        return loss, grads
