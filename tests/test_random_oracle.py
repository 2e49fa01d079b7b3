"""Random programs against independent oracles, not against each other.

The two clients share the core's primitives, tape and reverse sweep, so their parity (test_fuzz,
test_bytecode) cannot see a wrong derivative rule. Here the programs of both generators
(tests/fuzzgen.py and the one in tests/test_bytecode.py) run against

* the eager split baseline (ndvm.baselines.split: numbers are torch tensors, gradients are torch
  autograd), float64, values and per-lane partials to 1e-9 relative; and
* central finite differences of the native values, on every lane where the program is smooth
  at the point (two step sizes agree), to 1e-5.

Inputs mix ordinary values with negative ones, zeros, tiny (1e-300 .. 1e-8) and large (1e3 ..
1e6) magnitudes. The default run is derandomized (fixed seeds); the long run is

    NDVM_ORACLE_PROGRAMS=3000 pytest tests/test_random_oracle.py -m slow -q
"""
import os
import random
import re

import numpy as np
import pytest

import ndvm
from conftest import CLIENTS
from fuzzgen import FORMS, PRIMS, Gen

baselines = pytest.importorskip("ndvm.baselines")

LONG = int(os.environ.get("NDVM_ORACLE_PROGRAMS", "0"))
S, N = 3, 4
RTOL = 1e-9      # value and gradient against the baseline (the same arithmetic in another order)
FD_RTOL = 1e-5   # against central differences (truncation ~h^2, rounding ~eps |f| / h)

_TINY = [1e-300, -1e-300, 1e-12, -3e-9]
_LARGE = [1e3, -2.5e3, 1e6, -1e6]


def draw_inputs(rng, extreme):
    """params a, b [S] and data x [N]: ordinary values, or (extreme) a mix of signs, zeros,
    tiny and large magnitudes."""
    def one():
        if not extreme:
            return rng.uniform(-2, 2)
        k = rng.integers(6)
        if k == 0:
            return 0.0
        if k == 1:
            return float(rng.choice(_TINY))
        if k == 2:
            return float(rng.choice(_LARGE))
        return rng.uniform(-3, 3)
    return ({"a": np.array([one() for _ in range(S)]), "b": np.array([one() for _ in range(S)])},
            {"x": np.array([one() for _ in range(N)])})


def _bytecode_gen(seed):
    from test_bytecode import Gen as BytecodeGen
    return BytecodeGen(seed)


def programs(kind, seed, count):
    """`count` random valid programs over a, b and x from one of the two generators."""
    if kind == "fuzzgen":
        g = Gen(random.Random(seed))
        return [g.valid() for _ in range(count)]
    g = _bytecode_gen(seed)
    # its programs use parameters p0, p1; rename them to the inputs drawn here
    return [re.sub(r"\bp0\b", "a", re.sub(r"\bp1\b", "b", g.program())) for _ in range(count)]


def _outcome(ev, prog, params, data):
    try:
        with np.errstate(all="ignore"):
            return ev.evaluate(prog, params=params, data=data, grad=True)
    except ndvm.SchemeError as e:
        return e
    except RuntimeError as e:  # torch.linalg on an exactly singular matrix: no oracle here
        if "singular" in str(e):
            return None
        raise


def _close(got, want, rtol, atol):
    """Elementwise: equal (nan with nan, inf with inf) or |got - want| <= rtol |want| + atol."""
    got, want = np.asarray(got), np.asarray(want)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(all="ignore"):
        near = np.abs(got - want) <= rtol * np.abs(want) + atol
    return same | near


def check_against_split(src, params, data):
    """Values and per-lane partials of every client against the split baseline; returns the
    first client's Result (None when the program raises everywhere alike)."""
    prog = ndvm.parse(src)
    want = _outcome(baselines.SplitEvaluator(max_steps=2_000_000), prog, params, data)
    if want is None:
        return None
    first = None
    for client in CLIENTS:
        got = _outcome(ndvm.Evaluator(client=client), prog, params, data)
        if isinstance(want, ndvm.SchemeError) or isinstance(got, ndvm.SchemeError):
            # both raise (a limit or an index that depends on data), with the same kind
            assert type(got) is type(want), f"{client}: {got!r} vs split {want!r}\n{src}"
            continue
        first = first or got
        # a value near zero from cancellation is measured against the run's largest value
        scale = np.max(np.abs(np.where(np.isfinite(want.value), want.value, 0)))
        ok = _close(got.value, want.value, RTOL, 1e-13 * (scale + 1.0))
        assert ok.all(), (f"{client}: value {got.value[~ok]} vs split {want.value[~ok]}\n"
                          f"{src}\nparams={params} data={data}")
        gj, wj = got.jacobian(), want.jacobian()
        # torch's linear algebra (LAPACK's LU; an SVD for a singular det) and ndvm's own
        # elimination and cofactors round differently, by the matrix's condition number: with
        # 1e6 entries or a singular det their partials agree to ~1e-8 only, so programs with
        # det, logdet, inv or solve get an absolute floor of 1e-7 (of the lane's value, or 1)
        floor = 1e-7 if re.search(r"\((det|logdet|inv|solve) ", src) else 1e-12
        for p in params:
            # where torch's chain rule meets 0 * inf it gives nan; ndvm's sweep never multiplies
            # a zero adjoint (a documented difference), so only finite oracle partials count
            live = np.isfinite(wj[p]) & np.isfinite(want.value)
            # a partial far below its lane's value comes from cancellation (1 - tanh^2 near
            # saturation): its error is measured against the value, 1e-12 of it
            atol = floor * (np.abs(np.where(live, want.value, 0)) + 1.0)
            ok = _close(gj[p], wj[p], RTOL, atol) | ~live
            assert ok.all(), (f"{client}: d/d{p} {gj[p][~ok]} vs split {wj[p][~ok]}\n{src}\n"
                              f"params={params} data={data}")
    return first


