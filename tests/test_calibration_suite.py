"""The calibration models of ../shared/data/calibration_suite.json evaluate to their `truth`."""
import numpy as np
import pytest

import ndvm
from conftest import CLIENTS, shared_json_or_empty

SUITE = shared_json_or_empty("calibration_suite.json", "programs")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("model", SUITE, ids=[m["id"] for m in SUITE])
def test_truth_at_true_parameters(model, client):
    rng = np.random.default_rng(0)
    inputs = {k: rng.uniform(lo, hi, model["n"]) for k, (lo, hi) in model["inputs"].items()}
    res = ndvm.Evaluator(client=client).evaluate(
        ndvm.parse(model["src"], model["id"]), params=model["params"], data=inputs, grad=True)
    # `truth` is the closed form; Taylor, Newton and Euler models only approximate it
    want = eval(model["truth"], {"np": np}, dict(inputs))
    np.testing.assert_allclose(res.value[0], want, rtol=1e-4, atol=1e-9)
    for name in model["params"]:
        assert np.all(np.isfinite(res.jacobian()[name]))
