"""``ndvm.Evaluator``: evaluate a program over S parameter vectors x N data points, with gradients.

Lane layout: L = S * N lanes, lane ``s * N + n`` holds start ``s`` and data point ``n``. Every
lane's result depends only on that lane's inputs, so one reverse sweep seeded with ones yields
every lane's partial derivatives; ``grad`` sums them natively over a start's lanes, ``jacobian``
keeps them (computed on demand by a second run that keeps every lane).
"""
import threading

import numpy as np

from ndvm import clients as _clients
from ndvm._core import REDUCE_LANE, REDUCE_NONE, REDUCE_START, Machine, Program, bind, parse
from ndvm.fit_options import whole_number

__all__ = ["Evaluator", "Result", "bind_inputs"]

_DTYPES = ("float64", "float32")
_REDUCE = {"lane": REDUCE_LANE, "start": REDUCE_START, None: REDUCE_NONE}


def _reduction(reduce):
    """The core's code of ``reduce`` ("lane", "start" or None), or ValueError (a KeyError)."""
    try:
        return _REDUCE[reduce]
    except (KeyError, TypeError):
        raise ValueError(f"reduce is \"lane\", \"start\" or None, got {reduce!r}") from None


class Result:
    """The outcome of one evaluation.

    ``value`` is always 2-D ``[S, N]`` (S starts, i.e. parameter vectors, by N data points);
    ``grad`` maps each parameter to the gradient of ``value.sum()`` restricted to each start,
    shape ``[S]`` (None when ``grad=False``); ``jacobian()`` gives each lane's partials
    ``{param: [S, N]}`` and ``vjp(seed)`` their seed-weighted sums ``{param: [S]}`` (both need
    grad=True); ``item()`` the value of a single lane; ``param_names``, ``S``, ``N``.
    """

    __slots__ = ("value", "_jac", "_grad", "_lanes", "param_names", "S", "N")

    def __init__(self, value, jac, param_names, S, N, grad=None, lanes=None):
        self.value = value
        self._jac = jac        # {name: [S, N]}, or None
        self._grad = grad      # [P, S] reduced natively (rows in param_names order), or None
        self._lanes = lanes    # or (evaluator, program, inputs): a run that gives [P, S, N]
        self.param_names = param_names
        self.S = S
        self.N = N

    def _jacobians(self):
        if self._jac is None and self._lanes is not None:
            evaluator, prog, inputs = self._lanes
            block = evaluator.run(prog, inputs, grad=True, reduce="lane")[1]
            self._jac = {k: block[i] for i, k in enumerate(self.param_names)}
            self._lanes = None
        return self._jac

    def __repr__(self):
        return f"Result(S={self.S}, N={self.N}, value={self.value!r})"

    def __getstate__(self):  # a pickled result carries its Jacobian, not the way to compute it
        return (self.value, self._jacobians(), self._grad, self.param_names, self.S, self.N)

    def __setstate__(self, state):
        self.value, self._jac, self._grad, self.param_names, self.S, self.N = state
        self._lanes = None

    def item(self):
        """The value as a float (only for a single lane)."""
        if self.value.size != 1:
            raise ValueError(f"item() needs exactly one lane, this result has {self.S}x{self.N}")
        return float(self.value.reshape(-1)[0])

    def _need_grad(self):
        if self._jacobians() is None:
            raise ValueError("gradients were not computed: call evaluate(..., grad=True)")
        return self._jac

    @property
    def grad(self):
        """{parameter: [S]}: d value.sum() / d parameter, per start (None without grad=True)."""
        if self._grad is not None:
            return {k: self._grad[i].copy() for i, k in enumerate(self.param_names)}
        if self._jac is None:
            return None
        return {k: j.sum(axis=1) for k, j in self._jac.items()}

    def jacobian(self):
        """{parameter: [S, N]}: each lane's partial derivative with respect to its parameter."""
        return {k: j.copy() for k, j in self._need_grad().items()}

    def vjp(self, seed):
        """{parameter: [S]}: the vector-Jacobian product with ``seed`` of shape [S, N]."""
        jac = self._need_grad()
        seed = np.asarray(seed, dtype=np.float64)
        try:
            seed = np.broadcast_to(seed, (self.S, self.N))
        except ValueError:
            raise ValueError(f"seed must have shape [{self.S}, {self.N}], got {seed.shape}") from None
        if np.isfinite(seed).all():  # one fused pass per parameter
            return {k: np.einsum("sn,sn->s", seed, j) for k, j in jac.items()}
        # where a lane's partial is exactly 0 its seed does not matter (no 0 * inf = nan)
        return {k: np.where(j == 0.0, 0.0, seed * j).sum(axis=1) for k, j in jac.items()}


