"""``ndvm.torch``: evaluate a program inside a PyTorch graph (CPU, float32 or float64).

    values = ndvm.torch.evaluate(prog, {"a": a, "b": b}, data={"x": x})   # [S, N] tensor

Parameters are tensors [S] (or one tensor [S, P] with ``names``); data are [N]. Forward runs the
native evaluation and records the tape only when a parameter requires grad; backward runs the
native reverse sweep seeded with the real upstream gradient, so any downstream loss works.
Arrays are shared with numpy, not copied, wherever the dtype allows.
"""
import ctypes

import numpy as np
import torch

from ndvm._core import Program, parse
from ndvm._core._core import RawVector
from ndvm.evaluator import Evaluator

__all__ = ["NdvmFunction", "evaluate", "Module"]

_evaluators = {}


def _default_evaluator(client, dtype):
    key = (client, dtype)
    ev = _evaluators.get(key)
    if ev is None:
        ev = _evaluators[key] = Evaluator(client=client, dtype=dtype)
    return ev


def _as_input(t):
    """A parameter tensor as a native input: its float64 memory by address (no copy, no numpy
    view — the cheapest hand-off), a float for 0-d tensors."""
    t = t.detach()
    if t.dim() == 0:
        return t.item()
    if t.dtype != torch.float64 or not t.is_contiguous() or t.dim() != 1:
        t = t.to(torch.float64).contiguous().reshape(-1)
    return RawVector(t.data_ptr(), t.numel(), t)


def _as_numpy(t):
    """A float64 numpy view of a CPU tensor (no copy when it is float64 and contiguous); 0-d
    tensors become Python floats."""
    if isinstance(t, torch.Tensor):
        t = t.detach()
        if t.dim() == 0:
            return float(t)
        if t.dtype == torch.float64 and t.is_contiguous():
            return t.numpy()  # shares memory
        return t.to(torch.float64).contiguous().numpy()
    return np.asarray(t, dtype=np.float64)


class _Spec:
    """The non-tensor arguments of one application (kept out of autograd's inputs)."""

    __slots__ = ("prog", "ev", "names", "data", "consts", "machine", "generation", "values",
                 "index", "S", "N", "out_dtype")


def _run(spec, machine, values, record):
    """Forward on the machine; with `record` the tape is kept (not swept) for backward."""
    prog, ev = spec.prog, spec.ev
    compiled = prog.compiled(ev.client)
    fast = None
    if not spec.consts:
        fast = machine.evaluate_fast(prog, ev.client.entry, compiled, values, spec.data, record,
                                     False)
    if fast is not None:
        value, _, spec.S, spec.N = fast
        return value
    values = {k: (np.frombuffer((ctypes.c_double * v.n).from_address(v.ptr), dtype=np.float64)
                  if isinstance(v, RawVector) else v) for k, v in values.items()}
    bindings, _, S, N = ev.bind(prog, params=values, data=spec.data, consts=spec.consts)
    value, _ = machine.run(prog, ev.client.entry, compiled, bindings, S, N, record, False)
    spec.S, spec.N = S, N
    return value.reshape(S, N)


class NdvmFunction(torch.autograd.Function):
    """values [S, N] = program(parameters..., data); the gradient comes from the native tape."""

    @staticmethod
    def forward(ctx, spec, *params):
        values = {n: _as_input(p) for n, p in zip(spec.names, params)}
        need = any(ctx.needs_input_grad[1:])
        machine = spec.ev._machine()
        value = _run(spec, machine, values, need)
        spec.values = values
        spec.machine, spec.generation = machine, machine.generation
        ctx.spec = spec
        ctx.shapes = [tuple(p.shape) for p in params]
        out = torch.from_numpy(value)
        return out if spec.out_dtype == torch.float64 else out.to(spec.out_dtype)

    @staticmethod
    def backward(ctx, grad_out):
        spec = ctx.spec
        seed = np.ascontiguousarray(_as_numpy(grad_out).reshape(-1))
        machine = spec.ev._machine()
        if machine is not spec.machine or machine.generation != spec.generation:
            # the machine ran something else since forward: record this evaluation again
            _run(spec, machine, spec.values, True)
            spec.machine, spec.generation = machine, machine.generation
        free = spec.prog.free_names
        spec.index = {n: free.index(n) for n in spec.names if n in free}
        adj = machine.reverse(seed, list(spec.index.values()))
        grads = []
        for name, shape, needs in zip(spec.names, ctx.shapes, ctx.needs_input_grad[1:]):
            i = spec.index.get(name)
            if not needs:
                grads.append(None)
                continue
            if i is None:
                grads.append(torch.zeros(shape, dtype=grad_out.dtype))
                continue
            per_start = adj[i].reshape(spec.S, spec.N).sum(axis=1)
            g = per_start if len(shape) == 1 and shape[0] == spec.S else per_start.sum()
            grads.append(torch.from_numpy(np.asarray(g, dtype=np.float64)).reshape(shape)
                         .to(grad_out.dtype))
        return (None, *grads)


def evaluate(prog, params, data=None, consts=None, *, names=None, evaluator=None,
             client="dmci"):
    """Evaluate ``prog`` on tensors: params {name: [S] or scalar tensor} (or one [S, P] tensor
    with ``names``), data {name: [N]} -> values [S, N], differentiable in the parameters."""
    if not isinstance(prog, Program):
        prog = parse(prog)
    if isinstance(params, torch.Tensor):
        if names is None or params.dim() != 2 or params.shape[1] != len(names):
            raise ValueError("a parameter tensor must be [S, P] with names of length P")
        tensors = [params[:, j] for j in range(params.shape[1])]
        names = tuple(names)
    else:
        names = tuple(params)
        tensors = [p if isinstance(p, torch.Tensor) else torch.as_tensor(p, dtype=torch.float64)
                   for p in params.values()]
    dtypes = {t.dtype for t in tensors}
    out_dtype = torch.float32 if dtypes == {torch.float32} else torch.float64
    spec = _Spec()
    spec.prog = prog
    spec.ev = evaluator or _default_evaluator(
        client, "float32" if out_dtype == torch.float32 else "float64")
    spec.names = names
    spec.data = {k: _as_numpy(v) for k, v in (data or {}).items()}
    spec.consts = {k: _as_numpy(v) for k, v in (consts or {}).items()}
    spec.out_dtype = out_dtype
    return NdvmFunction.apply(spec, *tensors)


class Module(torch.nn.Module):
    """A program with its parameters as ``torch.nn.Parameter``s [S]: ``module(x=...)`` -> [S, N]."""

    def __init__(self, prog, init, starts=1, dtype=torch.float64, consts=None, client="dmci"):
        super().__init__()
        self.prog = prog if isinstance(prog, Program) else parse(prog)
        self.consts = consts
        self.client = client
        self.names = tuple(init)
        for name, v in init.items():
            t = torch.as_tensor(v, dtype=dtype)
            if t.dim() == 0:
                t = t.repeat(starts)
            self.register_parameter(name, torch.nn.Parameter(t.clone()))

    def forward(self, **data):
        params = {n: getattr(self, n) for n in self.names}
        return evaluate(self.prog, params, data=data, consts=self.consts, client=self.client)
