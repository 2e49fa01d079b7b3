"""Co-search: propose program structures, calibrate each one's constants, keep the best.

    result = ndvm.search("damped", proposer="mutate", budget="60s", out="run/")
    result.front        # Pareto front of held-out error vs program size
    result.best         # the front member chosen by cross-validation (select.py), refitted
    result.sympy(), result.latex(), result.predict({"x": x})
"""
from ndvm.cosearch._calibrate import CalibrationError, calibrate, minimize_value
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.loop import ResumeMismatch, pareto_front, run_schema, search
from ndvm.cosearch.result import SearchResult
from ndvm.cosearch.export import to_latex, to_sympy
from ndvm.cosearch.select import select
from ndvm.cosearch.simplify import canonicalize
from ndvm.cosearch.proposers import LLM, Mutate, Proposer, Replay, make_proposer, read_candidates
from ndvm.cosearch.tasks import TASKS, Task, get_task

__all__ = [
    "CalibrationError", "Grammar", "LLM", "Mutate", "Proposer", "Replay", "SearchResult", "TASKS",
    "Task", "calibrate", "get_task", "make_proposer", "minimize_value", "pareto_front",
    "read_candidates", "search", "select", "canonicalize", "to_sympy", "to_latex",
    "ResumeMismatch", "run_schema",
]
