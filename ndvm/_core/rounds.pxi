# A round's records made from its proposals (included by _core.pyx): ``_Rounds.prepare``'s loop
# over a round's sources, one native call a round instead of some forty bytecodes a source; a
# round's fits scored (``Scoring``) and its records read at its end.
from libc.math cimport INFINITY, NAN


def first_line(e):
    """What a record says of the exception ``e`` that made it invalid or failed: its message's
    first line, or its type's name when it has none."""
    cdef str text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


def round_records(list srcs not None, dict blank not None, Py_ssize_t next_id,
                  Py_ssize_t id_step, recorded, Seen seen not None, made,
                  bint simplify, tree_of, to_source, size, skeleton, params, mismatch):
    """The records of a round's sources ``srcs`` (``_Rounds.prepare``'s rules), numbered from
    ``next_id`` by ``id_step``: (records in proposal order, the records to validate, their
    models, the next id). Each record is a copy of ``blank`` (its fields in the records' order)
    with its id, its source and no params. A source ``recorded`` (an earlier session's records
    by id) as another source raises ``mismatch(id, recorded source, source)``. A source met
    before (``seen``) is a duplicate. Else its model is the proposer's canonical entry in
    ``made`` (tree, source, size, skeleton) when it has one: the source itself, with the
    entry's size and skeleton; else it is read from its tree, ``tree_of(source, entry,
    simplify)`` (the source read, or the entry's tree, simplified when ``simplify``):
    ``to_source(tree)``, a duplicate when that model was met before, with ``size(tree)`` and
    ``skeleton(tree, params)``. A source whose model cannot be made is invalid, its record's
    error the first line of why (an exception other than ``Exception`` ends the round)."""
    cdef list records = [], todo = [], models = []
    cdef dict rec
    cdef object src, old, canon, tree, model
    for src in srcs:
        rec = blank.copy()
        rec["id"] = next_id
        rec["proposed"] = src
        rec["params"] = {}
        records.append(rec)
        if recorded:
            old = recorded.get(next_id)
            if old is not None and old["proposed"] != src:
                raise mismatch(next_id, old["proposed"], src)
        next_id += id_step
        if not seen._add_new(src):
            rec["status"] = "duplicate"
            continue
        try:
            canon = ((<dict>made).get(src) if type(made) is dict else made.get(src)) if made \
                else None
            # (a proposer's canonical entry: its tree, made when read, is read only to simplify
            # it)
            tree = tree_of(src, canon, simplify) if canon is None or simplify else None
            model = to_source(tree) if canon is None else src
            rec["model"] = model
            if model is not src and model != src and not seen._add_new(model):
                rec["status"] = "duplicate"
                continue
            if canon is None:
                rec["size"] = size(tree)
                rec["skeleton"] = skeleton(tree, params)
            elif type(canon) is _Made:  # (Breeder.children's entries: their fields read
                rec["size"] = (<_Made>canon).size  # directly, as its [2] and [3] give them)
                rec["skeleton"] = (<_Made>canon).skel
            else:
                rec["size"] = canon[2]
                rec["skeleton"] = canon[3]
        except Exception as e:  # (an invalid candidate is a record)
            rec["error"] = first_line(e)
            continue
        todo.append(rec)
        models.append(model)
    return records, todo, models, next_id


def round_validated(list todo not None, list got not None):
    """The records ``todo`` of a round with what validating their models gave, ``got`` (per
    model: (program, params), or the exception that makes it invalid): (the valid ones' (program,
    params) items, their records), the others' records given their error's first line."""
    cdef list items = [], slots = []
    cdef Py_ssize_t k, n = min(len(todo), len(got))
    for k in range(n):
        g = got[k]
        if isinstance(g, Exception):
            (<dict>todo[k])["error"] = first_line(g)
        else:
            items.append(g)
            slots.append(todo[k])
    return items, slots


cpdef double r_squared(double mse, double var):
    """1 - mse / var, the share of the target's variance a model explains; for a constant target
    (var 0) 1 when the model is exact and 0 otherwise (scikit-learn's convention); -inf when the
    model has no finite error. (The search's one rule of R^2, ``ndvm.cosearch.task.r_squared``:
    a record's, scored here by ``Scoring.errors`` without a Python call, and the selection's.)"""
    if not _isfinite(mse):
        return -INFINITY
    if var > 0:
        return 1.0 - mse / var
    return 1.0 if mse == 0 else 0.0


