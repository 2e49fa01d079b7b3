"""ndvm: a native differentiable virtual machine for program-and-parameter co-search.

    prog = ndvm.parse("(* a (exp (- 0 (* b t))))")
    res = ndvm.Evaluator().evaluate(prog, params={"a": 1.0, "b": 0.3}, data={"t": t}, grad=True)
"""
from ndvm import clients
from ndvm._core import Program, parse, read
from ndvm.errors import (
    EvalError, FormError, InternalError, LimitError, ReadError, SchemeError, UnboundError,
)
from ndvm.evaluator import Evaluator, Result
from ndvm.fit import FitResult, fit
from ndvm.fit_options import FitOptions
from ndvm.parallel import CandidateError, evaluate_many, fit_many
from ndvm._compare import Comparison, compare

__version__ = "0.1.0"

# The co-search package sits above this API (it imports ndvm): it is loaded on first use of
# ndvm.search, ndvm.Task or ndvm.get_task, never by `import ndvm` itself; the scikit-learn
# estimator imports scikit-learn, so it too is loaded only when asked for.
_LAZY = {"Task": "ndvm.cosearch", "search": "ndvm.cosearch", "get_task": "ndvm.cosearch",
         "SymbolicRegressor": "ndvm.estimator"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ndvm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CandidateError", "Comparison", "Evaluator", "EvalError", "FitOptions", "FitResult", "FormError",
    "InternalError", "LimitError", "Program", "ReadError", "Result", "SchemeError", "Task",
    "SymbolicRegressor", "UnboundError", "clients", "compare", "evaluate_many", "fit", "fit_many",
    "get_task", "parse", "read", "search",
]
