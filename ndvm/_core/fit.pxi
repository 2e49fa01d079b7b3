# The fit part of the core's bindings (included by _core.pyx): FitSpec, one calibration's native
# request built once per plan; FitBatch, fits staged and run in one native call without the GIL
# (or drained by several threads); FitOutputs and LazyFit, typed views of the C++ output layout
# (FitLayout, fit/outputs.hpp) that build a FitResult's fields on first access.


cdef extern from *:
    """
    // one staged fit's request copied over a batch's slot in place (Cython's ``to[0] = from``
    // copies into a temporary first: its two vectors allocated and freed every fit)
    static inline void ndvm_copy_request(ndvm::FitRequest* to, const ndvm::FitRequest* from) {
        *to = *from;
    }
    """
    void _copy_request "ndvm_copy_request"(FitRequest* to, const FitRequest* src)


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


cdef inline bint _scalar(object v):
    """Whether ``v`` is one number (``np.ndim(v) == 0``), told natively for a float or an
    ndarray (what EvaluateAfter's segments hold) without numpy's dispatch."""
    if type(v) is float:
        return True
    if type(v) is np.ndarray:
        return cnp.PyArray_NDIM(<cnp.ndarray>v) == 0
    return np.ndim(v) == 0


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


def add_items(list items not None, programs, extras=None, bint pairs=False):
    """Append fit_many's (index, program, extra) items of ``programs`` (a list, or any iterable)
    to ``items``, numbered on from len(items): extra per program ``extras``' own, in order (an
    iterable; made a tuple when ``pairs``: FitSetup.begin's ``starts``; as many as the programs
    unless fewer, where the items end as a zip's would), or ``extras`` for every program when
    it is None or a string (an evaluation alone's mark). (One native loop: a round's fits are
    numbered a candidate at a time.)"""
    cdef Py_ssize_t i = len(items)
    if extras is None or type(extras) is str:
        for p in programs:
            items.append((i, p, extras))
            i += 1
        return items
    for p, x in zip(programs, extras):
        if pairs and type(x) is not tuple:
            x = tuple(x)
        items.append((i, p, x))
        i += 1
    return items


def row_blocks(list names not None, cnp.ndarray rows not None):
    """Per parameters' names of ``names`` in turn, (the names, their block of ``rows``, a row a
    name): ``rows`` a C-contiguous [k, S] float64 array holding every name's row, one names'
    block after the other (k: all the names). Each block is a view of ``rows``, as
    ``rows[a:b]`` is, made without a slice: what ``FitSetup.begin``'s ``starts`` takes."""
    if (rows.ndim != 2 or cnp.PyArray_TYPE(rows) != cnp.NPY_DOUBLE
            or not cnp.PyArray_IS_C_CONTIGUOUS(rows)):
        raise ValueError("rows must be a C-contiguous 2-D float64 array")
    cdef Py_ssize_t at = 0, p, k = rows.shape[0], S = rows.shape[1]
    cdef list out = []
    for ns in names:
        p = len(ns)
        if at + p > k:
            raise ValueError(f"{k} rows for more names than that")
        out.append((ns, _view(rows, at * S, 2, p, S, 0, cnp.NPY_DOUBLE)))
        at += p
    if at != k:
        raise ValueError(f"{k} rows for {at} names")
    return out


