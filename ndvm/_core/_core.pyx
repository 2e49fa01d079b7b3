# distutils: language = c++
"""Thin Python bindings of the C++ core: parse programs, bind inputs, own machines, and the native
entries: Machine.run into a client's entry point, FitBatch.run into the native calibrations.

Nothing here walks programs or touches lanes. `bind` is the one place inputs are checked and S and
N sized; Machine.run and FitBatch.run allocate the outputs the requests ask for, release the GIL
around the native call and raise ndvm errors (limit errors are the core's own).
"""
from cython.operator cimport dereference as deref
from libc.stdint cimport SIZE_MAX, int64_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memchr, memcmp, memcpy, memset
from libcpp cimport bool
from libcpp.memory cimport shared_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from ndvm._core.core cimport (
    AfterFit, AfterSegment, Binding, BindKind, ClientEntry, Datum, DatumKind, ErrorInfo, Expanded, FitLayout, FitRequest,
    FitSlot, Limits, Machine as CMachine, Optimizer, RunRequest, Scaling, SourceData, SrcPos,
    best_start, call_entry, SharedFits, check_outputs_guarded, expand_guarded, fit_batch,
    fit_shared, interrupt_arm, interrupt_disarm, kAfterStats, kFitSlotFields, outputs_fit,
    prelude_text, read_guarded, result_pos, reverse_guarded, shared_cancel, shared_enter,
    shared_leave, shared_quiet, shared_reset, shared_wait, shared_finished,
    shared_is_quiet, StopSign, stop_set, stop_is_set,
)

import threading
from threading import get_ident

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
    cdef dict _positions                 # (made on first use: a search parses thousands of
    cdef dict _index                     # candidates a second and reads these for a few)
    cdef readonly dict _compiled

    @property
    def free_positions(self):
        """free name -> (line, col) of its first use."""
        cdef Py_ssize_t k
        if self._positions is None:  # (by index: the names' vector is in the program's arena)
            self._positions = {deref(self._x).free_[k].name.decode("utf-8"):
                               (deref(self._x).free_[k].pos.line, deref(self._x).free_[k].pos.col)
                               for k in range(<Py_ssize_t>deref(self._x).free_.size())}
        return self._positions

    @property
    def result_position(self):
        """(line, col) of the result expression (made when asked: a search reads it of none of
        the candidates it parses)."""
        cdef SrcPos rp = result_pos(deref(self._x))
        return (rp.line, rp.col)

    @property
    def free_index(self):
        """free name -> its position in free_names."""
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self.free_names)}
        return self._index

    def __init__(self, *args, **kwargs):  # (the core makes them with Program.__new__)
        raise TypeError("a Program is made by ndvm.parse(source, name=...), not Program(...): "
                        "Program('(+ 1 2)') was an empty program")

    def __reduce__(self):
        return (parse, (self.source, self.name))

    def __repr__(self):
        return f"ndvm.Program({self.name!r}, free_names={self.free_names!r})"

    @property
    def _address(self):
        return <uintptr_t>self._x.get()

    @property
    def _bounded(self):
        """Whether it has no lambda, loop or data primitive (each node runs once a lane: its
        probe runs holding the GIL, Machine._probe)."""
        return deref(self._x).bounded_

    def compiled(self, client):
        """The client's compiled form of this program, compiled once and cached."""
        return self._compiled_by(client)

    cdef object _compiled_by(self, object client):
        return self._compiled_as(client, client.name)

    cdef object _compiled_as(self, object client, object key):
        # (``key``: the client's name, read once by a caller staging many programs)
        c = self._compiled.get(key)
        if c is None:
            with _COMPILING:
                c = self._compiled.get(key)
                if c is None:
                    c = client.compile(self)
                    self._compiled[key] = c
        return c


_COMPILING = threading.Lock()  # (a program is compiled once per client, by one thread)


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


def parse(str text not None, str name not None="<program>"):
    """Read, check and expand program text. Raises ReadError or FormError."""
    return _parse(text, name, name.encode("utf-8", "backslashreplace"))


