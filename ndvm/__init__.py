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
from ndvm.parallel import CandidateError, evaluate_many, fit_many
from ndvm.cosearch import Task, get_task, search
from ndvm._compare import Comparison, compare

__version__ = "0.1.0"


def __getattr__(name):
    if name == "SymbolicRegressor":  # imports scikit-learn: only when asked for
        from ndvm.estimator import SymbolicRegressor
        return SymbolicRegressor
    raise AttributeError(f"module 'ndvm' has no attribute {name!r}")

__all__ = [
    "CandidateError", "Comparison", "Evaluator", "EvalError", "FitResult", "FormError",
    "InternalError", "LimitError", "Program", "ReadError", "Result", "SchemeError", "Task",
    "SymbolicRegressor", "UnboundError", "clients", "compare", "evaluate_many", "fit", "fit_many",
    "get_task", "parse", "read", "search",
]
