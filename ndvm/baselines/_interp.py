"""The evaluator both eager baselines share: it walks the program as read data (lists, symbols).

Every value it touches is opaque; a *model* (split or tagged) decides how values are represented
and implements the primitives, so the two baselines differ only in their representation. Lanes
that disagree at a test are handled by the driver (`run_partitioned`): the run stops with
`Diverge`, the lanes are split by the test's outcome and each part is re-run, so every lane follows
its own exact path and no dead lane ever computes anything.
"""
import numpy as np
import torch

from ndvm._core import Dotted, Symbol, parse, prelude, read
from ndvm.errors import EvalError, LimitError, SchemeError, UnboundError
from ndvm.evaluator import Result, bind_inputs

__all__ = ["BaselineEvaluator", "Closure", "Diverge", "Interpreter", "show"]

_PARAM, _DATA, _CONST = 0, 1, 2
_MISSING = object()
_SPECIAL = frozenset(["if", "let", "let*", "begin", "cond", "loop", "recur", "quote", "lambda",
                      "and", "or", "when", "unless", "letrec", "letrec*", "case"])
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


class Diverge(Exception):
    """Lanes disagree at a test; ``mask`` (bool tensor over the run's lanes) is the test."""

    def __init__(self, mask):
        super().__init__("lanes diverge")
        self.mask = mask


class Recur:
    """The values of a ``(recur ...)``, handed back to the loop that owns it."""

    __slots__ = ("vals",)

    def __init__(self, vals):
        self.vals = vals


class Closure:
    """A lambda with its environment; the models box a reference to it."""

    __slots__ = ("params", "rest", "body", "env", "name")

    def __init__(self, params, rest, body, env, name):
        self.params = params
        self.rest = rest
        self.body = body
        self.env = env
        self.name = name


class Env:
    """One frame of lexical bindings."""

    __slots__ = ("vars", "parent")

    def __init__(self, vars, parent):
        self.vars = vars
        self.parent = parent


