# A search's scored records folded into what it keeps between rounds (included by _core.pyx):
# the Pareto front's fold (ndvm.cosearch.records.Front.add), one native loop a round's records
# (and an island's block of them) instead of some fifty bytecodes a record.
from libc.math cimport isfinite as _isfinite


cdef inline object _field(object r, str key):
    """``r[key]`` (a dict's item read without a method call)."""
    if type(r) is dict:
        return (<dict>r)[key]
    return r[key]


def front_fold(list front not None, list sizes not None, list errors not None, records):
    """Fold ``records`` into ``front``, a Pareto front in order of size, then held-out error,
    then id, whose members' sizes and held-out errors ``sizes`` and ``errors`` hold (updated
    with it): a record not ok, or whose held-out error is not finite, is left out; another is
    placed after the members whose (size, error, id) is at most its own (found among the sizes,
    then among the members of its own size) and kept when the member before it has a higher
    error, dropping the members after it whose error is as high or higher. ``Front.add``'s
    rule, with Python's comparisons of the same objects (bisect's of the sizes, a tuple's of
    (error, id))."""
    cdef Py_ssize_t lo, hi, mid, i, j, n
    cdef object r, status, size, ho, e
    for r in records:
        status = r.get("status") if type(r) is not dict else (<dict>r).get("status")
        if status != "ok":
            continue
        ho = _field(r, "heldout_error")
        if not _isfinite(<double>ho):
            continue
        size = _field(r, "size")
        lo, hi = 0, len(sizes)  # (bisect.bisect_right(sizes, size))
        while lo < hi:
            mid = (lo + hi) // 2
            if size < sizes[mid]:
                hi = mid
            else:
                lo = mid + 1
        i = lo
        while i and sizes[i - 1] == size:  # (before the members of its size whose (error,
            e = errors[i - 1]               # id) is above its own)
            if not (_field(front[i - 1], "id") > _field(r, "id") if e == ho else e > ho):
                break
            i -= 1
        if i and errors[i - 1] <= ho:
            continue  # (dominated by the member before it: the lowest error before it)
        j, n = i, len(front)
        while j < n and errors[j] >= ho:
            j += 1  # (the members after it that it dominates: errors fall along a front)
        front[i:j] = [r]
        sizes[i:j] = [size]
        errors[i:j] = [ho]


def population_fold(list out not None, list keys not None, dict models not None,
                    list new not None, list records not None, Py_ssize_t most):
    """Fold ``records``, whose fitnesses are ``new`` (no NaN among them or ``keys``), into the
    population ``out`` of at most ``most`` records in order of fitness, whose fitnesses are
    ``keys`` and whose models map to their fitness in ``models`` (all three updated with it):
    a record is left out when its model's member is as fit, else that member is dropped; it is
    placed after the members as fit as it, and kept when that place is within ``most`` (the
    least fit member dropped past ``most``). ``rounds._Fittest.add``'s rule, with Python's
    comparisons of the same objects (bisect's of the fitnesses)."""
    cdef Py_ssize_t lo, hi, mid, i, j, n = len(records)
    cdef object k, r, model, held
    if len(new) != n:
        raise ValueError(f"{len(new)} fitnesses for {n} records")
    for i in range(n):
        k, r = new[i], records[i]
        model = _field(r, "model")
        held = models.get(model)
        if held is not None:
            if held <= k:
                continue  # (its model's member is as fit, and comes first)
            lo, hi = 0, len(keys)  # (bisect.bisect_left(keys, held))
            while lo < hi:
                mid = (lo + hi) // 2
                if keys[mid] < held:
                    lo = mid + 1
                else:
                    hi = mid
            j = lo
            while _field(out[j], "model") != model:  # (among the members as fit as it)
                j += 1
            del out[j]
            del keys[j]
        hi = len(keys)
        if hi and hi >= most and keys[hi - 1] <= k:
            continue  # (its place, after every member as fit, is past ``most``)
        lo = 0  # (bisect.bisect_right(keys, k))
        while lo < hi:
            mid = (lo + hi) // 2
            if k < keys[mid]:
                hi = mid
            else:
                lo = mid + 1
        if lo >= most:
            continue
        out.insert(lo, r)
        keys.insert(lo, k)
        models[model] = k
        if len(out) > most:
            del models[_field(out.pop(), "model")]
            keys.pop()
