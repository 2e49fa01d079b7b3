# The reader's data as Python values: read() (symbols, dotted pairs, nested lists), the
# prelude's text and the primitive table; included by _core.pyx.


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
    cdef Py_ssize_t k  # (by index: the Source's vectors are in its arena)
    symbols = [Symbol(src.get().symbols_[k].decode("utf-8"))
               for k in range(<Py_ssize_t>src.get().symbols_.size())]
    try:
        return [_datum(src.get(), src.get().top_[k], symbols)
                for k in range(<Py_ssize_t>src.get().top_.size())]
    except RecursionError:
        from ndvm.errors import ReadError
        raise ReadError("data nested too deeply to convert to Python lists", file=name) from None