cdef class FitSpec:
    """One calibration's setup but its program: the bound inputs, the fitted
    bindings, target, optimizer and its settings, bounds and starting values, checked and
    converted once. A FitPlan builds one per set of free names and stages every program having
    them with it (FitBatch.add_spec), so staging a program copies a prepared request. Immutable
    and shared by threads."""

    cdef FitRequest _rq  # the request but its program and outputs
    cdef vector[double] _x0
    cdef AfterFit _after
    cdef list _keep  # the Python objects the request points into

    def __init__(self, uintptr_t entry, Inputs inputs not None, fitted, target, init, lower, upper,
                 positive, options, int budget, Inputs after=None, segments=(),
                 bint evaluate_only=False):
        """fitted: binding indices optimized; target: [N] (None for loss "value"); init: [P, S]
        starting values; lower, upper: [P] or None; positive: [P] uint8 or None (optimized as
        logarithms); options: the fit's ndvm.FitOptions (its optimizer, loss, scaling, lr,
        tolerances and want_cov are read); budget: Adam's steps or the evaluation budget.
        after: the program's inputs bound at M other points (its parameters as placeholders) to
        evaluate the fitted model at once the fit is done, reduced per (start, stop, ref) of
        ``segments`` (ref: [stop - start] values or one number; see fit/after.hpp).
        evaluate_only: no fit, the evaluation after it alone (a program without parameters:
        ``fitted`` empty, ``after`` given, ``inputs`` may be ``after``)."""
        cdef Py_ssize_t P = len(fitted), S = inputs.S
        cdef cnp.ndarray x0 = _contiguous(init, cnp.NPY_DOUBLE, P * S, "init")
        cdef cnp.ndarray a
        cdef FitRequest* rq = &self._rq
        self._keep = [inputs]
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
        rq.optimizer = <Optimizer><int>options.optimizer_code
        rq.budget = budget
        rq.lr = options.lr
        rq.ftol, rq.tol, rq.gtol = options.tols
        rq.loss = options.loss_code
        rq.uncertainty = options.want_cov
        rq.scaling = <Scaling><int>options.scaling_code
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
        rq.after = NULL
        if after is not None:
            self._set_after(after, segments)
        if evaluate_only and (P or after is None):
            raise ValueError("an evaluation alone is of a program without parameters, after")
        rq.evaluate_only = evaluate_only

    cdef _set_after(self, Inputs after, segments):
        cdef AfterSegment g
        cdef cnp.ndarray a
        if after._bs.size() != self._rq.bindings.size() or after.S != 1:
            raise ValueError("the after-fit inputs must bind the same program, one start")
        for i in self._rq.param_binding:
            if after._bs[i].kind != BindKind.Param:
                raise ValueError("the after-fit inputs must bind the fitted names as parameters")
        self._keep.append(after)
        self._after.bindings = after._bs
        self._after.M = after.N
        self._after.segments.clear()
        for start, stop, ref in segments:
            if not 0 <= start <= stop <= after.N:
                raise ValueError(f"segment ({start}, {stop}) is not within the {after.N} points")
            g.start, g.stop = start, stop
            g.ref = NULL
            g.center = 0.0
            if _scalar(ref):
                g.center = float(ref)
            else:
                a = _contiguous(ref, cnp.NPY_DOUBLE, stop - start, "a segment's ref")
                g.ref = <const double*>cnp.PyArray_DATA(a)
                self._keep.append(a)
            self._after.segments.push_back(g)
        self._rq.after = &self._after


# The FitSlot fields (fit/outputs.hpp), in their order: a FitOutputs pickles its slots as one
# structured array with these int64 fields.
SLOT_FIELDS = ("init", "params", "losses", "history", "cov", "stderr_", "status", "converged",
               "flags", "P", "S", "history_rows", "uncertainty", "n_evals", "after", "after_size")
AFTER_STATS = kAfterStats  # numbers per segment of an after-fit evaluation
_SLOT_DTYPE = np.dtype([(name, np.int64) for name in SLOT_FIELDS])
assert _SLOT_DTYPE.itemsize == sizeof(FitSlot) and len(SLOT_FIELDS) == kFitSlotFields


cdef tuple _after_numbers(const double* a, Py_ssize_t n):
    """(status, stats) of an after-fit evaluation's n numbers ``a`` (fit/request.hpp): "ok" with
    its segments' numbers as one flat tuple of floats (non-finite count, max |value - ref| and
    sum of squares, a segment after the other), "failed" (it raised) or None (not run), with
    None."""
    cdef tuple stats
    cdef object x
    cdef Py_ssize_t i
    if a[0] == 1.0:
        stats = PyTuple_New(n - 1)  # (filled in place: a search reads one a fit, no list
        for i in range(1, n):       # made to be copied)
            x = a[i]
            Py_INCREF(x)
            PyTuple_SET_ITEM(stats, i - 1, x)
        return "ok", stats
    return ("failed" if a[0] < 0 else None), None


