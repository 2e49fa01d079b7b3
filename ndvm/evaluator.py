"""``ndvm.Evaluator``: evaluate a program over S parameter vectors x N data points, with gradients.

Lane layout: L = S * N lanes, lane ``s * N + n`` holds start ``s`` and data point ``n``. Every
lane's result depends only on that lane's inputs, so one reverse sweep seeded with ones yields
every lane's partial derivatives; ``grad`` sums them over a start's lanes, ``jacobian`` keeps them.
"""
import threading

import numpy as np

from ndvm import clients as _clients
from ndvm._core import Machine, Program, parse
from ndvm.errors import UnboundError

__all__ = ["Evaluator", "Result", "bind_inputs"]

_PARAM, _DATA, _CONST = 0, 1, 2
_DTYPES = ("float64", "float32")


class Result:
    """The outcome of one evaluation.

    ``value`` is always 2-D ``[S, N]`` (S starts, i.e. parameter vectors, by N data points);
    ``grad`` maps each parameter to the gradient of ``value.sum()`` restricted to each start,
    shape ``[S]`` (None when ``grad=False``); ``jacobian()`` gives each lane's partials
    ``{param: [S, N]}`` and ``vjp(seed)`` their seed-weighted sums ``{param: [S]}`` (both need
    grad=True); ``item()`` the value of a single lane; ``param_names``, ``S``, ``N``.
    """

    __slots__ = ("value", "_jac", "_block", "param_names", "S", "N")

    def __init__(self, value, jac, param_names, S, N, block=None):
        self.value = value
        self._jac = jac        # {name: [S, N]}, or None
        self._block = block    # or [P, S, N] in param_names order, viewed on demand
        self.param_names = param_names
        self.S = S
        self.N = N

    def _jacobians(self):
        if self._jac is None and self._block is not None:
            self._jac = {k: self._block[i] for i, k in enumerate(self.param_names)}
        return self._jac

    def __repr__(self):
        return f"Result(S={self.S}, N={self.N}, value={self.value!r})"

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
        if self._jacobians() is None:
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


def _as_array(name, value, what, max_ndim):
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{what} {name!r} must be numeric, got {type(value).__name__}") from None
    if a.ndim > max_ndim:
        raise ValueError(f"{what} {name!r} must have at most {max_ndim} dimension(s), "
                         f"got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{what} {name!r} is empty")
    return a if a.flags.c_contiguous else a.copy()  # (ascontiguousarray would make 0-d 1-d)


