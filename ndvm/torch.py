"""``ndvm.torch``: evaluate a program inside a PyTorch graph (CPU, float32 or float64).

    values = ndvm.torch.evaluate(prog, {"a": a, "b": b}, data={"x": x})   # [S, N] tensor

Parameters are tensors [S] (or one tensor [S, P] with ``names``); data are [N]. Forward runs the
native evaluation and records the tape only when a parameter requires grad; backward runs the
native reverse sweep seeded with the real upstream gradient, so any downstream loss works.
Arrays are shared with numpy, not copied, wherever the dtype allows.
"""
import numpy as np

try:
    import torch
except ImportError:  # (a missing module, which callers that skip on one, importorskip among
    # them, still see as one; it names the extra to install)
    raise ModuleNotFoundError("ndvm.torch needs PyTorch: pip install 'ndvm[torch]' (or pip "
                              "install torch)") from None

from ndvm._core import Program, parse
from ndvm.evaluator import Evaluator

__all__ = ["NdvmFunction", "evaluate", "Module"]

_evaluators = {}


def _default_evaluator(client, dtype):
    key = (client, dtype)
    ev = _evaluators.get(key)
    if ev is None:
        ev = _evaluators[key] = Evaluator(client=client, dtype=dtype)
    return ev


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

    __slots__ = ("prog", "ev", "names", "data", "consts", "inputs", "token", "S", "N",
                 "out_dtype")


def _forward(spec, record):
    """Forward through the evaluator's one entry; with `record` the tape is kept for backward."""
    value, _, _ = spec.ev.run(spec.prog, spec.inputs, grad=record, reduce=None)
    spec.token = spec.ev.tape()
    return value


class NdvmFunction(torch.autograd.Function):
    """values [S, N] = program(parameters..., data); the gradient comes from the native tape."""

    @staticmethod
    def forward(ctx, spec, *params):
        values = {n: _as_numpy(p) for n, p in zip(spec.names, params)}
        spec.inputs = spec.ev.bind(spec.prog, values, spec.data, spec.consts)
        spec.S, spec.N = spec.inputs.S, spec.inputs.N
        value = _forward(spec, any(ctx.needs_input_grad[1:]))
        ctx.spec = spec
        ctx.shapes = [tuple(p.shape) for p in params]
        out = torch.from_numpy(value)
        return out if spec.out_dtype == torch.float64 else out.to(spec.out_dtype)

    @staticmethod
    def backward(ctx, grad_out):
        spec = ctx.spec
        seed = _as_numpy(grad_out)
        per_start = spec.ev.sweep(spec.token, seed)
        if per_start is None:
            # this thread's machine ran something else since forward: record this evaluation
            # again (the inputs still hold the forward's parameter values)
            _forward(spec, True)
            per_start = spec.ev.sweep(spec.token, seed)
        grads = []
        for j, (shape, needs) in enumerate(zip(ctx.shapes, ctx.needs_input_grad[1:])):
            if not needs:
                grads.append(None)
                continue
            g = per_start[j] if len(shape) == 1 and shape[0] == spec.S else per_start[j].sum()
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