def after_numbers(a):
    """``_after_numbers`` of an after-fit evaluation's numbers (a FitResult's ``after``, or None:
    (None, None))."""
    if a is None or np.size(a) == 0:
        return None, None
    cdef cnp.ndarray c = _contiguous(a, cnp.NPY_DOUBLE, np.size(a), "after")
    return _after_numbers(<const double*>cnp.PyArray_DATA(c), cnp.PyArray_SIZE(c))


cdef class FitOutputs:
    """The outputs of one ``FitBatch.run``: every fit's arrays in one float64 and one uint8
    buffer, and where each fit's lie (a FitSlot each, fit/outputs.hpp). Immutable; shared by the
    FitResults read from it (they hold it, so their arrays outlive the batch), and pickled
    compactly (the two buffers and the slots' table) to move a chunk's results between processes.
    ``fit_result(k, cls, meta)`` makes fit k's lazy result; a failed fit's slot is never read."""

    cdef cnp.ndarray _f64, _u8
    cdef vector[FitSlot] _slot

    def __reduce__(self):
        cdef size_t n = self._slot.size()
        table = np.empty(n, dtype=_SLOT_DTYPE)
        if n:
            memcpy(cnp.PyArray_DATA(table), self._slot.data(), n * sizeof(FitSlot))
        return (_fit_outputs, (self._f64, self._u8, table))

    cdef const FitSlot* _at(self, Py_ssize_t k) except NULL:
        if k < 0 or <size_t>k >= self._slot.size():
            raise IndexError(f"no fit {k} in these outputs")
        return &self._slot[k]

    def arrays(self, Py_ssize_t k):
        """Fit k's outputs as FitBatch.result gives them."""
        cdef const FitSlot* sl = self._at(k)
        cdef Py_ssize_t P = sl.P, S = sl.S
        cdef cnp.ndarray f = self._f64, u = self._u8
        cov = se = None
        if sl.uncertainty:
            cov = _view(f, sl.cov, 3, S, P, P, cnp.NPY_DOUBLE)
            se = _view(f, sl.stderr_, 2, S, P, 0, cnp.NPY_DOUBLE)
        return (_view(f, sl.params, 2, P, S, 0, cnp.NPY_DOUBLE),
                _view(f, sl.losses, 1, S, 0, 0, cnp.NPY_DOUBLE),
                _view(f, sl.history, 2, sl.history_rows, S, 0, cnp.NPY_DOUBLE),
                _view(u, sl.converged, 1, S, 0, 0, cnp.NPY_BOOL),
                sl.n_evals,
                _view(u, sl.status, 1, S, 0, 0, cnp.NPY_INT8),
                cov, se,
                _view(u, sl.flags, 2, S, P, 0, cnp.NPY_UINT8))

    cdef tuple outcome(self, Py_ssize_t k, tuple names):
        """(params, after) of fit k (``FitBatch.outcomes``)."""
        cdef const FitSlot* sl = self._at(k)
        cdef Py_ssize_t P = sl.P, S = sl.S, i
        cdef double* f = <double*>cnp.PyArray_DATA(self._f64)
        if len(names) != P:
            raise ValueError(f"fit {k} has {P} parameters, got {len(names)} names")
        cdef Py_ssize_t best = best_start(sl[0], f)
        cdef dict params = {}
        for i in range(P):
            params[names[i]] = f[sl.params + i * S + best]
        if not sl.after_size:
            return params, (None, None)
        return params, _after_numbers(f + sl.after, sl.after_size)

    def fit_result(self, Py_ssize_t k, cls, tuple meta):
        """Fit k's result as a ``cls`` (ndvm.FitResult) whose fields are read from these
        outputs on first access (``LazyFit.field``): meta is (names, optimizer, budget, tols,
        want_cov), shared by the fits of one plan."""
        cdef const FitSlot* sl = self._at(k)
        if len(<tuple>meta[0]) != sl.P:
            raise ValueError(f"fit {k} has {sl.P} parameters, got {len(meta[0])} names")
        cdef LazyFit lazy = LazyFit.__new__(LazyFit)
        lazy.outputs = self
        lazy.k = k
        lazy.meta = meta
        r = cls.__new__(cls)
        r._lazy = lazy
        return r