def bind_inputs(prog, params=None, data=None, consts=None):
    """Check inputs against the program's free names; returns (bindings, params, S, N).

    bindings follow ``prog.free_names``: (kind, flat float64 array, rows, cols) with kind 0 a
    parameter, 1 a data input, 2 a constant; rows is 0 for a scalar. Shared with the baselines.
    """
    params = {} if params is None else dict(params)
    data = {} if data is None else dict(data)
    consts = {} if consts is None else dict(consts)
    seen = {}
    for group, d in (("params", params), ("data", data), ("consts", consts)):
        for k in d:
            if not isinstance(k, str):
                raise TypeError(f"{group} keys must be names (str), got {k!r}")
            if k in seen:
                raise ValueError(f"{k!r} is given in both {seen[k]} and {group}")
            seen[k] = group
    S = N = None
    arrays = {}
    for k, v in params.items():
        a = _as_array(k, v, "parameter", 1)
        if a.ndim == 1 and a.size != 1:
            if S is not None and S != a.size:
                raise ValueError(f"parameter {k!r} has {a.size} starts, another has {S}")
            S = a.size
        arrays[k] = a
    for k, v in data.items():
        a = _as_array(k, v, "data input", 1)
        if a.ndim == 1 and a.size != 1:
            if N is not None and N != a.size:
                raise ValueError(f"data input {k!r} has {a.size} points, another has {N}")
            N = a.size
        arrays[k] = a
    S = S or 1
    N = N or 1
    bindings = []
    for name in prog.free_names:
        if name in params:
            a = arrays[name]
            rows = a.size if a.size != 1 else 0
            bindings.append((_PARAM, a.reshape(-1), rows if a.ndim else 0, 0))
        elif name in data:
            a = arrays[name]
            rows = a.size if a.size != 1 else 0
            bindings.append((_DATA, a.reshape(-1), rows if a.ndim else 0, 0))
        elif name in consts:
            a = _as_array(name, consts[name], "constant", 2)
            if a.ndim == 2 and a.shape[0] > 65535:
                raise ValueError(f"constant {name!r} has more than 65535 rows")
            rows = a.shape[0] if a.ndim >= 1 else 0
            cols = a.shape[1] if a.ndim == 2 else 0
            bindings.append((_CONST, a.reshape(-1), rows, cols))
        else:
            line, col = prog.free_positions[name]
            raise UnboundError(
                f"unbound variable '{name}': not defined by the program and not given as a "
                f"parameter, data input or constant", line=line, col=col, form=name,
                file=prog.name)
    return bindings, list(params), S, N


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
            if int(v) <= 0:
                raise ValueError(f"{label} must be positive, got {v!r}")
        self.client = _clients.get(client)
        self.dtype = dtype
        self.compat = compat
        self.limits = {"max_steps": int(max_steps), "max_depth": int(max_depth),
                       "max_memory": int(max_memory)}
        self._local = threading.local()

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

    def bind(self, prog, params=None, data=None, consts=None):
        """Check inputs against the program's free names; returns (bindings, params, S, N)."""
        return bind_inputs(prog, params, data, consts)

    def mse(self, prog, target, params=None, data=None, consts=None, grad=True):
        """Mean squared error of ``prog`` against ``target`` [N] for each start, and its gradient.

        Returns (loss [S], {parameter: gradient [S]}). The reverse sweep is seeded natively with
        d loss / d value, so no per-lane Jacobian is formed: the cheap way to drive an optimizer.
        """
        if not isinstance(prog, Program):
            prog = parse(prog) if isinstance(prog, str) else prog
        bindings, param_names, S, N = self.bind(prog, params, data, consts)
        y = np.ascontiguousarray(np.asarray(target, dtype=np.float64).reshape(-1))
        if N == 1 and y.size > 1:
            N = y.size
        free = prog.free_names
        index = [free.index(n) for n in param_names if n in free]
        loss, grads = self._machine().mse(prog, self.client.entry, prog.compiled(self.client),
                                          bindings, index, S, N, y, bool(grad))
        if not grad:
            return loss, None
        out = {}
        for name in param_names:
            g = grads.get(free.index(name)) if name in free else None
            out[name] = g if g is not None else np.zeros(S)
        return loss, out

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
        if not isinstance(prog, Program):
            if isinstance(prog, str):
                prog = parse(prog)
            else:
                raise TypeError(f"expected an ndvm.Program or source text, got {type(prog).__name__}")
        if not consts and params is not None and type(params) is dict and (
                data is None or type(data) is dict):
            # the common case (numbers and float64 vectors) is bound natively in one call
            fast = self._machine().evaluate_fast(prog, self.client.entry,
                                                 prog.compiled(self.client), params,
                                                 data or {}, bool(grad))
            if fast is not None:
                value, block, S, N = fast
                return Result(value, None, tuple(params), S, N, block)
        bindings, param_names, S, N = self.bind(prog, params, data, consts)
        compiled = prog.compiled(self.client)
        value, jac = self._machine().run(prog, self.client.entry, compiled, bindings, S, N,
                                         bool(grad))
        value = value.reshape(S, N)
        jacobians = None
        if grad:
            index = {name: i for i, name in enumerate(prog.free_names)}
            jacobians = {}
            for name in param_names:
                i = index.get(name)
                j = jac.get(i) if i is not None else None
                jacobians[name] = (j.reshape(S, N) if j is not None
                                   else np.zeros((S, N), dtype=np.float64))
        return Result(value, jacobians, tuple(param_names), S, N)
