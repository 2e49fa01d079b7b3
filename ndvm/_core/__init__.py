"""The native core of ndvm: reader, expander, value model, lanes, tape, primitives (C++)."""
from ndvm._core._core import Dotted, Machine, Program, Symbol, parse, prelude, read

__all__ = ["Dotted", "Machine", "Program", "Symbol", "parse", "prelude", "read"]