def _fit_outputs(f64, u8, table):
    """A FitOutputs from what its __reduce__ gave."""
    cdef cnp.ndarray t = np.ascontiguousarray(table)
    if t.dtype != _SLOT_DTYPE or t.ndim != 1:
        raise ValueError("not a FitOutputs table")
    cdef FitOutputs out = FitOutputs.__new__(FitOutputs)
    cdef size_t n = t.shape[0]
    out._f64 = np.ascontiguousarray(f64, dtype=np.float64)
    out._u8 = np.ascontiguousarray(u8, dtype=np.uint8)
    out._slot.resize(n)
    if n:
        memcpy(out._slot.data(), cnp.PyArray_DATA(t), n * sizeof(FitSlot))
    return out


cdef class LazyFit:
    """Where a lazy FitResult's fields come from: fit ``k`` of ``outputs`` with ``meta``
    (names, optimizer, budget, tols, want_cov). ``field(name)`` builds one field as the eager
    result had it: params (the best start's, as floats), loss, all_params (views of [S] each),
    all_losses, history, n_evals, converged, optimizer, names, status, covariance and stderr
    (the best start's, when uncertainty is asked for), all_covariance, all_stderr, stop_info
    (flags, budget, tolerances) and after (the after-fit evaluation's numbers, or None). The
    best start is the first of least finite loss (0 when none is finite, ``best_start`` in
    fit/outputs.hpp)."""

    cdef readonly FitOutputs outputs
    cdef readonly Py_ssize_t k
    cdef readonly tuple meta

    def field(self, str name):
        cdef const FitSlot* sl = self.outputs._at(self.k)
        cdef Py_ssize_t P = sl.P, S = sl.S, i, best
        cdef cnp.ndarray f64 = self.outputs._f64, u8 = self.outputs._u8
        cdef double* f = <double*>cnp.PyArray_DATA(f64)
        cdef tuple names = self.meta[0]
        if name == "params":
            best = best_start(sl[0], f)
            return {names[i]: f[sl.params + i * S + best] for i in range(P)}
        if name == "loss":
            return f[sl.losses + best_start(sl[0], f)]
        if name == "all_params":
            return {names[i]: _view(f64, sl.params + i * S, 1, S, 0, 0, cnp.NPY_DOUBLE)
                    for i in range(P)}
        if name == "all_losses":
            return _view(f64, sl.losses, 1, S, 0, 0, cnp.NPY_DOUBLE)
        if name == "history":
            return _view(f64, sl.history, 2, sl.history_rows, S, 0, cnp.NPY_DOUBLE)
        if name == "n_evals":
            return sl.n_evals
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
            return _view(f64, sl.cov + best_start(sl[0], f) * P * P, 2, P, P, 0,
                         cnp.NPY_DOUBLE)
        if name == "stderr":
            if not (sl.uncertainty and self.meta[4]):
                return None
            best = best_start(sl[0], f)
            return {names[i]: f[sl.stderr_ + best * P + i] for i in range(P)}
        if name == "all_covariance":
            return _view(f64, sl.cov, 3, S, P, P, cnp.NPY_DOUBLE) if sl.uncertainty else None
        if name == "all_stderr":
            return _view(f64, sl.stderr_, 2, S, P, 0, cnp.NPY_DOUBLE) if sl.uncertainty else None
        if name == "after":
            if not sl.after_size:
                return None
            return _view(f64, sl.after, 1, sl.after_size, 0, 0, cnp.NPY_DOUBLE)
        if name == "stop_info":
            return (_view(u8, sl.flags, 2, S, P, 0, cnp.NPY_UINT8), self.meta[2], self.meta[3])
        raise AttributeError(name)


cdef extern from "Python.h":
    Py_ssize_t _refs "Py_REFCNT"(PyObject*)


