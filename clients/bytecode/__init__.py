"""bytecode: compiles a program to stack bytecode once, then runs it on a native VM (C++).

``disassemble(program)`` lists what a program became; ``opcodes()`` documents the instruction set.
"""
from ndvm._core import parse
from ndvm.clients.bytecode._bytecode import Compiled, compile_program, entry_address, opcodes


class BytecodeClient:
    """Compiles the core's expanded tree to a Chunk (cached per Program) and runs it on the VM."""

    name = "bytecode"
    entry = entry_address()

    def compile(self, program):
        """The program's Chunk; the core passes its address to the entry point."""
        return compile_program(program)


CLIENT = BytecodeClient()


def disassemble(program):
    """The bytecode listing of ``program`` (an ndvm.Program or source text)."""
    if isinstance(program, str):
        program = parse(program)
    return program.compiled(CLIENT).disassemble()


__all__ = ["CLIENT", "BytecodeClient", "Compiled", "disassemble", "opcodes"]
