"""``ndvm.compare``: run one program on every client (and the eager baselines), check, time.

Each implementation evaluates the program with gradients at each start count S (lanes = S x N
data points). Values and per-lane partials are compared with the first client's (max absolute
and relative difference); times are the best per-call time over alternating rounds, in µs.
"""
import math
import time

import numpy as np

from ndvm import clients as _clients
from ndvm._core import Program, parse
from ndvm.evaluator import Evaluator

__all__ = ["Comparison", "compare"]

# values and partials agree when |a - b| <= _ABS + _REL * |reference|
_ABS, _REL = 1e-9, 1e-6


class Comparison:
    """The rows of ``ndvm.compare``: one dict per (implementation, starts).

    Keys: ``impl`` (client or baseline name), ``kind`` ("client" or "baseline"), ``starts`` (S),
    ``lanes`` (S x N), ``us_per_call``, ``us_per_lane``, ``value_abs``/``value_rel`` and
    ``grad_abs``/``grad_rel`` (max differences from the reference, the first client),
    ``agrees`` (within 1e-9 + 1e-6 |reference|). ``str()`` is a table; ``rows`` the dicts.
    """

    columns = ("impl", "kind", "starts", "lanes", "us_per_call", "us_per_lane", "value_abs",
               "value_rel", "grad_abs", "grad_rel", "agrees")

    def __init__(self, program, rows, reference, notes=()):
        self.program = program
        self.rows = rows
        self.reference = reference
        self.notes = list(notes)

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    @property
    def agree(self):
        """True when every implementation agrees with the reference."""
        return all(r["agrees"] for r in self.rows)

    def to_dicts(self):
        """The rows as a list of plain dicts (JSON-ready)."""
        return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                 for k, v in r.items()} for r in self.rows]

    def __repr__(self):
        return f"Comparison({self.program!r}, {len(self.rows)} rows, agree={self.agree})"

    def __str__(self):
        head = ["implementation", "starts", "lanes", "µs/call", "µs/lane", "max |Δvalue|",
                "rel", "max |Δgrad|", "rel", "agrees"]
        body = []
        for r in self.rows:
            body.append([f"{r['impl']} ({r['kind']})", str(r["starts"]), str(r["lanes"]),
                         f"{r['us_per_call']:.1f}", f"{r['us_per_lane']:.3f}",
                         f"{r['value_abs']:.2g}", f"{r['value_rel']:.2g}",
                         f"{r['grad_abs']:.2g}", f"{r['grad_rel']:.2g}",
                         "yes" if r["agrees"] else "NO"])
        widths = [max(len(x[i]) for x in body + [head]) for i in range(len(head))]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                           enumerate(zip(x, widths))) for x in [head] + body]
        lines.append(f"differences are from {self.reference} at the same starts; times are "
                     f"the best of several warm calls with gradients")
        return "\n".join(lines + self.notes)


def _diff(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    d = np.where(same, 0.0, np.abs(a - b))
    d = np.where(np.isnan(d), np.inf, d)
    scale = np.abs(b)
    rel = np.where(d == 0, 0.0, d / np.where(scale > 0, scale, np.inf))
    rel = np.where((d > 0) & (scale == 0), np.inf, rel)
    # (identical NaNs agree: d is 0 there, and the NaN scale must not fail the test)
    ok = bool(np.all(same | (d <= _ABS + _REL * np.where(np.isnan(scale), 0.0, scale))))
    return (float(d.max(initial=0.0)), float(rel.max(initial=0.0)), ok)


def _best_us(fn, rounds, min_time):
    t0 = time.perf_counter()
    fn()  # warm
    once = time.perf_counter() - t0
    n = max(1, int(min_time / max(once, 1e-7)))
    best = math.inf
    for _ in range(rounds if once < 0.5 else 1):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def compare(prog, params=None, data=None, consts=None, starts=(1, 256), clients=None,
            baselines=None, rounds=5, min_time=0.02, seed=0):
    """Run ``prog`` on every client (and the eager torch baselines), check agreement, time it.

    prog: an ndvm.Program or source text; params: name -> number (one start; for S starts each
    value is spread by a seeded 1% jitter); data: name -> [N]; consts: name -> number/vector/matrix.
    starts: the start counts S to time (lanes = S x N). clients: names (default every installed
    client, ``ndvm.clients()``); baselines: names of ``ndvm.baselines`` (default both when torch
    is installed, none otherwise). Returns a Comparison (``str()`` is a table; ``rows`` the
    dicts; ``agree`` whether every implementation matched the first client).
    """
    if not isinstance(prog, Program):
        prog = parse(prog, name="<program>") if isinstance(prog, str) else prog
    params = dict(params or {})
    for k, v in params.items():
        if np.ndim(v) != 0:
            raise ValueError(f"compare: parameter {k!r} must be one number (starts are made "
                             f"from it), got shape {np.shape(v)}")
    starts = tuple(int(s) for s in starts)
    if not starts or min(starts) <= 0:
        raise ValueError(f"compare: starts must be positive counts, got {starts}")
    impls = [(c, "client", Evaluator(client=c)) for c in (clients or _clients())]
    notes = []
    if baselines is None:
        try:
            from ndvm import baselines as _bl
            baselines = list(_bl.BASELINES)
        except ImportError:
            baselines = []
            notes.append("(eager torch baselines skipped: PyTorch is not installed; "
                         "pip install 'ndvm[torch]')")
    if baselines:
        from ndvm import baselines as _bl
        impls += [(b, "baseline", _bl.get(b)) for b in baselines]
    rng = np.random.default_rng(seed)
    rows = []
    reference = impls[0][0]
    for S in starts:
        p = {k: (float(v) if S == 1 else float(v) * (1 + 0.01 * rng.standard_normal(S)))
             for k, v in params.items()}
        results = []
        for name, kind, ev in impls:
            def call(ev=ev):
                return ev.evaluate(prog, params=p or None, data=data, consts=consts, grad=True)
            results.append((name, kind, call(), call))
        ref = results[0][2]
        ref_jac = ref.jacobian() if ref.param_names else {}
        for name, kind, res, call in results:
            va, vr, vok = _diff(res.value, ref.value)
            ga = gr = 0.0
            gok = True
            jac = res.jacobian() if ref_jac else {}
            for k in ref_jac:
                a, r, ok = _diff(jac[k], ref_jac[k])
                ga, gr, gok = max(ga, a), max(gr, r), gok and ok
            us = _best_us(call, rounds, min_time)
            lanes = res.S * res.N
            rows.append({"impl": name, "kind": kind, "starts": S, "lanes": lanes,
                         "us_per_call": us, "us_per_lane": us / lanes, "value_abs": va,
                         "value_rel": vr, "grad_abs": ga, "grad_rel": gr,
                         "agrees": vok and gok})
    return Comparison(prog.name, rows, reference, notes)
