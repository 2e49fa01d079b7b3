"""The native core of ndvm: reader, expander, value model, lanes, tape, primitives (C++)."""
try:
    from ndvm._core._core import (
        AFTER_STATS, REDUCE_LANE, REDUCE_NONE, REDUCE_START, Dotted, FitBatch, FitSpec, Inputs, Machine, Program,
        Stop, Symbol, after_numbers, bind, parse, prelude, primitives, read,
    )
except ModuleNotFoundError as e:  # a source tree without the compiled extension
    if e.name != "ndvm._core._core":
        raise
    from pathlib import Path

    raise ImportError(
        f"ndvm was imported from a source tree without its compiled extension "
        f"({Path(__file__).resolve().parent.parent}). This happens when Python runs inside the "
        f"ndvm checkout after a regular `pip install .`: the checkout's ndvm/ folder shadows the "
        f"installed package. Run from another directory, or use `python -m pytest "
        f"--import-mode=importlib` / `python -m bench.run` (which prefer the installed "
        f"package), or install in place: pip install --no-build-isolation -e ."
    ) from None

__all__ = ["AFTER_STATS", "REDUCE_LANE", "REDUCE_NONE", "REDUCE_START", "Dotted", "FitBatch", "FitSpec", "Inputs",
           "Machine", "Program", "Stop", "Symbol", "after_numbers", "bind", "parse", "prelude", "primitives",
           "read"]