cdef Program _parse(str text, str name, const string& n, bint release=True):
    """``parse`` of ``text`` named ``name`` (``n``: the name as the core takes it, encoded
    once for many texts). ``release``: the GIL is released while the core reads and expands
    (not for a candidate's few dozen characters: that costs more than it lets others run)."""
    cdef const char* utf8 = NULL
    cdef Py_ssize_t size = 0
    cdef bytes encoded = None
    try:  # (the text's own UTF-8, NUL-terminated and kept by the str: read in place, no copy)
        utf8 = PyUnicode_AsUTF8AndSize(text, &size)
    except UnicodeEncodeError:  # (a lone surrogate: _utf8 raises the ReadError that says where)
        encoded = _utf8(text, name)
        utf8 = encoded
        size = len(encoded)
    cdef shared_ptr[const Expanded] x
    cdef ErrorInfo err
    cdef bool ok
    if release:  # (text, and so its UTF-8, outlives the call)
        with nogil:
            ok = expand_guarded(utf8, size, n, &x, &err)
    else:
        ok = expand_guarded(utf8, size, n, &x, &err)
    if not ok:
        _raise(err)
    cdef Program p = Program.__new__(Program)
    p._x = x
    p.source = text
    p.name = name
    p.free_names = _free_names(deref(x))
    p._compiled = {}
    return p


# The last free names made of each of _NAMES_SLOTS hashes of their text: a search's thousands of
# candidates a second have a few dozen orders of free names, so most programs get the tuple an
# earlier one has (no tuple or str made, and the probe's and a fit's bound inputs find theirs
# the same object). Read and written with the GIL held. (A slot is the hash's two halves folded:
# FNV-1a's low bits depend on the text's low bits alone. At 64 slots by them the 19 orders of a
# damped search's 4,096 candidates collided and 15% of its programs made their names again; at
# 1,024 folded none collide, and only a new order makes its names.)
cdef enum:
    _NAMES_SLOTS = 1024
cdef list _NAMES = [None] * _NAMES_SLOTS


cdef tuple _free_names(const Expanded& x):
    """``x``'s free names in order, as a tuple of str: the one _NAMES keeps for them, or a new one
    that it then keeps."""
    cdef Py_ssize_t k, j, nf = x.free_.size(), size
    cdef const string* s
    cdef const char* utf8
    cdef uint64_t h = 14695981039346656037ULL  # (FNV-1a of the names, each ended by a 0xFF)
    for k in range(nf):
        s = &x.free_[k].name
        for j in range(<Py_ssize_t>s.size()):
            h = (h ^ <unsigned char>s[0][j]) * 1099511628211ULL
        h = (h ^ 0xFF) * 1099511628211ULL
    cdef Py_ssize_t slot = <Py_ssize_t>((h ^ (h >> 32)) % _NAMES_SLOTS)
    cdef object kept = _NAMES[slot]
    cdef tuple names
    if kept is not None and len(<tuple>kept) == nf:
        names = <tuple>kept
        for k in range(nf):
            s = &x.free_[k].name
            utf8 = PyUnicode_AsUTF8AndSize(names[k], &size)
            if <size_t>size != s.size() or memcmp(utf8, s.data(), size) != 0:
                break
        else:
            return names
    # (by index: `for f in x.free_` copied the vector and each name; into the tuple itself, no
    # list between)
    names = PyTuple_New(nf)
    for k in range(nf):
        name_k = x.free_[k].name.decode("utf-8")
        Py_INCREF(name_k)
        PyTuple_SET_ITEM(names, k, name_k)
    _NAMES[slot] = names
    return names


include "datum.pxi"


cdef object _aligned(object a):
    """`a`, or an aligned float64 copy: the core reads inputs through double pointers, and an
    unaligned buffer (a view into a pickle or a network frame) is undefined behaviour there."""
    if isinstance(a, np.ndarray) and not (<cnp.ndarray>a).flags.aligned:
        return np.array(a, dtype=np.float64, order="C", copy=True)
    return a


_PARAM, _DATA, _CONST = 0, 1, 2


