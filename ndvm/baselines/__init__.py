"""Eager PyTorch baselines: the evaluators ndvm is measured against and checked with.

``tagged`` (every value a tagged tensor) and ``split`` (structure in Python, numbers as torch lanes)
share one evaluator and the ``evaluate(prog, params=, data=, consts=, grad=)`` contract of
ndvm.Evaluator. They need PyTorch (``pip install ndvm[torch]``); ``import ndvm`` never imports it.
"""
try:
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    # (a ModuleNotFoundError naming torch: what is missing is a module, so callers that skip
    # on a missing module, pytest.importorskip among them, skip here too)
    raise ModuleNotFoundError("ndvm.baselines needs PyTorch: pip install ndvm[torch]",
                              name="torch") from None

from ndvm.baselines.split import SplitEvaluator
from ndvm.baselines.tagged import TaggedEvaluator

BASELINES = {"tagged": TaggedEvaluator, "split": SplitEvaluator}

__all__ = ["BASELINES", "SplitEvaluator", "TaggedEvaluator", "get"]


def get(name, **kwargs):
    """A baseline evaluator by name ("tagged" or "split"); kwargs go to its constructor."""
    try:
        return BASELINES[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown baseline {name!r}; available: {', '.join(BASELINES)}") from None