def check_against_finite_differences(src, params, data, res):
    """Per-lane partials against central differences where the program is smooth; returns the
    number of lanes compared."""
    ev = ndvm.Evaluator(client=CLIENTS[0])
    prog = ndvm.parse(src)
    # central differences need moderate inputs: with 1e3..1e6 operands, intermediates of 1e12
    # cancel and their rounding swamps a difference quotient (the split oracle covers those)
    moderate = np.ones((S, N), dtype=bool)
    for v in params.values():
        moderate &= (np.abs(v) <= 100)[:, None]
    for v in data.values():
        moderate &= (np.abs(v) <= 100)[None, :]
    compared = 0
    with np.errstate(all="ignore"):
        for p in params:
            base = params[p]
            f0 = res.value
            one_sided, nearby = [], []
            for rel in (1e-6, 5e-7):
                h = (rel * np.maximum(1.0, np.abs(base)))[:, None]
                up = ev.evaluate(prog, params={**params, p: base + h[:, 0]}, data=data, grad=True)
                dn = ev.evaluate(prog, params={**params, p: base - h[:, 0]}, data=data, grad=True)
                one_sided += [(up.value - f0) / h, (f0 - dn.value) / h]
                nearby += [up.jacobian()[p], dn.jacobian()[p]]
            fd2 = (one_sided[2] + one_sided[3]) / 2
            jac = res.jacobian()[p]
            # smooth here: forward and backward differences at both step sizes agree (no kink or
            # jump within the step), the path's own derivative is the same a step away on either
            # side (no branch decided by an exact tie at this very point, where the derivative
            # of the path taken is not the function's), and the numbers are of moderate size
            fscale = np.abs(f0) + 1.0
            smooth = moderate & np.isfinite(jac) & (np.abs(jac) < 1e6) & (np.abs(f0) < 1e6)
            for d in one_sided:
                smooth &= np.isfinite(d) & (np.abs(d - fd2) <= 1e-4 * (np.abs(fd2) + fscale))
            for d in nearby:
                smooth &= np.isfinite(d) & (np.abs(d - jac) <= 1e-4 * (np.abs(jac) + fscale))
            bad = smooth & (np.abs(jac - fd2) > FD_RTOL * (np.abs(fd2) + fscale))
            assert not bad.any(), (f"d/d{p}: {jac[bad]} vs finite differences {fd2[bad]}\n{src}\n"
                                   f"params={params} data={data}")
            compared += int(smooth.sum())
    return compared


CASES = [(kind, seed, extreme) for kind in ("fuzzgen", "bytecode") for seed in range(4)
         for extreme in (False, True)]


def _run(kind, seed, extreme, count):
    rng = np.random.default_rng(seed + (1000 if extreme else 0))
    checked = fd_lanes = 0
    for src in programs(kind, 7000 + seed, count):
        params, data = draw_inputs(rng, extreme)
        res = check_against_split(src, params, data)
        if res is None:
            continue
        checked += 1
        fd_lanes += check_against_finite_differences(src, params, data, res)
    return checked, fd_lanes


@pytest.mark.parametrize("kind, seed, extreme", CASES,
                         ids=[f"{k}-{s}-{'extreme' if e else 'plain'}" for k, s, e in CASES])
def test_random_programs_against_split_and_finite_differences(kind, seed, extreme):
    checked, fd_lanes = _run(kind, seed, extreme, 25)
    assert checked >= 15  # most programs run to a value (else the generator is broken)
    assert fd_lanes >= 100  # and many lanes are smooth enough for central differences


@pytest.mark.slow
def test_many_random_programs_against_oracles():
    """The long run (NDVM_ORACLE_PROGRAMS programs per generator; 400 by default)."""
    total = LONG or 400
    for kind in ("fuzzgen", "bytecode"):
        for extreme in (False, True):
            checked, fd_lanes = _run(kind, 90_000 + extreme, extreme, total // 2)
            assert checked >= total // 4 and fd_lanes >= total, (kind, extreme)


def test_generators_reach_every_primitive_and_form():
    """Every primitive and special form occurs in the programs run against the oracles (the
    default cases and the slow one, both part of `pytest tests`), and modulo/remainder get
    divisors that depend on parameters, of both signs."""
    srcs = [src for k, s, _ in CASES[::2] for src in programs(k, 7000 + s, 25)]
    srcs += [src for k in ("fuzzgen", "bytecode") for e in (0, 1)
             for src in programs(k, 90_000 + e, 200)]
    text = " ".join(srcs)
    atoms = set(re.findall(r"[^\s()\[\]']+", text))
    missing = [p for p in PRIMS + FORMS if p not in atoms and p != "set!"]
    assert not missing, missing
    assert re.search(r"\(modulo [^;]*\(- -0", text) and re.search(r"\(remainder [^;]*\(- -0", text)
    assert re.search(r"\(modulo [^;]*\(\+ 0\.[45] \(abs", text)