cdef bint _reals(object a):
    """Whether an object array holds real numbers alone (Fraction, Decimal: not None or str)."""
    from decimal import Decimal
    from numbers import Real
    return all(isinstance(v, (Real, Decimal)) for v in a.ravel())


cdef object _as_array(str name, object value, str what, int max_ndim):
    """`value` as a C-contiguous, aligned float64 array with at most max_ndim dimensions."""
    try:
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
        if a.dtype.kind not in "biuf" and not (a.dtype.kind == "O" and _reals(a)):
            raise TypeError  # (None was read as nan, "1" as 1.0, 1j lost its imaginary part)
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError):
        got = type(value).__name__ if not isinstance(value, (list, tuple)) else (
            f"a {type(value).__name__} holding "
            f"{', '.join(sorted({type(v).__name__ for v in np.ravel(np.asarray(value, dtype=object))}))}")
        raise TypeError(f"{what} {name!r} must be numeric, got {got}") from None
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
    cdef readonly tuple names          # the free names bound, in order (a program's free_names)

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
        c.names = self.names
        return c


cdef object _size(str what, str name, cnp.ndarray a, object have, str unit):
    # (``a``: an input ``_input`` made an array; its size read natively, not as attributes)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a) if cnp.PyArray_NDIM(a) else 1
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
    cdef dict m
    try:
        m = d if type(d) is dict else dict(d)
    except (TypeError, ValueError):
        raise TypeError(f"{group} is a dict of name -> value, got {type(d).__name__}") from None
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


def bind(Program prog not None, params=None, data=None, consts=None, points=None):
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
    b.names = names
    b.params = tuple(P)
    b.param_binding = tuple([index.get(k, -1) for k in b.params])
    return b


cdef int _same_names(Inputs inputs, Program prog) except -1:
    # Inputs bind by position, one binding a free name in the program's order: a program run on
    # another's (or fitted with its FitSpec) read its values under other names, or past them
    if inputs.names is not prog.free_names and inputs.names != prog.free_names:
        raise ValueError(f"the inputs were bound for a program whose free names are "
                         f"{', '.join(inputs.names) or '(none)'}, and this one's are "
                         f"{', '.join(prog.free_names) or '(none)'}: bind them for it")
    return 0


cdef void* _out_ptr(object a, int typenum, size_t n) except NULL:
    """The data of `a`, an output array that must be C-contiguous, writable, of type `typenum`
    and with n elements."""
    if (type(a) is not np.ndarray or cnp.PyArray_TYPE(<cnp.ndarray>a) != typenum
            or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)
            or not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a)
            or <size_t>cnp.PyArray_SIZE(<cnp.ndarray>a) != n or n == 0):
        raise ValueError(f"an output array has the wrong type or size (want {n} elements)")
    return cnp.PyArray_DATA(<cnp.ndarray>a)


# A machine whose step limit is above this (the default) can be interrupted (Machine._call) ...
INTERRUPTIBLE_STEPS = 10_000_000
# ... and so can an evaluation of at least this many lanes (S x N) at any limit: each of its
# steps works on every lane, so the default limit's 10 million steps can take hours on large
# data, and arming (four sigaction calls, ~2 us) is then a small part of even one step.
INTERRUPTIBLE_LANES = 1 << 16
cdef uint64_t _INTERRUPTIBLE_LANES = INTERRUPTIBLE_LANES
_MAIN_THREAD = threading.main_thread().ident


cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


