"""The calibration models of ../shared/data/calibration_suite.json evaluate to their `truth`, and
their gradients equal the eager torch baseline's.

Tolerances are per model, from the arithmetic: a model that computes its closed form exactly
(up to rounding) matches it to a few ulp (measured worst, both clients: 4.1e-15 relative, the
Horner cubic near a root), so 1e-12 is the bar. Two models compute only an approximation of
their `truth`; each is also checked, to 1e-12, against the same finite computation done in numpy.
"""
import math

import numpy as np
import pytest

import ndvm
from conftest import CLIENTS, shared_json_or_empty

SUITE = shared_json_or_empty("calibration_suite.json", "programs")

EXACT_RTOL = 1e-12
# model: (rtol against the closed form, the same finite computation in numpy)
APPROXIMATE = {
    # e^(ax) by its Taylor polynomial of degree 8: the remainder is at most (ax)^9 / 9! relative
    # (1.1e-4 at ax = 1.5, the top of the input range); measured 1.7e-5, so 2e-4.
    "M09_taylor_exp": (2e-4, lambda p, x: sum((p["a"] * x) ** i / math.factorial(i)
                                              for i in range(9))),
    # five Newton steps for sqrt(x) from a x: measured 5.5e-11 off sqrt at the ends of x's range
    # (the first guess is farthest there), so 5e-10.
    "M12_newton_sqrt": (5e-10, lambda p, x: _newton(p["a"] * x, x)),
}


def _newton(g, x):
    for _ in range(5):
        g = (g + x / g) / 2.0
    return g


def _inputs(model):
    rng = np.random.default_rng(0)
    return {k: rng.uniform(lo, hi, model["n"]) for k, (lo, hi) in model["inputs"].items()}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("model", SUITE, ids=[m["id"] for m in SUITE])
def test_truth_at_true_parameters(model, client):
    inputs = _inputs(model)
    res = ndvm.Evaluator(client=client).evaluate(
        ndvm.parse(model["src"], model["id"]), params=model["params"], data=inputs, grad=True)
    want = eval(model["truth"], {"np": np}, dict(inputs))
    rtol, replica = APPROXIMATE.get(model["id"], (EXACT_RTOL, None))
    np.testing.assert_allclose(res.value[0], want, rtol=rtol, atol=0)
    if replica is not None:
        (x,) = inputs.values()
        np.testing.assert_allclose(res.value[0], replica(model["params"], x), rtol=1e-12, atol=0)
    for name in model["params"]:
        assert np.all(np.isfinite(res.jacobian()[name]))


@pytest.mark.parametrize("model", SUITE, ids=[m["id"] for m in SUITE])
def test_gradients_equal_torch_autograd(model):
    """Every lane's partials against the split baseline's (float64; torch autograd)."""
    baselines = pytest.importorskip("ndvm.baselines")
    inputs = _inputs(model)
    prog = ndvm.parse(model["src"], model["id"])
    want = baselines.SplitEvaluator().evaluate(prog, params=model["params"], data=inputs,
                                               grad=True).jacobian()
    for client in CLIENTS:
        got = ndvm.Evaluator(client=client).evaluate(prog, params=model["params"], data=inputs,
                                                     grad=True).jacobian()
        for name in model["params"]:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-15,
                                       err_msg=f"{client}: d/d{name}")