def show(x, limit=200):
    """Scheme text of read data (for error messages)."""
    if isinstance(x, (list, Dotted)):
        parts = [show(e, limit) for e in (x.items if isinstance(x, Dotted) else x)]
        if isinstance(x, Dotted):
            parts += [".", show(x.tail, limit)]
        text = "(" + " ".join(parts) + ")"
    elif x is True or x is False:
        text = "#t" if x else "#f"
    else:
        text = str(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _params(spec):
    """(names, rest) of a lambda parameter list: a list, a Dotted list or a bare symbol."""
    if isinstance(spec, str):
        return (), str(spec)
    if isinstance(spec, Dotted):
        return tuple(str(p) for p in spec.items), str(spec.tail)
    return tuple(str(p) for p in spec), None


def _signature(target):
    """(name, parameter spec) of a ``(define (name . params) ...)`` head."""
    if isinstance(target, Dotted):
        return str(target.items[0]), Dotted(target.items[1:], target.tail)
    return str(target[0]), target[1:]


def _is_define(x):
    return type(x) is list and len(x) > 0 and x[0] == "define"


def _non_head_specials(x, out):
    if isinstance(x, Dotted):
        _non_head_specials(x.items, out)
        _non_head_specials(x.tail, out)
    elif isinstance(x, list):
        for i, e in enumerate(x):
            if i and isinstance(e, str) and e in _SPECIAL:
                out.add(str(e))
            _non_head_specials(e, out)
    return out


_shadow_cache = {}


def _shadowable(top):
    """Special-form names the program mentions other than as a head: they may be rebound."""
    key = id(top)
    hit = _shadow_cache.get(key)
    if hit is None or hit[0] is not top:
        if len(_shadow_cache) > 512:
            _shadow_cache.clear()
        hit = _shadow_cache[key] = (top, frozenset(_non_head_specials(top, set())))
    return hit[1]


_PRELUDE = {}
for _d in read(prelude(), "<prelude>"):
    _PRELUDE[_signature(_d[1])[0]] = _d


class Interpreter:
    """Evaluates read data over one model instance (one run over a set of lanes)."""

    def __init__(self, model, max_steps):
        self.m = model
        self.max_steps = max_steps
        self.steps = 0
        self.prelude_env = Env({}, None)
        self.shadowable = frozenset()
        self.prims = {}

    # -- names ---------------------------------------------------------------------------------
    def lookup(self, name, env):
        e = env
        while e is not None:
            v = e.vars.get(name, _MISSING)
            if v is not _MISSING:
                return v
            e = e.parent
        return self.global_value(name)

    def global_value(self, name):
        v = self.prims.get(name)
        if v is not None:
            return v
        if name in self.m.PRIMS:
            v = self.prims[name] = self.m.prim_value(name)
            return v
        if name == "pi":  # the language's one built-in constant (shadowed by any binding)
            return self.m.literal(3.141592653589793)
        v = self.prelude_env.vars.get(name)
        if v is not None:
            return v
        d = _PRELUDE.get(name)
        if d is not None:
            names, rest = _params(_signature(d[1])[1])
            v = self.m.closure(Closure(names, rest, d[2:], self.prelude_env, name))
            self.prelude_env.vars[name] = v
            return v
        raise UnboundError(f"unbound variable '{name}'", form=str(name))

    # -- evaluation ----------------------------------------------------------------------------
    def bound(self, name, env):
        """Whether a lexical frame binds ``name`` (a special form's name may be rebound)."""
        while env is not None:
            if name in env.vars:
                return True
            env = env.parent
        return False

    def run(self, top, inputs):
        """Evaluate the top-level forms (defines, then expressions) with the free names bound."""
        self.shadowable = _shadowable(top)
        env = Env(dict(inputs), None)
        x, env = self.body(top, env)
        return self.ev(x, env)

    def tick(self):
        self.steps += 1
        if self.steps > self.max_steps:
            raise LimitError(f"step limit ({self.max_steps}) reached")

    def body(self, forms, env):
        """Run a body's internal defines and all but its last form; returns (last, env)."""
        if _is_define(forms[0]):
            env = Env({}, env)
        for x in forms[:-1]:
            if _is_define(x):
                self.define(x, env)
            else:
                self.ev(x, env)
        if _is_define(forms[-1]):
            raise EvalError("a body must end with an expression", form=show(forms[-1]))
        return forms[-1], env

    def define(self, x, env):
        target = x[1]
        if isinstance(target, (list, Dotted)):
            name, spec = _signature(target)
            names, rest = _params(spec)
            env.vars[name] = self.m.closure(Closure(names, rest, x[2:], env, name))
        else:
            env.vars[str(target)] = self.ev(x[2], env)

    def ev(self, x, env):
        m = self.m
        while True:
            tx = type(x)
            if tx is Symbol:
                return self.lookup(x, env)
            if tx is not list:
                if tx is Dotted:
                    raise EvalError("a dotted list is not an expression", form=show(x))
                return m.literal(x)
            op = x[0]
            if type(op) is Symbol and op in _SPECIAL and not (
                    op in self.shadowable and self.bound(op, env)):
                if op == "if":
                    if m.truth(self.ev(x[1], env)):
                        x = x[2]
                    elif len(x) == 4:
                        x = x[3]
                    else:
                        return m.unspec
                    continue
                if op == "let":
                    if type(x[1]) is Symbol:  # named let
                        frame = Env({}, env)
                        names = tuple(str(b[0]) for b in x[2])
                        clo = Closure(names, None, x[3:], frame, str(x[1]))
                        frame.vars[str(x[1])] = m.closure(clo)
                        args = [self.ev(b[1], env) for b in x[2]]
                        self.tick()
                        x, env = self.body(clo.body, Env(dict(zip(names, args)), frame))
                        continue
                    vals = {str(b[0]): self.ev(b[1], env) for b in x[1]}
                    x, env = self.body(x[2:], Env(vals, env))
                    continue
                if op == "let*":
                    for b in x[1]:
                        env = Env({str(b[0]): self.ev(b[1], env)}, env)
                    x, env = self.body(x[2:], env)
                    continue
                if op == "begin":
                    for e in x[1:-1]:
                        self.ev(e, env)
                    x = x[-1]
                    continue
                if op == "cond":
                    for clause in x[1:]:
                        if clause[0] == "else":
                            break
                        t = self.ev(clause[0], env)
                        if m.truth(t):
                            if len(clause) == 1:
                                return t
                            break
                    else:
                        return m.unspec
                    for e in clause[1:-1]:
                        self.ev(e, env)
                    x = clause[-1]
                    continue
                if op == "loop":
                    names = tuple(str(b[0]) for b in x[1])
                    vals = [self.ev(b[1], env) for b in x[1]]
                    while True:
                        self.tick()
                        last, frame = self.body(x[2:], Env(dict(zip(names, vals)), env))
                        r = self.ev(last, frame)
                        if type(r) is not Recur:
                            return r
                        vals = r.vals
                if op == "recur":
                    return Recur([self.ev(e, env) for e in x[1:]])
                if op == "quote":
                    return m.datum(x[1])
                if op == "lambda":
                    names, rest = _params(x[1])
                    return m.closure(Closure(names, rest, x[2:], env, "lambda"))
                if op in ("and", "or"):
                    if len(x) == 1:
                        return m.literal(op == "and")
                    want = op == "and"
                    for e in x[1:-1]:
                        v = self.ev(e, env)
                        if m.truth(v) != want:
                            return v
                    x = x[-1]
                    continue
                if op in ("when", "unless"):
                    if m.truth(self.ev(x[1], env)) != (op == "when"):
                        return m.unspec
                    for e in x[2:-1]:
                        self.ev(e, env)
                    x = x[-1]
                    continue
                if op in ("letrec", "letrec*"):
                    env = Env({}, env)
                    for b in x[1]:
                        env.vars[str(b[0])] = self.ev(b[1], env)
                    x, env = self.body(x[2:], env)
                    continue
                if op == "case":
                    key = self.ev(x[1], env)
                    eqv = m.procedure(self.global_value("eqv?"))
                    for clause in x[2:]:
                        if clause[0] == "else" or any(
                                m.truth(m.apply_prim(eqv, [key, m.datum(d)])) for d in clause[0]):
                            break
                    else:
                        return m.unspec
                    for e in clause[1:-1]:
                        self.ev(e, env)
                    x = clause[-1]
                    continue
            # application
            f = self.ev(op, env)
            args = [self.ev(a, env) for a in x[1:]]
            p = m.procedure(f)
            if type(p) is not Closure:
                try:
                    return m.apply_prim(p, args)
                except SchemeError as e:
                    if e.form is None:
                        e.form = show(x)
                    raise
            self.tick()
            n = len(p.params)
            if len(args) != n and not (p.rest and len(args) >= n):
                want = f"{n}" if not p.rest else f"at least {n}"
                raise EvalError(f"{p.name}: expects {want} argument(s), got {len(args)}",
                                form=show(x))
            vals = dict(zip(p.params, args))
            if p.rest:
                vals[p.rest] = m.list(args[n:])
            x, env = self.body(p.body, Env(vals, p.env))


_read_cache = {}


def _program_data(prog):
    top = _read_cache.get(prog.source)
    if top is None:
        if len(_read_cache) > 512:
            _read_cache.clear()
        top = _read_cache[prog.source] = read(prog.source, prog.name)
    return top


class BaselineEvaluator:
    """``evaluate(prog, params=, data=, consts=, grad=)`` over a model class; see ndvm.Evaluator.

    dtype: "float64" or "float32"; compat: None or "reference" (clamped sqrt/log).
    """

    model = None  # set by subclasses
    name = None

    def __init__(self, dtype="float64", compat=None, *, max_steps=10_000_000):
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {tuple(_DTYPES)}, got {dtype!r}")
        if compat not in (None, "reference"):
            raise ValueError(f"compat must be None or 'reference', got {compat!r}")
        self.dtype = dtype
        self.compat = compat
        self.max_steps = int(max_steps)

    def __repr__(self):
        return f"{type(self).__name__}(dtype={self.dtype!r}, compat={self.compat!r})"

    def evaluate(self, prog, params=None, data=None, consts=None, grad=False):
        """Evaluate ``prog`` on S x N lanes; returns an ndvm.Result (value [S, N], grad {p: [S]})."""
        if isinstance(prog, str):
            prog = parse(prog)
        bindings, param_names, S, N = bind_inputs(prog, params, data, consts)
        top = _program_data(prog)
        L = S * N
        host = []  # (name, kind, per-lane array or None, the binding)
        for name, (kind, arr, rows, cols) in zip(prog.free_names, bindings):
            if kind == _PARAM:
                host.append((name, kind, np.repeat(arr, N) if rows else np.full(L, arr[0]), arr))
            elif kind == _DATA and rows:
                host.append((name, kind, np.tile(arr, S), arr))
            elif kind == _DATA:
                host.append((name, kind, None, float(arr[0])))
            else:
                host.append((name, kind, None, (arr, rows, cols)))
        value = np.empty(L)
        active = [name for name, kind, _, _ in host if kind == _PARAM] if grad else []
        jac = {name: np.zeros(L) for name in active}
        parts = [np.arange(L)]
        with np.errstate(all="ignore"):
            while parts:
                idx = parts.pop()
                try:
                    v, g = self._run(top, host, idx, bool(grad))
                except Diverge as d:
                    mask = d.mask.detach().cpu().numpy().astype(bool)
                    parts += [idx[~mask], idx[mask]]
                    continue
                except RecursionError:
                    raise LimitError("recursion too deep for the eager baseline") from None
                value[idx] = v
                for name, gl in g.items():
                    jac[name][idx] = gl
        jacobians = None
        if grad:
            jacobians = {p: (jac[p].reshape(S, N) if p in jac else np.zeros((S, N)))
                         for p in param_names}
        return Result(value.reshape(S, N), jacobians, tuple(param_names), S, N)

    def _run(self, top, host, idx, grad):
        dtype = _DTYPES[self.dtype]
        m = self.model(len(idx), dtype, self.compat)
        inputs, leaves = {}, {}
        with torch.set_grad_enabled(grad):
            for name, kind, lanes, b in host:
                if kind == _PARAM:
                    t = torch.tensor(lanes[idx], dtype=dtype, requires_grad=grad)
                    leaves[name] = t
                    inputs[name] = m.input_number(t)
                elif kind == _DATA:
                    inputs[name] = m.input_number(
                        b if lanes is None else torch.tensor(lanes[idx], dtype=dtype))
                else:
                    inputs[name] = m.input_const(*b)
            out = m.result(Interpreter(m, self.max_steps).run(top, inputs))
            g = {}
            if grad and leaves:
                if out.requires_grad:
                    parts = torch.autograd.grad(out.sum(), list(leaves.values()),
                                                allow_unused=True)
                else:
                    parts = [None] * len(leaves)
                for name, p in zip(leaves, parts):
                    g[name] = (np.zeros(len(idx)) if p is None
                               else p.detach().to(torch.float64).numpy())
        return out.detach().to(torch.float64).numpy(), g
