"""``ndvm.fit``: a whole calibration of a program's constants, run natively in one call.

S starts run as lanes of one evaluation (S x N lanes); each optimizer step is one batched native
evaluation plus a few operations per start in C++, with no Python in between.
"""
import functools
from dataclasses import dataclass, field

import numpy as np

from ndvm._core import Program, parse
from ndvm.evaluator import Evaluator

__all__ = ["FitResult", "fit", "OPTIMIZERS"]

OPTIMIZERS = {"adam": 0, "lbfgs": 1, "lm": 2}
DEFAULT_STEPS = {"adam": 50, "lbfgs": 100, "lm": 50}


@dataclass
class FitResult:
    """The outcome of ``ndvm.fit``.

    params: the best start's parameters (name -> float); loss: its loss; all_params: name -> [S]
    (each start's best point); all_losses: [S]; history: [steps, S] loss per step (NaN once a
    start is retired for a non-finite loss); n_evals: batched evaluations; converged: [S] bool;
    optimizer: its name; names: the fitted parameters, in order; best_start: the best start's
    index.
    """

    params: dict
    loss: float
    all_params: dict
    all_losses: np.ndarray
    history: np.ndarray
    n_evals: int
    converged: np.ndarray
    optimizer: str = "adam"
    names: tuple = field(default_factory=tuple)

    @property
    def best_start(self):
        """Index of the start with the lowest loss."""
        return int(np.nanargmin(np.where(np.isfinite(self.all_losses), self.all_losses, np.inf)))

    def __repr__(self):
        ps = ", ".join(f"{k}={v:.6g}" for k, v in self.params.items())
        return (f"FitResult({self.optimizer}, loss={self.loss:.6g}, {ps}, "
                f"starts={self.all_losses.size}, evals={self.n_evals})")


@functools.lru_cache(maxsize=256)
def _standard_normals(seed, n):
    """The first n standard normals of default_rng(seed) (cached: co-search fits thousands of
    candidates with the same seed, and creating a generator costs more than a small fit)."""
    z = np.random.default_rng(seed).standard_normal(n)
    z.flags.writeable = False
    return z


def _initial_values(names, S, init, bounds, seed):
    if not init and not bounds and isinstance(seed, (int, np.integer)):
        # every start drawn from normal(0, 0.3): the same stream as the general path below
        return 0.0 + 0.3 * _standard_normals(int(seed), len(names) * S).reshape(len(names), S)
    rng = np.random.default_rng(seed)
    out = np.empty((len(names), S), dtype=np.float64)
    for i, name in enumerate(names):
        if init is not None and name in init:
            v = np.asarray(init[name], dtype=np.float64)
            if v.ndim > 1 or (v.ndim == 1 and v.size not in (1, S)):
                raise ValueError(f"init[{name!r}] must be a scalar or have {S} values, "
                                 f"got shape {v.shape}")
            out[i] = v.reshape(-1) if v.ndim == 1 and v.size == S else float(v.reshape(-1)[0])
        elif bounds is not None and name in bounds and None not in bounds[name]:
            lo, hi = bounds[name]
            out[i] = rng.uniform(lo, hi, S)
        else:
            out[i] = rng.normal(0.0, 0.3, S)  # the paper's protocol
    return out