cdef inline bint _reusable(PyObject* whole, Py_ssize_t n):
    # whether a FitBatch's kept buffer at ``whole`` (an ndarray or None) holds ``n`` items and
    # nothing but the batch refers to it: no view of it (a result of the run before, which keeps
    # its base alive) is left. (Read through the attribute's own pointer: no reference taken.)
    return (whole != <PyObject*>None and _refs(whole) == 1
            and cnp.PyArray_SIZE(<cnp.ndarray>whole) >= n)


cdef class Stop:
    """A stop sign for the threads draining a FitBatch (``FitBatch.drain(stop=...)``): once
    ``set()``, each stops before its next claim (the fit it runs ends first). ``set`` and
    ``is_set`` as a threading.Event's; it is looked at natively, the GIL not taken between
    fits to look."""

    cdef StopSign* sign

    def __cinit__(self):
        self.sign = new StopSign()

    def __dealloc__(self):
        del self.sign

    def set(self):
        stop_set(self.sign)

    def is_set(self):
        return stop_is_set(self.sign)


cdef class FitBatch:
    """Calibrations of many programs, run back to back in one native call that releases the GIL.

    add_spec() stages one fit (a FitSpec: ndvm.fit does the checking); run() runs every
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
    cdef FitLayout _layout  # where each staged fit's starting values and outputs go
    cdef list _keep  # the Python objects the staged requests point into
    cdef readonly Py_ssize_t size
    cdef cnp.ndarray _f64, _u8
    # (the buffers _f64 and _u8 are views of, kept by reset() for the next run: reused when no
    # result of the last one is alive, none of their views then left)
    cdef cnp.ndarray _whole_f64, _whole_u8
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
        open batch's fits not yet claimed never run, its running ones are waited for. Nothing to
        do for a batch with nothing staged, never run nor opened (a new one, or reset already:
        no thread can be in a drain of it)."""
        if self.size == 0 and not self._ran and not self._open:
            return
        with nogil:
            if self._open:
                shared_cancel(self._claims, self.size)
            shared_quiet(self._claims)  # (no thread is still inside a drain of these fits)
        self.size = 0
        self._layout.clear()
        self._keep = []
        self._f64 = self._u8 = None
        self._out = None
        self._ran = False
        self._open = False

    def reserve(self, Py_ssize_t n):
        """Room for ``n`` staged fits in all (staging that many allocates no request twice)."""
        if n > 0:
            self._rq.reserve(n)
            self._err.reserve(n)
            self._ok.reserve(n)

    def add_spec(self, Program prog not None, uintptr_t compiled, FitSpec spec not None,
                 x0=None):
        """Stage the calibration ``spec`` describes of ``prog`` (whose free names are those
        ``spec``'s inputs were bound for), compiled as ``compiled``; returns its index. x0:
        [P, S] starting values in place of the spec's."""
        return self._add(prog, compiled, spec, x0)

    def add_ready(self, list items not None, Py_ssize_t start, dict ready not None, client,
                  list staged not None, plan, bint starts=False, dict evaluations=None,
                  tuple evaluated=None):
        """Stage ``items[start:]`` (fit_many's (index, Program, extra) items) in order, in one
        call: each whose program's free names have an entry (meta, FitSpec) in ``ready`` (a
        FitPlan's, of the free names it has checked, bound and staged before), compiled for
        ``client``, its extra None (the spec's starting values) or, with ``starts``, (the
        spec's parameter names, [P, S] starting values); or, its extra a string (an evaluation
        alone: FitSetup.begin's ``evaluated``), whose free names have a FitSpec in
        ``evaluations`` (FitPlan.stage_evaluation's), staged with the meta ``evaluated``;
        appends (position, ``plan``, (meta, its index)) to ``staged``
        (``ndvm.parallel._stage``'s). Stops at the first item it cannot stage so (FitPlan.stage
        or stage_evaluation stages it, or says why it cannot be) and returns its position
        (len(items) when every item is staged)."""
        cdef Py_ssize_t i, n = len(items)
        cdef tuple item, entry, pair
        cdef Program prog
        cdef FitSpec spec
        # (the last free names looked up in ``ready`` and what they found: a round's programs
        # share a few tuples of free names (Program.free_names is one object a text of names),
        # and a tuple's hash is made again at every lookup)
        cdef object names = None, named = None
        try:
            key = client.name  # (read once a call: Program._compiled_as)
        except Exception:  # (FitPlan.stage raises it again, for the first item)
            return start
        for i in range(start, n):
            item = <tuple?>items[i]
            if type(item[1]) is not Program:
                return i
            prog = <Program>item[1]
            extra = item[2]
            x0 = None
            if type(extra) is str:  # (an evaluation alone, of free names staged before)
                found = None if evaluations is None else evaluations.get(prog.free_names)
                if found is None or evaluated is None:
                    return i
                meta, spec = evaluated, <FitSpec?>found
            else:
                if extra is not None:
                    if not starts or type(extra) is not tuple:
                        return i
                    pair = <tuple>extra
                if prog.free_names is not names:
                    names, named = prog.free_names, ready.get(prog.free_names)
                found = named
                if found is None:
                    return i
                entry = <tuple?>found
                meta, spec = entry[0], <FitSpec?>entry[1]
                if extra is not None:  # (FitPlan.stage takes other names or shapes as an init)
                    x0 = pair[1]
                    if (pair[0] != (<tuple?>meta)[0] or type(x0) is not np.ndarray
                            or (<cnp.ndarray>x0).ndim != 2
                            or (<cnp.ndarray>x0).shape[0] != len(pair[0])
                            or <size_t>(<cnp.ndarray>x0).size != spec._x0.size()):
                        return i
            try:  # (either way: compiled for the client, staged with its meta)
                compiled = prog._compiled_as(client, key)
            except Exception:  # (FitPlan.stage or stage_evaluation raises it again, for the
                return i       # candidate)
            staged.append((i, plan, (meta, self._add(prog, compiled, spec, x0))))
        return n

    cdef Py_ssize_t _add(self, Program prog, uintptr_t compiled, FitSpec spec,
                         object x0) except -1:
        if self._ran:
            raise RuntimeError("this FitBatch has run: reset() it before staging more fits")
        _same_names(<Inputs>spec._keep[0], prog)
        cdef cnp.ndarray start
        cdef const double* at = spec._x0.data()
        if x0 is not None:
            start = _contiguous(x0, cnp.NPY_DOUBLE, spec._x0.size(), "x0")
            at = <const double*>cnp.PyArray_DATA(start)
        cdef Py_ssize_t k = self.size
        if <size_t>k == self._rq.size():
            self._rq.resize(k + 1)
            self._err.resize(k + 1)
            self._ok.resize(k + 1)
        self._keep.append(prog)
        self._keep.append(spec)
        # (copied in place, the slot's vectors reusing their room from the batch's earlier
        # rounds: _copy_request)
        cdef FitRequest* rq = &self._rq[k]
        _copy_request(rq, &spec._rq)
        rq.expanded = <const void*>prog._x.get()
        rq.compiled = <const void*>compiled
        self._layout.add(spec._rq, at)  # (copied; run() points the request at its places)
        self.size = k + 1
        return k

    def run(self, Machine machine not None, bint interruptible=False):
        """Run every staged fit on ``machine``, back to back, in one call without the GIL.
        ``interruptible`` (on the main thread): Ctrl-C and SIGTERM stop the fits at their next
        evaluation step, and what the signal's Python handler raises is raised (the fits'
        results are not read; interrupt.hpp)."""
        self._prepare()
        machine.generation += 1
        machine._kept = False  # (the fits overwrite its tape)
        cdef bint armed = interruptible and get_ident() == _MAIN_THREAD
        if armed:
            interrupt_arm(machine._limits()[0], True)
        with nogil:
            fit_batch(self._rq.data(), self.size, machine._ptr, machine.dtype_code,
                      self._err.data(), self._ok.data())
        if armed and interrupt_disarm(machine._limits()[0]):
            PyErr_CheckSignals()  # (raises what the signal's Python handler raises)
        self._finish()

    def open(self):
        """Make the staged fits ready for drain() from several threads."""
        self._prepare()
        shared_reset(self._claims)
        self._open = True

    def drain(self, Machine machine not None, limit=None, Stop stop=None):
        """Run fits of the opened batch on ``machine`` (this thread's), claiming one at a time
        without the GIL, until every fit is claimed (another thread's last one may still run),
        ``limit`` fits are run, or ``stop`` (a Stop, when given) is set, looked at before each
        claim. Returns how many this call ran; nothing happens on a batch that is not open
        (closed already)."""
        cdef size_t most = SIZE_MAX if limit is None else <size_t>max(0, int(limit))
        cdef size_t ran = 0
        cdef const StopSign* sign = NULL
        if stop is not None:
            sign = stop.sign
        if not self._open:
            return 0
        machine.generation += 1
        machine._kept = False  # (the fits overwrite its tape)
        shared_enter(self._claims)  # (under the GIL, with the check above: reset waits for it)
        try:
            with nogil:
                ran = fit_shared(self._rq.data(), self.size, self._claims, machine._ptr,
                                 machine.dtype_code, self._err.data(), self._ok.data(), most,
                                 sign)
        finally:
            shared_leave(self._claims)
        return ran

    def quiet(self):
        """Whether no thread is inside a drain() of this batch, without waiting (reset() then
        waits for none; once the batch is closed no thread enters one)."""
        return shared_is_quiet(self._claims)

    def finished(self):
        """Whether every fit of the opened batch has finished, without waiting (close() then
        returns at once); True for a batch that is not open."""
        return not self._open or shared_finished(self._claims, self.size)

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
        cdef cnp.npy_intp dims[1]
        if self._ran:
            raise RuntimeError("this FitBatch has run already: reset() it first")
        cdef Py_ssize_t n64 = max(<Py_ssize_t>self._layout.n64, 1)
        cdef Py_ssize_t n8 = max(<Py_ssize_t>self._layout.n8, 1)
        if not _reusable(<PyObject*>self._whole_f64, n64):
            dims[0] = n64 + n64 // 4  # (room for a slightly larger batch next time)
            self._whole_f64 = cnp.PyArray_EMPTY(1, dims, cnp.NPY_DOUBLE, 0)
        if not _reusable(<PyObject*>self._whole_u8, n8):
            dims[0] = n8 + n8 // 4
            self._whole_u8 = cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0)
        self._f64 = self._whole_f64[:n64]
        self._u8 = self._whole_u8[:n8]
        memset(cnp.PyArray_DATA(self._u8), 0, n8)
        self._layout.point(self._rq.data(), <double*>cnp.PyArray_DATA(self._f64),
                           <unsigned char*>cnp.PyArray_DATA(self._u8))
        self._ran = True

    cdef _finish(self):
        """The FitOutputs of the fits that ran."""
        cdef FitOutputs out = FitOutputs.__new__(FitOutputs)
        self._layout.collect(self._rq.data())
        out._f64 = self._f64
        out._u8 = self._u8
        out._slot = self._layout.slots
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

    def fit_result(self, Py_ssize_t k, cls, tuple meta):
        """Fit k's result as a ``cls`` (ndvm.FitResult), or its error raised: see
        ``FitOutputs.fit_result``; meta is (names, optimizer, budget, tols, want_cov)."""
        self._check(k)
        return self._out.fit_result(k, cls, meta)

    def outcomes(self, list staged, list results):
        """What a search keeps of each fit, read for a whole batch in one call, without a
        FitResult: for each (pos, plan, (meta, k)) of ``staged`` whose fit k ran,
        ``results[pos] = (params, after)``: params the best start's (name -> float, in meta's
        names order: a FitResult's ``params``), after ``after_numbers`` of its evaluation after
        the fit. Returns the items of ``staged`` whose fit failed (``fit_result`` raises their
        errors)."""
        cdef list failed = []
        cdef Py_ssize_t k
        if not self._ran or self._open:
            raise RuntimeError("this FitBatch has not run, or is open: close() it first")
        for item in staged:
            k = (<tuple>(<tuple>item)[2])[1]
            if k < 0 or k >= self.size:
                raise IndexError(f"no result {k} in this batch")
            if not self._ok[k]:
                failed.append(item)
                continue
            results[(<tuple>item)[0]] = self._out.outcome(k, (<tuple>(<tuple>item)[2])[0][0])
        return failed
