"""The native core of ndvm: reader, expander, value model, lanes, tape, primitives (C++)."""
from ndvm._core._core import (
    REDUCE_LANE, REDUCE_NONE, REDUCE_START, Dotted, Inputs, Machine, Program, Symbol, bind, parse,
    prelude, read,
)

__all__ = ["REDUCE_LANE", "REDUCE_NONE", "REDUCE_START", "Dotted", "Inputs", "Machine",
           "Program", "Symbol", "bind", "parse", "prelude", "read"]