cdef class Scoring:
    """What scores a fit of a Scorer's task (mse): the target's spread about its mean (NaN
    without a probe between the data points), the training and held-out points' counts and the
    held-out target's variance (NaN when it is None: a likelihood's, never scored here). Its
    methods are the one place of the rules ``Scorer.assess``, ``_off`` and ``_errors`` keep and
    ``round_scored`` applies a record at a time (R^2 by ``r_squared``)."""

    cdef readonly double spread, held_var
    cdef readonly Py_ssize_t n, m

    def __init__(self, double spread, Py_ssize_t n, Py_ssize_t m, held_var):
        self.spread, self.n, self.m = spread, n, m
        self.held_var = NAN if held_var is None else held_var

    cpdef off(self, double bad, double most):
        """Why a fit is unusable between the data points, of its probe's count of non-finite
        values ``bad`` and its values' largest distance from the target's mean ``most`` (a
        non-finite value, or a pole: beyond 10x the target's spread), or None."""
        if bad != 0.0:  # (NaN too, as Python's truth of a float)
            return "not finite between the data points (a pole or a domain edge)"
        if most > 10.0 * self.spread:
            return "a pole between the data points (value beyond 10x the target's spread)"
        return None

    cpdef tuple errors(self, double train_sse, double held_sse):
        """(train error, held-out error, R^2) from the sums of squared errors on the training
        and held-out points: each sum over its count (np.mean's own arithmetic; NaN without
        points), inf when not finite, R^2 of the held-out error."""
        cdef double tr = train_sse / <double>self.n if self.n else NAN
        cdef double ho = held_sse / <double>self.m if self.m else NAN
        if not _isfinite(tr):
            tr = INFINITY
        if not _isfinite(ho):
            ho = INFINITY
        return tr, ho, r_squared(ho, self.held_var)

    cdef tuple _assessed(self, prog, params, after, evaluate):
        """``assess``'s rule: with ``after`` "ok" (its numbers: the probe's, the training
        points' and the held-out points', each a non-finite count, the largest distance from
        the target's mean or reference and a sum of squares) only arithmetic is left; else
        ``evaluate(prog, params, after)`` evaluates the fit now."""
        if after is None or not after[0] == "ok":
            return evaluate(prog, params, after)
        stats = after[1]
        if type(stats) is tuple and len(<tuple>stats) < 9:  # (Python's words for the unpacking)
            raise ValueError(f"not enough values to unpack (expected 9, got {len(<tuple>stats)})")
        bad, most, _, _, _, tr, _, _, ho = stats
        why = self.off(bad, most)
        return (why, None) if why is not None else (None, self.errors(tr, ho))

    def assess(self, prog, params, after, evaluate):
        """(why it is off-domain, None) or (None, (train error, held-out error, R^2)) of the
        fitted ``params`` of ``prog``: from ``after`` (its fit's evaluation after it,
        ``ndvm.parallel.fit_outcome``'s (status, numbers)) when "ok", else what
        ``evaluate(prog, params, after)`` gives (``Scorer.assess``)."""
        return self._assessed(prog, params, after, evaluate)


def round_fits(list items not None, bint evaluated):
    """A round's (program, params) ``items`` sorted out for its calibrations
    (``_Calibration.__init__``'s rules), in one pass: (the positions of those with params, of
    those without (none unless ``evaluated``: their programs are evaluated with the batch, as
    the fitted ones are after their fits), the programs of each, the params of the first, and
    how many params those hold in all)."""
    cdef list todo = [], bare = [], progs = [], bare_progs = [], names = []
    cdef Py_ssize_t i, k = 0
    for i in range(len(items)):
        prog, ps = items[i]
        if ps:
            todo.append(i)
            progs.append(prog)
            names.append(ps)
            k += len(ps)
        elif evaluated:
            bare.append(i)
            bare_progs.append(prog)
    return todo, bare, progs, bare_progs, names, k


def round_fitted(list items not None, list todo not None, list bare not None, list got not None,
                 outcome):
    """What a round's calibrations ``got`` give its (program, params) ``items``
    (``_Calibration.finish``'s rules): (per item its fitted params, {} without params, or the
    error that stopped its fit; per item its fit's evaluation after it, or None). ``got`` holds
    the results of the items at ``todo``, then of those at ``bare`` (evaluated, not fitted),
    each (params, after) or a result that ``outcome`` makes that pair of."""
    cdef Py_ssize_t i, k, n = len(items), t = len(todo)
    cdef list out = [None] * n, after = [None] * n
    for i in range(n):
        _, ps = items[i]
        if not ps:
            out[i] = {}
    for k in range(min(t, len(got))):
        i = todo[k]
        out[i], after[i] = _fit_pair(got[k], outcome)
    for k in range(min(len(bare), len(got) - t)):  # (their params stay {})
        after[<Py_ssize_t>bare[k]] = _fit_pair(got[t + k], outcome)[1]
    return out, after


