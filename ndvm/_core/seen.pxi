# The sources a search has met (included by _core.pyx): a set of 64-bit digests (seen.hpp), asked
# for every child the operators make (Breeder.children) and kept by every island between epochs.
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize


cdef extern from "seen.hpp" namespace "ndvm::seen" nogil:
    uint64_t seen_digest "ndvm::seen::digest"(const char* text, size_t n)
    cdef cppclass DigestSet:
        bint insert(uint64_t d)
        bint contains(uint64_t d)
        size_t size()
        void pack(unsigned char* out)
        void unpack(const unsigned char* data, size_t n)


cdef inline uint64_t _source_digest(object source) except? 0:
    cdef Py_ssize_t n
    cdef const char* p
    if type(source) is not str:
        if not isinstance(source, str):
            raise TypeError(f"a source is a str, not {type(source).__name__}")
    try:
        p = PyUnicode_AsUTF8AndSize(source, &n)
    except UnicodeEncodeError:  # (a lone surrogate, say from a JSON "\ud800": named by its
        # surrogates' own bytes, which no valid text's UTF-8 holds; the parse says it is invalid)
        raw = source.encode("utf-8", "surrogatepass")
        return seen_digest(PyBytes_AS_STRING(raw), <size_t>len(raw))
    return seen_digest(p, <size_t>n)


def source_digest(str source):
    """The 64-bit digest that names ``source`` in a Seen (the same in every process)."""
    return _source_digest(source)


cdef class Seen:
    """The sources a search has met, as 64-bit digests (``source_digest``): ``in`` and ``add``
    take sources, ``add_new`` both at once; it pickles as 8 bytes a source (an island between
    epochs carries it), the same digests in every process."""

    cdef DigestSet digests
    cdef vector[uint64_t] _added  # the digests added since ``mark()``, in order
    cdef bint _marked

    def __contains__(self, source):
        return self._has(source)

    cdef inline bint _has(self, object source) except -1:
        # ``source in self`` (Breeder.children asks it of a Seen directly: no slot call)
        return self.digests.contains(_source_digest(source))

    cdef bint _insert(self, uint64_t d):
        if not self.digests.insert(d):
            return False
        if self._marked:
            self._added.push_back(d)
        return True

    cdef inline bint _add_new(self, object source) except -1:
        # ``add_new(source)`` (a round's records, rounds.pxi, add theirs directly: no call)
        return self._insert(_source_digest(source))

    def add(self, source):
        """Add ``source``."""
        self._add_new(source)

    def add_new(self, source):
        """Add ``source``; False when it was already met (one digest for both)."""
        return self._add_new(source)

    def __len__(self):
        return self.digests.size()

    def mark(self):
        """Start keeping what is added from now on (``added``), forgetting what was kept."""
        self._added.clear()
        self._marked = True

    def added(self):
        """The digests added since ``mark()``, packed as a Seen pickles them (8 bytes each):
        ``Seen.of`` of an earlier packing and of every ``added()`` since is this Seen."""
        cdef Py_ssize_t n = <Py_ssize_t>self._added.size()
        out = PyBytes_FromStringAndSize(NULL, 8 * n)
        if n:
            memcpy(PyBytes_AS_STRING(out), self._added.data(), 8 * n)
        return out

    def extend(self, bytes packed):
        """Add the packed digests ``packed`` (as ``added()`` gives them; not kept for
        ``added()`` themselves): the Seen of an earlier packing, extended by every ``added()``
        since, is the Seen they came from."""
        _unpack_into(self, packed)

    @staticmethod
    def of(packed):
        """The Seen of these packed digests (a Seen's pickled form, or several joined)."""
        return _seen_from(bytes(packed))

    def __reduce__(self):
        packed = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>(8 * self.digests.size()))
        self.digests.pack(<unsigned char*>PyBytes_AS_STRING(packed))
        return _seen_from, (packed,)


def _seen_from(bytes packed):
    """The Seen that pickled as ``packed`` (its digests, 8 bytes each)."""
    cdef Seen s = Seen()
    _unpack_into(s, packed)
    return s


cdef int _unpack_into(Seen s, bytes packed) except -1:
    cdef Py_ssize_t size = len(packed)
    if size % 8:
        raise ValueError(f"a Seen packs 8 bytes a digest, got {size} bytes")
    s.digests.unpack(<const unsigned char*>PyBytes_AS_STRING(packed), <size_t>(size // 8))
    return 0
