# distutils: language = c++
"""dmci's native entry point (the tree walk itself is C++, in eval.hpp)."""
from libc.stdint cimport uintptr_t
from libcpp cimport bool

from ndvm._core.core cimport ErrorInfo, RunRequest


cdef extern from "entry.hpp" namespace "ndvm::dmci":
    bool entry(void* machine, int dtype, const void* expanded, const void* compiled,
               const RunRequest* rq, ErrorInfo* err) noexcept nogil


def entry_address():
    """Address of the C entry point the core calls with the GIL released."""
    return <uintptr_t>&entry