cdef class Machine:
    """The native state one evaluation runs on (lanes, arenas, tape, limits); reused across calls.

    Not thread-safe: use one Machine per thread (ndvm.Evaluator does this for you).
    """

    cdef void* _ptr
    cdef readonly int dtype_code
    cdef readonly str dtype
    cdef readonly unsigned long long generation  # counts runs; a kept tape belongs to one
    cdef Inputs _inputs                          # the last run's inputs (for reverse())
    cdef bint _kept                              # the last run kept its tape (reverse() may run)
    cdef int64_t _max_memory
    cdef bint _interruptible  # (its step limit is above the default: long evaluations)

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
        self._interruptible = max_steps > INTERRUPTIBLE_STEPS
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

    cdef inline int _check_outputs(self, Program prog, Py_ssize_t S, Py_ssize_t N,
                                   Py_ssize_t arrays) except -1:
        """Raises the core's LimitError (before anything is allocated) when `arrays` float64
        outputs of S x N lanes cannot fit the lane range or the memory limit. (Outputs that fit
        return here, by the core's outputs_fit, check_outputs' own rule, without its guarded
        call: a probe's few lanes always fit; _outputs_error's call makes the error.)"""
        if outputs_fit(self._max_memory, <uint64_t>S, <uint64_t>N, <uint64_t>arrays):
            return 0
        return self._outputs_error(prog, S, N, arrays)

    cdef int _outputs_error(self, Program prog, Py_ssize_t S, Py_ssize_t N,
                            Py_ssize_t arrays) except -1:
        # (its own function: the ErrorInfo, four strings, is made only when outputs do not fit)
        cdef ErrorInfo err
        if not check_outputs_guarded(prog._x.get(), self._max_memory, S, N, arrays, &err):
            _raise(err)
        return 0

    cdef Limits* _limits(self):
        if self.dtype_code == F64:
            return &(<CMachine[double]*>self._ptr).limits_
        return &(<CMachine[float]*>self._ptr).limits_

    cdef _call(self, Program prog, uintptr_t entry, uintptr_t compiled, RunRequest* rq,
               bint short=False):
        """Runs ``rq`` on ``prog`` through the client's ``entry``, the GIL released unless the
        caller knows the run is ``short`` (see _probe); raises the core's error."""
        cdef ErrorInfo err
        cdef bool ok
        # (a machine allowed more steps than the default, or an evaluation of many lanes, runs
        # long: on the main thread, Ctrl-C and SIGTERM stop it within 65,536 steps,
        # interrupt.hpp)
        cdef bint wide = <uint64_t>rq.S * rq.N >= _INTERRUPTIBLE_LANES
        cdef bint armed = (self._interruptible or wide) and get_ident() == _MAIN_THREAD
        self.generation += 1
        if armed:
            interrupt_arm(self._limits()[0], wide)
        if short and not wide:
            ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                            <const void*>prog._x.get(), <const void*>compiled, rq, &err)
        else:
            with nogil:
                ok = call_entry(<ClientEntry>entry, self._ptr, self.dtype_code,
                                <const void*>prog._x.get(), <const void*>compiled, rq, &err)
        if armed and interrupt_disarm(self._limits()[0]):
            PyErr_CheckSignals()  # (raises what the signal's Python handler raises)
        if not ok:
            _raise(err)

    def run(self, Program prog not None, uintptr_t entry, uintptr_t compiled,
            Inputs inputs not None, bint grad=False, int reduce=REDUCE_START, seed=None,
            target=None):
        """The one native entry: run a client's entry point on bound inputs.

        With grad, one reverse sweep seeded with ones, with `seed` [S, N] (d / d value), or, with
        `target` [N], with the mean-squared-error residual; reduced per lane (REDUCE_LANE), per
        start (REDUCE_START) or not at all (REDUCE_NONE: the tape is kept for reverse()).
        Returns (value [S, N], gradients [P, S, N] or [P, S] in inputs.params order or None,
        loss [S] with a target or None).
        """
        return self._run(prog, entry, compiled, inputs, grad, reduce, seed, target)

    cdef tuple _run(self, Program prog, uintptr_t entry, uintptr_t compiled, Inputs inputs,
                    bint grad, int reduce, object seed, object target):
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
        self._request(prog, inputs, 1 + (P if sweep and reduce == REDUCE_LANE else 0), &rq)
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
        rq.grad = grad
        rq.value_out = <double*>cnp.PyArray_DATA(value)
        self._inputs = inputs
        self._kept = False
        self._call(prog, entry, compiled, &rq)
        self._kept = grad and reduce == REDUCE_NONE
        return value, out, loss

    cdef int _request(self, Program prog, Inputs inputs, Py_ssize_t arrays,
                      RunRequest* rq) except -1:
        """Checks a run of ``prog`` on ``inputs`` (bound for its free names; its ``arrays``
        outputs within the limits) and fills ``rq``'s inputs and lanes."""
        _same_names(inputs, prog)
        self._check_outputs(prog, inputs.S, inputs.N, arrays)
        rq.bindings = inputs._bs.data()
        rq.nbind = inputs._bs.size()
        rq.S = inputs.S
        rq.N = inputs.N
        return 0

    cdef int _probe(self, Program prog, uintptr_t entry, uintptr_t compiled,
                    Inputs inputs) except -1:
        """``_run`` without gradients whose values are not kept (no output array, none
        copied): whether it raises is the answer (``validate_each``'s probe). A bounded program
        (no lambda, loop or data primitive: ast.hpp) runs holding the GIL: on a probe's few
        points it takes a few microseconds, less than releasing and taking the GIL back."""
        cdef RunRequest rq
        self._request(prog, inputs, 1, &rq)
        rq.grad = False
        rq.value_out = NULL
        self._inputs = inputs
        self._kept = False
        self._call(prog, entry, compiled, &rq, deref(prog._x).bounded_)
        return 0

    def reverse(self, seed, int reduce=REDUCE_START):
        """Sweep the last run's kept tape seeded with `seed` [S, N]: gradients [P, S] (per start)
        or [P, S, N] (per lane) in that run's inputs.params order. Only valid right after
        run(grad=True, reduce=REDUCE_NONE) on this machine (check `generation`)."""
        if not self._kept:  # (a fresh machine's, or after a run that failed or kept none)
            raise ValueError("no kept tape to sweep: the last run on this machine did not keep "
                             "one (run with grad=True and reduce=None first, and it must "
                             "succeed)")
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


