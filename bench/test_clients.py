"""Warm evaluate-with-gradient per client on the reference's programs (pytest-benchmark).

    pytest bench/test_clients.py --benchmark-only --benchmark-group-by=param:case

B lanes: damped_oscillator varies its data input t over B points; logistic_map_loop and
kalman2d_T80 vary their parameters over B starts. Kalman binds obs as an 80x2 constant matrix.
"""
import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest

import ndvm

REFS = Path(os.environ.get("NDVM_SHARED_DATA")
            or Path(__file__).resolve().parents[2] / "shared" / "data") / "oracle_refs.json"
NAMES = ("damped_oscillator", "logistic_map_loop", "kalman2d_T80")


def cases():
    if not REFS.exists():
        return []
    progs = {p["name"]: p for p in json.loads(REFS.read_text())["programs"]}
    return [progs[n] for n in NAMES if n in progs]


def inputs(ref, B):
    """(params, data, consts) with B lanes."""
    rng = np.random.default_rng(0)
    s = ref["scalars"]
    consts = {}
    if ref["matrix"]:
        m = ref["matrix"]
        consts[m["name"]] = np.array(m["data"]).reshape(m["rows"], m["cols"])
    if ref["name"] == "damped_oscillator":
        params = {k: v for k, v in s.items() if k != "t"}
        return params, {"t": np.linspace(0.0, 5.0, B)}, consts
    params = {k: v * (1 + 0.01 * rng.standard_normal(B)) for k, v in s.items()}
    return params, None, consts


@pytest.mark.parametrize("B", [1, 256])
@pytest.mark.parametrize("client", ["dmci", "bytecode"])
@pytest.mark.parametrize("case", cases(), ids=lambda r: r["name"])
def test_evaluate_with_grad(benchmark, case, client, B):
    prog = ndvm.parse(case["src"], name=case["name"])
    ev = ndvm.Evaluator(client=client)
    params, data, consts = inputs(case, B)
    ev.evaluate(prog, params=params, data=data, consts=consts, grad=True)  # warm
    benchmark.extra_info.update(B=B, client=client)
    res = benchmark(ev.evaluate, prog, params=params, data=data, consts=consts, grad=True)
    # checked against an independent oracle: the eager torch baseline (torch autograd), float64
    ref = oracle(case["name"], B)
    np.testing.assert_allclose(res.value, ref.value, rtol=1e-10, atol=1e-12)
    for name, jac in ref.jacobian().items():
        np.testing.assert_allclose(res.jacobian()[name], jac, rtol=1e-8, atol=1e-10,
                                   err_msg=f"d/d{name}")


@functools.lru_cache(maxsize=None)
def oracle(name, B):
    """The split baseline's values and gradients on the same inputs (computed once per case)."""
    from ndvm.baselines import SplitEvaluator

    case = next(c for c in cases() if c["name"] == name)
    params, data, consts = inputs(case, B)
    return SplitEvaluator().evaluate(ndvm.parse(case["src"], name=name), params=params,
                                     data=data, consts=consts, grad=True)
