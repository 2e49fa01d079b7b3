"""The search's one door to calibration: ``calibrate(programs, ...)``.

Runs ``ndvm.fit_many`` (a chunk of fits per native call, on the worker pool or an executor;
``begin`` lets the caller lend threads of its own to the pool's work); a
failed candidate becomes a ``CalibrationError`` in its place, never an exception. ``minimize_value``
fits likelihood tasks, whose program value itself is minimized (ndvm.fit's native L-BFGS).
"""
import numpy as np

import ndvm
from ndvm.parallel import begin_fits

__all__ = ["Calibration", "CalibrationError", "begin", "calibrate", "minimize_value", "succeeded"]


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
    return begin(programs, data, target, workers=workers, **fit_options).finish()


class Calibration:
    """Fits begun by ``begin``: ``drain()`` lends the calling thread to them (when they run on
    the local pool), ``finish(lent, meanwhile)`` runs them on the calling thread too (and on the
    pool's workers - 1 - lent threads; ``meanwhile()`` once the calling thread has none left to
    start) and returns ``calibrate``'s list."""

    def __init__(self, programs, data, target, workers, executor, fit_options):
        self.begun = self.later = None
        if not programs:
            return
        if executor is None:
            self.begun = begin_fits(programs, data=data, target=target, workers=workers,
                                    **fit_options)
        else:
            self.later = lambda: ndvm.fit_many(programs, data=data, target=target,
                                               executor=executor, **fit_options)

    def drain(self, limit=None):
        """Fits run on the calling thread until none is left to start (or ``limit`` are run);
        how many (always 0 on an executor)."""
        return self.begun.drain(limit) if self.begun is not None else 0

    def cancel(self):
        """Fits begun but not to be finished: none starts any more (running ones end)."""
        if self.begun is not None:
            self.begun.cancel()

    def finish(self, lent=0, meanwhile=None):
        if self.begun is not None:
            return [_wrap(r) for r in self.begun.finish(lent, meanwhile)]
        if meanwhile is not None:
            meanwhile()
        return [_wrap(r) for r in self.later()] if self.later is not None else []


def begin(programs, data, target, workers=None, executor=None, **fit_options):
    """The calibration of ``programs`` begun (a ``Calibration``): checked, not yet run."""
    return Calibration(list(programs), data, target, workers, executor, fit_options)


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