cdef inline object _fit_pair(object r, object outcome):
    # a calibration's (params, its evaluation after it): ``r`` as it is when it is that pair,
    # else what ``outcome`` makes of it
    return r if type(r) is tuple else outcome(r)


def round_scored(list items not None, list slots not None, list fitted not None, list after,
                 Scoring scoring not None, evaluate, fit_seconds, stamp, good):
    """Score a round's calibrated records ``slots`` (``_Rounds.finish``'s rules): each is
    stamped with ``fit_seconds`` and the time ``stamp``; one whose calibration ``fitted`` gave
    no params (an exception) failed with its first line; else ``scoring.assess(program,
    params, its fit's evaluation after it, evaluate)`` (of ``items``' program and ``after``)
    says why it failed, or its (train error, held-out error, R^2): it is ok with them. Returns
    the first ok record that ``good`` accepts (None without ``good``, or when none is)."""
    cdef Py_ssize_t k, n = min(len(items), len(slots), len(fitted), len(after))
    cdef dict rec
    first = None
    for k in range(n):
        prog, _ = items[k]
        rec = slots[k]
        p = fitted[k]
        rec["fit_seconds"] = fit_seconds
        rec["time"] = stamp
        if not isinstance(p, dict):
            rec["status"] = "failed"
            rec["error"] = first_line(p)
            continue
        why, scores = scoring._assessed(prog, p, after[k], evaluate)
        rec["params"] = p
        if why is not None:
            rec["status"] = "failed"
            rec["error"] = why
        else:
            rec["status"] = "ok"
            rec["train_error"], rec["heldout_error"], rec["r2"] = scores
            if first is None and good is not None and good(rec):
                first = rec
    return first


def round_kept(list records not None, stamp, recorded, replayed):
    """A round's ``records`` read once at its end (``_Rounds.finish``'s rules): each without a
    time given ``stamp``; each that ``recorded`` (an earlier session's records by id) holds
    checked and given its times by ``replayed(recorded record, record)``. Returns the ok ones
    whose held-out error is finite (those a front or population may keep), in order."""
    cdef list ok = []
    cdef dict rec
    for r in records:
        rec = r
        if "time" not in rec:
            rec["time"] = stamp
        if recorded:
            old = recorded.get(rec["id"])
            if old is not None:
                replayed(old, rec)
        if rec["status"] == "ok" and _isfinite(<double>rec["heldout_error"]):
            ok.append(rec)
    return ok


def stamped_lines(bytes lines not None, bytes tail not None):
    """The record file's ``lines`` (JSON objects, one a line, each ending ``}\\n``) with each
    line's closing ``}\\n`` replaced by ``tail`` (``b', "time": 1.5}\\n'``: the fields a
    RecordBlock is stamped with, where it arrives): one pass over the bytes (bytes.replace of
    ``}\\n`` took ~1.7 ns a byte, however few the ``}`` were). A line that does not end so
    raises ValueError."""
    cdef const char* p = PyBytes_AS_STRING(lines)
    cdef Py_ssize_t n = len(lines), m = len(tail), count = 0, at = 0, end, k = 0
    cdef const char* nl
    while at < n:  # (the lines, counted and checked)
        nl = <const char*>memchr(p + at, b"\n", <size_t>(n - at))
        end = n if nl == NULL else nl - p
        if nl == NULL or end == at or p[end - 1] != b"}":
            raise ValueError(f"record line {count + 1} does not end with '}}\\n'")
        count += 1
        at = end + 1
    out = PyBytes_FromStringAndSize(NULL, n + count * (m - 2))
    cdef char* q = PyBytes_AS_STRING(out)
    cdef const char* t = PyBytes_AS_STRING(tail)
    at = 0
    while at < n:
        end = <const char*>memchr(p + at, b"\n", <size_t>(n - at)) - p
        memcpy(q + k, p + at, <size_t>(end - 1 - at))  # (the line without its "}")
        k += end - 1 - at
        memcpy(q + k, t, <size_t>m)
        k += m
        at = end + 1
    return out
