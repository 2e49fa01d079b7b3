# Scalar draws of a numpy Generator at C speed (included by _core.pyx): the genetic operators draw
# ~14 integers and uniforms per child, each a ~2 us numpy call. Draws reads the Generator's own
# BitGenerator through numpy's C interface (numpy/random/bitgen.h) and repeats numpy's scalar
# algorithms (draws.hpp, shared with the genetic operators of breed.pxi), so the stream is numpy's
# draw for draw (tests/test_draws.py checks it). Its normal draws are numpy's own C functions
# (numpy/random/distributions.h, linked from numpy's static npyrandom library).
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.stdint cimport uint64_t
cimport cython


cdef extern from "numpy/random/bitgen.h":
    ctypedef struct bitgen_t:
        void* state
        uint64_t (*next_uint64)(void*) nogil
        uint32_t (*next_uint32)(void*) nogil
        double (*next_double)(void*) nogil


cdef extern from "numpy/random/distributions.h" nogil:
    double random_standard_normal(bitgen_t* bitgen_state)
    double random_normal(bitgen_t* bitgen_state, double loc, double scale)


cdef extern from "draws.hpp" namespace "ndvm::draws" nogil:
    uint32_t bounded32(bitgen_t* bg, uint32_t span)
    double uniform(bitgen_t* bg, double low, double high)


@cython.final  # (its C methods called directly, inlined: the operators draw ~14 times a child)
cdef class Draws:
    """``integers``, ``random``, ``normal`` and ``standard_normal`` of the numpy Generator
    ``rng`` (scalars), the same numbers from the same state (its stream moves on as numpy's
    would); ``uniform``, and ``normal`` and ``standard_normal`` with other arguments, are the
    Generator's own. Pickles as its Generator (one object shared)."""

    cdef readonly object rng
    cdef object bits      # (keeps the BitGenerator that owns *bg alive)
    cdef bitgen_t* bg

    def __cinit__(self, rng):
        self.rng = rng
        self.bits = rng.bit_generator
        self.bg = <bitgen_t*>PyCapsule_GetPointer(self.bits.capsule, "BitGenerator")

    def __reduce__(self):
        return Draws, (self.rng,)

    def random(self):
        """``rng.random()``: a float in [0, 1)."""
        return self.bg.next_double(self.bg.state)

    def integers(self, low, high=None):
        """``rng.integers(low, high)`` (``integers(n)``: in [0, n)) as a Python int."""
        if high is None:
            low, high = 0, low
        if high <= low:
            raise ValueError(f"integers: low >= high ({low} >= {high})")
        span = high - low - 1
        if span > 0xFFFFFFFE:  # (numpy's 64-bit branches: never needed by the operators)
            return int(self.rng.integers(low, high))
        return low + self._bounded32(<uint32_t>span)

    cdef uint32_t _bounded32(self, uint32_t span):
        # numpy's bounded draw for a span below 2**32 - 1 (draws.hpp)
        return bounded32(self.bg, span)

    cdef inline Py_ssize_t _below(self, Py_ssize_t n) except -1:
        # ``integers(n)`` for the operators' list lengths, as a C integer (most of a child's
        # draws: the common span inline, the rest out of line)
        if 0 < n and n - 1 <= <Py_ssize_t>0xFFFFFFFE:
            return bounded32(self.bg, <uint32_t>(n - 1))
        return self._below_rare(n)

    cdef Py_ssize_t _below_rare(self, Py_ssize_t n) except -1:
        # (an empty range, or a span past 32 bits: numpy's own 64-bit branches)
        if n <= 0:
            raise ValueError(f"integers: low >= high (0 >= {n})")
        return int(self.rng.integers(n))

    cdef inline double _random(self):
        return self.bg.next_double(self.bg.state)

    def uniform(self, *args):
        return self.rng.uniform(*args)

    def normal(self, *args):
        """``rng.normal(loc, scale)``: one float (other arguments: the Generator's own)."""
        if (len(args) == 2 and type(args[0]) is float and type(args[1]) is float
                and args[1] >= 0.0):  # (numpy's checks for any other scale: its errors)
            return random_normal(self.bg, args[0], args[1])
        return self.rng.normal(*args)

    def standard_normal(self, *args):
        """``rng.standard_normal()``: one float (other arguments: the Generator's own)."""
        if not args:
            return random_standard_normal(self.bg)
        return self.rng.standard_normal(*args)

    cdef inline double _standard_normal(self):
        return random_standard_normal(self.bg)

    cdef inline double _normal(self, double loc, double scale):
        return random_normal(self.bg, loc, scale)
