# distutils: language = c++
"""The bytecode client's native side: compile a Program into a Chunk, disassemble it, and the
entry point the core calls with the GIL released (the VM itself is C++, in vm.hpp)."""
from libc.stdint cimport uintptr_t
from libcpp cimport bool
from libcpp.string cimport string
from libcpp.vector cimport vector

from ndvm._core.core cimport ErrorInfo, RunRequest


cdef extern from "value.hpp" namespace "ndvm":
    cdef cppclass Value:
        pass


cdef extern from "chunk.hpp" namespace "ndvm::bytecode":
    cdef cppclass Instr:
        pass

    cdef cppclass Chunk:
        vector[Instr] code
        vector[Value] constants

    string disassemble(const Chunk& c) except +
    const char* opcode_name(int op)
    const char* opcode_doc(int op)
    int OP_COUNT


cdef extern from "entry.hpp" namespace "ndvm::bytecode":
    bool entry(void* machine, int dtype, const void* expanded, const void* compiled,
               const RunRequest* rq, ErrorInfo* err) noexcept nogil
    bool compile_guarded(const void* expanded, Chunk* out, ErrorInfo* err) nogil


def entry_address():
    """Address of the C entry point the core calls with the GIL released."""
    return <uintptr_t>&entry


cdef class Compiled:
    """A program compiled to bytecode. ``int(compiled)`` is the Chunk's address for the core.

    Holds the Program, whose expanded tree the chunk's line table points into.
    """

    cdef Chunk* _chunk
    cdef readonly object program

    def __cinit__(self):
        self._chunk = new Chunk()

    def __dealloc__(self):
        del self._chunk

    def __index__(self):
        return <uintptr_t>self._chunk

    def __int__(self):
        return <uintptr_t>self._chunk

    def __repr__(self):
        return (f"<bytecode of {self.program.name!r}: {self._chunk.code.size()} instructions, "
                f"{self._chunk.constants.size()} constants>")

    @property
    def n_instructions(self):
        """Number of instructions in the chunk."""
        return self._chunk.code.size()

    def disassemble(self):
        """The listing of the chunk: one line per instruction."""
        return disassemble(self._chunk[0]).decode("utf-8", "replace")


def compile_program(program):
    """Compile an ndvm.Program (already read and expanded by the core) to a Compiled chunk."""
    cdef ErrorInfo err
    cdef uintptr_t addr = program._address
    cdef Compiled c = Compiled.__new__(Compiled)
    c.program = program
    if not compile_guarded(<const void*>addr, c._chunk, &err):
        from ndvm import errors
        raise errors.error_class(err.kind)(err.message.decode("utf-8", "replace"))
    return c


def opcodes():
    """The opcode table: a list of (name, operands and stack effect)."""
    return [(opcode_name(i).decode(), opcode_doc(i).decode()) for i in range(OP_COUNT)]