def bind_inputs(prog, params=None, data=None, consts=None):
    """Check inputs against the program's free names; returns (bindings, params, S, N).

    bindings follow ``prog.free_names``: (kind, flat float64 array, rows, cols) with kind 0 a
    parameter, 1 a data input, 2 a constant; rows is 0 for a scalar. The eager baselines bind
    through this; it checks and sizes exactly as the native entry does (``ndvm._core.bind``).
    """
    inputs = bind(prog, params, data, consts)
    return inputs.bindings(), list(inputs.params), inputs.S, inputs.N


_SHARED = {}  # (client, dtype, compat, limits) -> Evaluator: Evaluator.shared
_SHARED_LOCK = threading.Lock()


class Evaluator:
    """Evaluates programs with one client on native machines (one per thread, reused).

    client: a name from ``ndvm.clients()``; dtype: "float64" or "float32"; compat: None or
    "reference" (the reference runtime's clamped sqrt/log, for golden parity). The limits bound
    evaluation steps, nested (non-tail) call depth and lane/tape memory in bytes.
    """

    def __init__(self, client="dmci", dtype="float64", compat=None, *, max_steps=10_000_000,
                 max_depth=10_000, max_memory=2 << 30):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if compat not in (None, "reference"):
            raise ValueError(f"compat must be None or 'reference', got {compat!r}")
        for label, v in (("max_steps", max_steps), ("max_depth", max_depth),
                         ("max_memory", max_memory)):
            if not whole_number(v) or not 0 < v < 2 ** 63:
                raise ValueError(f"{label} must be a whole number from 1 to 2**63 - 1, got "
                                 f"{v!r}")
        self.client = _clients.get(client)
        self.dtype = dtype
        self.compat = compat
        self.limits = {"max_steps": int(max_steps), "max_depth": int(max_depth),
                       "max_memory": int(max_memory)}
        self._local = threading.local()

    @classmethod
    def shared(cls, client="dmci", dtype="float64", compat=None, **limits):
        """The process's one Evaluator for these settings, made on first use: what ``ndvm.fit``
        without ``evaluator=`` and the workers of ``ndvm.fit_many`` run on, so that calls in a
        loop reuse warm native machines (one per thread: threads never share one)."""
        name = client if isinstance(client, str) else client.name
        key = (name, dtype, compat, tuple(sorted(limits.items())))
        ev = _SHARED.get(key)
        if ev is None:
            with _SHARED_LOCK:
                ev = _SHARED.get(key)
                if ev is None:
                    ev = _SHARED[key] = cls(client, dtype, compat, **limits)
        return ev

    def __repr__(self):
        return (f"Evaluator(client={self.client.name!r}, dtype={self.dtype!r}, "
                f"compat={self.compat!r})")

    def __getstate__(self):
        return {"client": self.client.name, "dtype": self.dtype, "compat": self.compat,
                "limits": self.limits}

    def __setstate__(self, state):
        self.__init__(state["client"], state["dtype"], state["compat"], **state["limits"])

    def _machine(self):
        m = getattr(self._local, "machine", None)
        if m is None:
            m = Machine(self.dtype, self.compat == "reference", **self.limits)
            self._local.machine = m
        return m

    @staticmethod
    def _program(prog):
        if isinstance(prog, Program):
            return prog
        if isinstance(prog, str):
            return parse(prog)
        raise TypeError(f"expected an ndvm.Program or source text, got {type(prog).__name__}")

    def bind(self, prog, params=None, data=None, consts=None, points=None):
        """Check inputs against the program's free names and size S and N; returns the bound
        ``ndvm._core.Inputs`` that ``run`` takes (points: the N a target fixes)."""
        return bind(prog, params, data, consts, points)

    def run(self, prog, inputs, *, grad=False, reduce="start", seed=None, target=None):
        """The one way into the native core, on this thread's machine.

        inputs: from ``bind``. With grad, one reverse sweep seeded with ones, with ``seed``
        [S, N], or with ``target`` [N]'s mean-squared-error residual; reduced per "lane"
        (Jacobian rows), per "start" (gradients), or None (the tape is kept: see ``sweep``).
        Returns (value [S, N], gradients [P, S, N] / [P, S] in inputs.params order or None,
        loss [S] with a target or None).
        """
        return self._machine().run(prog, self.client.entry, prog.compiled(self.client), inputs,
                                   bool(grad), _reduction(reduce), seed, target)

    def tape(self):
        """A token for the tape this thread's last ``run(grad=True, reduce=None)`` kept."""
        m = self._machine()
        return (m, m.generation)

    def sweep(self, token, seed, reduce="start"):
        """Sweep the kept tape of ``token`` (from ``tape``) seeded with ``seed`` [S, N]:
        gradients [P, S] (or [P, S, N] per "lane"), or None when this thread's machine has run
        something else since (run again with grad=True, reduce=None, then sweep). ValueError
        when that run kept no tape (it had no grad, a reduce, or failed)."""
        m = self._machine()
        if token != (m, m.generation):
            return None
        return m.reverse(seed, _reduction(reduce))

    def calibrate(self, batch, interruptible=False):
        """Run the calibrations staged in ``batch`` (an ``ndvm._core.FitBatch``: the core of
        ``ndvm.fit`` and ``ndvm.fit_many``, see ``ndvm.fit.FitPlan``) on this thread's machine,
        in one native call that releases the GIL; ``interruptible`` (ndvm.fit's, on the main
        thread): Ctrl-C and SIGTERM stop it (KeyboardInterrupt, or what SIGTERM's handler
        raises)."""
        batch.run(self._machine(), interruptible)

    def drain(self, batch, limit=None, stop=None):
        """Run fits of an opened ``FitBatch`` that several threads share (``batch.open()``) on
        this thread's machine, claiming one at a time without the GIL, until none is left (or
        ``limit`` are run, or ``stop``, an ``ndvm._core.Stop``, is set); how many this call
        ran."""
        return batch.drain(self._machine(), limit, stop)

    def mse(self, prog, target, params=None, data=None, consts=None, grad=True):
        """Mean squared error of ``prog`` against ``target`` [N] for each start, and its gradient.

        Returns (loss [S], {parameter: gradient [S]}). The reverse sweep is seeded natively with
        d loss / d value, so no per-lane Jacobian is formed: the cheap way to drive an optimizer.
        """
        prog = self._program(prog)
        y = np.asarray(target, dtype=np.float64).reshape(-1)
        inputs = bind(prog, params, data, consts, y.size if y.size > 1 else None)
        _, grads, loss = self.run(prog, inputs, grad=grad, target=y)
        if not grad:
            return loss, None
        return loss, dict(zip(inputs.params, grads))

    def evaluate(self, prog, params=None, data=None, consts=None, grad=False):
        """Evaluate ``prog`` (an ndvm.Program or source text) on S x N lanes.

        params: name -> scalar or [S] (differentiable); data: name -> scalar or [N];
        consts: name -> number, vector [n] or matrix [r, c] (shared by all lanes); grad: also
        compute derivatives with respect to the params.

        Returns a Result: ``value`` [S, N]; with grad=True, ``grad`` {param: [S]} (the gradient
        of each start's sum over its N lanes), ``jacobian()`` {param: [S, N]} (per-lane
        partials) and ``vjp(seed)`` {param: [S]} (seed [S, N] weighted sum of the partials).
        Bad programs or inputs raise an ndvm.SchemeError subclass or ValueError.
        """
        if type(prog) is not Program:
            prog = self._program(prog)
        inputs = bind(prog, params, data, consts)
        compiled = prog.compiled(self.client)
        value, grads, _ = self._machine().run(prog, self.client.entry, compiled, inputs, grad)
        if not grad:
            return Result(value, None, inputs.params, inputs.S, inputs.N)
        # the per-lane rows are computed on demand, by a second run on the same inputs
        return Result(value, None, inputs.params, inputs.S, inputs.N, grads,
                      (self, prog, inputs.copy()))
