# The sources a search has met (included by _core.pyx): a set of 64-bit digests (seen.hpp), asked
# for every child the operators make (Breeder.children) and kept by every island between epochs.
from libcpp.unordered_set cimport unordered_set


cdef extern from "seen.hpp" namespace "ndvm::seen" nogil:
    uint64_t seen_digest "ndvm::seen::digest"(const char* text, size_t n)


cdef inline uint64_t _source_digest(object source) except? 0:
    cdef Py_ssize_t n
    cdef const char* p
    if type(source) is not str:
        if not isinstance(source, str):
            raise TypeError(f"a source is a str, not {type(source).__name__}")
    p = PyUnicode_AsUTF8AndSize(source, &n)
    return seen_digest(p, <size_t>n)


def source_digest(str source):
    """The 64-bit digest that names ``source`` in a Seen (the same in every process)."""
    return _source_digest(source)


cdef class Seen:
    """The sources a search has met, as 64-bit digests (``source_digest``): ``in`` and ``add``
    take sources, ``add_new`` both at once; it pickles as 8 bytes a source (an island between
    epochs carries it), the same digests in every process."""

    cdef unordered_set[uint64_t] digests

    def __contains__(self, source):
        return self.digests.count(_source_digest(source)) != 0

    def add(self, source):
        """Add ``source``."""
        self.digests.insert(_source_digest(source))

    def add_new(self, source):
        """Add ``source``; False when it was already met (one digest for both)."""
        return self.digests.insert(_source_digest(source)).second

    def __len__(self):
        return self.digests.size()

    def __reduce__(self):
        packed = np.fromiter(self.digests, dtype=np.uint64, count=self.digests.size())
        return _seen_from, (packed.tobytes(),)


def _seen_from(bytes packed):
    """The Seen that pickled as ``packed`` (its digests, 8 bytes each)."""
    cdef Seen s = Seen()
    if len(packed) % 8:
        raise ValueError(f"a Seen packs 8 bytes a digest, got {len(packed)} bytes")
    for d in np.frombuffer(packed, dtype=np.uint64).tolist():
        s.digests.insert(<uint64_t>d)
    return s