def validate_each(list sources not None, str name not None, dict probes not None, miss,
                  Machine machine not None, client, evaluate):
    """Per source of ``sources``: (its Program, parsed as ``name``; its parameters), or the
    exception that makes it invalid, without its traceback: it does not parse, it has a free
    name the task does not allow, or its probe evaluation raises. A round's candidates are
    validated in this one call (``Scorer.validate_round``, which keeps the rule).
    ``probes``: a program's free names -> (why they are not allowed, or None; its parameters;
    the probe's bound Inputs, or, when they do not bind, ``evaluate``'s (params, data,
    consts): it raises why); ``miss(prog)`` returns the entry ``probes`` lacks (and keeps it).
    The probe runs ``client``'s entry on ``machine``, as ``Evaluator.run`` does, on the
    program's compiled form: the client's ``fixed_form`` when it has one (the same for every
    program, ndvm.clients: no call a candidate), else what its ``compile`` gives."""
    cdef list out = []
    cdef Program prog
    cdef tuple known = None
    cdef tuple names = None  # (the free names ``known`` is the entry of)
    cdef string n = name.encode("utf-8", "backslashreplace")
    cdef uintptr_t entry = client.entry
    cdef str key = client.name
    compile_ = client.compile  # (bound once, not looked up a candidate)
    fixed = getattr(client, "fixed_form", None)
    for src in sources:
        try:
            prog = _parse(src, name, n, False)
            # (programs of the same free names share one tuple, _free_names: consecutive ones
            # look their entry up once; it depends on the names alone)
            if prog.free_names is not names:
                known = probes.get(prog.free_names)
                if known is None:
                    known = miss(prog)
                names = prog.free_names
            why, params, inputs = known
            if why is not None:
                out.append(ValueError(why))
                continue
            if isinstance(inputs, tuple):
                evaluate(prog, *inputs)
            else:
                # (compiled without Program.compiled's lock: no other thread has it yet)
                compiled = fixed if fixed is not None else compile_(prog)
                prog._compiled[key] = compiled
                machine._probe(prog, entry, compiled, inputs)
        except Exception as e:  # (its frames would hold ``out``: a cycle)
            out.append(e.with_traceback(None))
            continue
        out.append((prog, params))
    return out


include "fit.pxi"

include "simplify.pxi"

include "draws.pxi"

include "breed.pxi"

include "seen.pxi"

include "fold.pxi"

include "rounds.pxi"