def fit(prog, data=None, target=None, params=None, starts=1, init=None, optimizer="adam",
        steps=None, lr=0.05, loss="mse", bounds=None, seed=0, client="dmci", consts=None,
        dtype="float64", evaluator=None, tol=1e-12):
    """Calibrate ``prog``'s parameters to ``target`` (mean squared error) over ``starts`` starts.

    prog: an ndvm.Program or source text; data: name -> [N] inputs; target: [N];
    params: names to fit (default: every free name not in data or consts); init: name -> scalar
    or [S] starting values (others drawn from a seeded normal(0, 0.3), or uniformly within
    ``bounds``); optimizer: "adam" (torch.optim.Adam's update), "lbfgs" or "lm"
    (Levenberg-Marquardt); bounds: name -> (low, high), None for an open side (applied by
    projection after every step); steps: optimizer steps (default per optimizer); lr: Adam's
    step size; loss: "mse" (the only loss); tol: LM and L-BFGS stop a start once its step is
    smaller than tol relative to the parameters' norm; seed: seeds the random starts; client,
    dtype: the evaluator used (or pass ``evaluator``, an ndvm.Evaluator, to reuse one and its
    limits); consts: shared constants.

    Returns a FitResult: ``params`` (the best start's fitted values, name -> float), ``loss``
    (its mean squared error), ``all_params``/``all_losses`` (every start), ``history`` (loss per
    step and start), ``converged``, ``n_evals``, ``names`` and ``best_start``.
    """
    if not isinstance(prog, Program):
        if not isinstance(prog, str):
            raise TypeError(f"expected an ndvm.Program or source text, got {type(prog).__name__}")
        prog = parse(prog)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {sorted(OPTIMIZERS)}")
    if loss != "mse":
        raise ValueError(f"unknown loss {loss!r}; only 'mse' is supported")
    if target is None:
        raise ValueError("fit needs a target")
    steps = DEFAULT_STEPS[optimizer] if steps is None else int(steps)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    S = int(starts)
    if S < 1:
        raise ValueError(f"starts must be at least 1, got {starts}")
    if not (lr > 0):
        raise ValueError(f"lr must be positive, got {lr}")
    data = {} if data is None else dict(data)
    consts = {} if consts is None else dict(consts)
    y = np.asarray(target, dtype=np.float64).reshape(-1)
    if y.size == 0:
        raise ValueError("target is empty")
    for name, v in data.items():
        n = np.asarray(v).size
        if n not in (1, y.size):
            raise ValueError(f"data input {name!r} has {n} points but target has {y.size}")
    if params is None:
        names = tuple(n for n in prog.free_names if n not in data and n not in consts)
    else:
        names = tuple(params)
        missing = [n for n in names if n not in prog.free_names]
        if missing:
            raise ValueError(f"parameter(s) {missing} do not occur in the program "
                             f"(its free names are {prog.free_names})")
    if not names:
        raise ValueError("there is nothing to fit: the program has no free parameters")
    lower = upper = None
    if bounds:
        unknown = set(bounds) - set(names)
        if unknown:
            raise ValueError(f"bounds given for names that are not fitted: {sorted(unknown)}")
        lower = np.array([(bounds.get(n) or (None, None))[0] for n in names], dtype=object)
        upper = np.array([(bounds.get(n) or (None, None))[1] for n in names], dtype=object)
        lower = np.array([-np.inf if v is None else v for v in lower], dtype=np.float64)
        upper = np.array([np.inf if v is None else v for v in upper], dtype=np.float64)
        if np.any(lower > upper):
            raise ValueError("each bound must be (low, high) with low <= high")
    x0 = _initial_values(names, S, init, bounds, seed)
    if lower is not None:
        x0 = np.clip(x0, lower[:, None], upper[:, None])
    ev = evaluator or Evaluator(client=client, dtype=dtype)
    placeholder = {n: np.zeros(S) for n in names}  # fitted parameters: rebound per step natively
    # scalar data must still cover N lanes when the target has N points
    inputs = ev.bind(prog, params=placeholder, data=data, consts=consts, points=y.size)
    fitted = [prog.free_names.index(n) for n in names]
    params_out, losses, history, converged, n_evals = ev.calibrate(
        prog, inputs, fitted, y, OPTIMIZERS[optimizer], steps, float(lr), lower, upper, x0,
        float(tol))
    finite = np.where(np.isfinite(losses), losses, np.inf)
    best = int(np.argmin(finite))
    return FitResult(
        params={n: float(params_out[i, best]) for i, n in enumerate(names)},
        loss=float(losses[best]),
        all_params={n: params_out[i].copy() for i, n in enumerate(names)},
        all_losses=losses,
        history=history,
        n_evals=int(n_evals),
        converged=converged,
        optimizer=optimizer,
        names=names,
    )
