"""The search's one door to calibration: ``calibrate(programs, ...)``.

Uses ``ndvm.fit_many`` (parallel) when the package has it, else serial ``ndvm.fit``; either way a
failed candidate becomes a ``CalibrationError`` in its place, never an exception. ``minimize_value``
fits likelihood tasks, whose program value itself is minimized (BFGS on exact gradients).
"""
import numpy as np

import ndvm

__all__ = ["CalibrationError", "calibrate", "minimize_value", "succeeded"]


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
    if not programs:
        return []
    results = ndvm.fit_many(programs, data=data, target=target, workers=workers, **fit_options)
    return [_wrap(r) for r in results]


class ValueFit:
    """The outcome of ``minimize_value``: params, loss (the minimized value), n_evals."""

    def __init__(self, params, loss, n_evals, converged):
        self.params = params
        self.loss = loss
        self.n_evals = n_evals
        self.converged = converged

    def __repr__(self):
        ps = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return f"ValueFit(loss={self.loss:.10g}, {ps}, evals={self.n_evals})"


def minimize_value(prog, names, init, consts=None, data=None, positive=(), steps=200,
                   gtol=1e-8, evaluator=None):
    """Minimize the program's (single-lane) value over ``names`` by BFGS with exact gradients.

    ``positive`` names are optimized as logarithms, so they stay above zero.
    """
    ev = evaluator or ndvm.Evaluator()
    names = tuple(names)
    logs = np.array([n in positive for n in names])
    x = np.array([float(init[n]) for n in names])
    if np.any(x[logs] <= 0):
        raise ValueError("initial values of positive parameters must be above zero")
    theta = np.where(logs, np.log(np.where(logs, x, 1.0)), x)
    n_evals = 0

    def f(th):
        nonlocal n_evals
        n_evals += 1
        v = np.where(logs, np.exp(th), th)
        res = ev.evaluate(prog, params=dict(zip(names, v)), consts=consts, data=data, grad=True)
        g = np.array([res.grad[n][0] for n in names])
        return res.value.sum(), g * np.where(logs, v, 1.0)

    fx, g = f(theta)
    if not np.isfinite(fx):
        raise ValueError(f"the objective is not finite at the initial point ({fx})")
    H = np.eye(theta.size)
    converged = False
    for _ in range(steps):
        if np.max(np.abs(g)) < gtol * max(1.0, abs(fx)):
            converged = True
            break
        d = -H @ g
        if g @ d >= 0:  # not a descent direction: restart from steepest descent
            H = np.eye(theta.size)
            d = -g
        step = 1.0
        while True:
            t_new = theta + step * d
            f_new, g_new = f(t_new)
            if np.isfinite(f_new) and f_new <= fx + 1e-4 * step * (g @ d):
                break
            step *= 0.5
            if step < 1e-12:
                break
        if step < 1e-12:
            converged = True  # no further decrease is possible at this precision
            break
        s, yv = t_new - theta, g_new - g
        sy = s @ yv
        if sy > 1e-12:
            rho = 1.0 / sy
            eye = np.eye(theta.size)
            H = (eye - rho * np.outer(s, yv)) @ H @ (eye - rho * np.outer(yv, s)) + rho * np.outer(s, s)
        theta, fx, g = t_new, f_new, g_new
    v = np.where(logs, np.exp(theta), theta)
    return ValueFit({n: float(val) for n, val in zip(names, v)}, float(fx), n_evals, converged)
