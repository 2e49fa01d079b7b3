"""The search's one door to calibration: ``calibrate(programs, ...)``.

Runs ``ndvm.fit_many``'s candidates (``ndvm.parallel.FitSetup``: one shared batch the calling
thread, the threads it lends and the worker pool's claim fits from, or chunks on an executor); a
failed candidate becomes a ``CalibrationError`` in its place, never an exception. ``minimize_value``
fits likelihood tasks, whose program value itself is minimized (ndvm.fit's native L-BFGS).
"""
import numpy as np

import ndvm
from ndvm.parallel import FitSetup

__all__ = ["CalibrationError", "begin", "calibrate", "minimize_value", "setup", "succeeded"]


class CalibrationError:
    """A candidate whose calibration failed: the exception's kind and first line."""

    def __init__(self, error):
        self.error = error
        self.kind = getattr(error, "kind", type(error).__name__)
        text = str(error).splitlines()
        self.message = text[0] if text else type(error).__name__

    def __repr__(self):
        return f"CalibrationError({self.kind}: {self.message})"


def succeeded(result):
    """True for a fit result (anything with params and loss), False for a captured error."""
    return hasattr(result, "params") and hasattr(result, "loss")


def _wrap(r):
    if succeeded(r):
        return r
    if isinstance(r, CalibrationError):
        return r
    return CalibrationError(getattr(r, "error", None) or getattr(r, "exception", None) or r)


def calibrate(programs, data, target, workers=None, **fit_options):
    """Fit every program to ``target``; a list in input order of FitResult or CalibrationError."""
    return [_wrap(r) for r in begin(programs, data, target, workers=workers,
                                    **fit_options).finish()]


def begin(programs, data, target, workers=None, **fit_options):
    """The calibration of ``programs`` begun (``ndvm.parallel.begin_fits``, ``executor`` among
    the options): checked, not yet run; ``drain()`` lends the calling thread to it,
    ``finish(lent, meanwhile)`` runs it and returns fit_many's list."""
    return setup(data, target, workers=workers, **fit_options).begin(list(programs))


def setup(data, target, workers=None, **fit_options):
    """``begin``'s arguments but the programs, checked once for many batches
    (``ndvm.parallel.FitSetup``): ``.begin(programs, per_candidate)`` begins one."""
    return FitSetup(data, target, workers=workers, **fit_options)


def minimize_value(prog, names, init, consts=None, data=None, positive=(), steps=None,
                   gtol=None, evaluator=None):
    """Minimize the program's value (summed over lanes) over ``names``: ``ndvm.fit`` with
    loss="value", the native L-BFGS with a strong-Wolfe line search on exact gradients.

    ``positive`` names are optimized as logarithms, so they stay above zero. Returns the
    FitResult (``params``, ``loss`` = the minimized value, ``status``, ``converged``,
    ``message``); a start where the value is not finite raises ValueError.
    """
    names = tuple(names)
    res = ndvm.fit(prog, data=data, consts=consts, params=names,
                   init={n: float(init[n]) for n in names}, loss="value", optimizer="lbfgs",
                   positive=tuple(n for n in names if n in positive), steps=steps, gtol=gtol,
                   evaluator=evaluator)
    if not np.isfinite(res.loss):
        raise ValueError(f"the objective is not finite at the initial point: {res.message}")
    return res
