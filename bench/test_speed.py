"""Forward-with-gradient time per call: one group per program, one test per implementation and lane
count. Implementations: the eager baselines (tagged, split), every native client, and a hand-written
JAX model under jit(value_and_grad) (its compile time is recorded in extra_info, not timed).

    pytest bench/test_speed.py --benchmark-only --benchmark-json=results.json
    python -m bench.report results.json --plots charts/        (or both at once: python -m bench.run)
"""
import time

import numpy as np
import pytest

import ndvm
from bench.cases import LANES, cases

BASELINES = ("tagged", "split")
IMPLS = BASELINES + ndvm.clients() + ("jax",)
CASES = cases()
# rounds (after one warm-up call) for the slow eager baselines: (light program, heavy program)
ROUNDS = {"tagged": (5, 2), "split": (10, 3)}

_reference = {}


def reference(case, lanes):
    """Values and gradients from the first native client in float64 (checked after timing)."""
    key = (case.name, lanes)
    if key not in _reference:
        ev = ndvm.Evaluator(client=ndvm.clients()[0])
        _reference[key] = ev.evaluate(case.src, params=case.params(lanes), data=case.data,
                                      consts=case.consts, grad=True)
    return _reference[key]


def check(case, lanes, value, grad):
    ref = reference(case, lanes)
    np.testing.assert_allclose(np.reshape(value, -1), ref.value.reshape(-1), rtol=1e-8)
    for p, g in ref.grad.items():
        np.testing.assert_allclose(np.reshape(grad[p], -1), g, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("lanes", LANES)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fwd_grad(benchmark, case, impl, lanes):
    benchmark.group = case.name
    benchmark.extra_info.update(program=case.name, impl=impl, lanes=lanes)
    params = case.params(lanes)
    prog = ndvm.parse(case.src, case.name)
    if impl == "jax":
        jax_models = pytest.importorskip("bench.jax_models")
        model = jax_models.model_for(case)
        if model is None:
            pytest.skip(f"no hand-written JAX model for {case.name}")
        import jax.numpy as jnp
        pj = {k: jnp.asarray(v) for k, v in params.items()}
        dj = {k: jnp.asarray(v) for k, v in case.data.items()}
        t0 = time.perf_counter()
        f = jax_models.staged(model, case.consts)
        f(pj, dj)[0].block_until_ready()
        benchmark.extra_info["compile_s"] = time.perf_counter() - t0

        def call():
            v, g = f(pj, dj)
            v.block_until_ready()
            return v, g

        _, g = benchmark(call)
        # value_and_grad returns the summed loss: check the per-start values by the model itself
        check(case, lanes, model(pj, dj, case.consts), g)
        return
    if impl in BASELINES:
        pytest.importorskip("torch")
        from ndvm.baselines import get
        ev = get(impl)

        def call():
            return ev.evaluate(prog, params=params, data=case.data, consts=case.consts, grad=True)

        rounds = ROUNDS[impl][case.heavy]
        res = benchmark.pedantic(call, rounds=rounds, iterations=1, warmup_rounds=1)
    else:
        ev = ndvm.Evaluator(client=impl)

        def call():
            return ev.evaluate(prog, params=params, data=case.data, consts=case.consts, grad=True)

        res = benchmark(call)
    check(case, lanes, res.value, res.grad)
