"""The one native entry (Evaluator.bind/run/sweep) and the layering around it."""
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import ndvm

PROG = "(* a (exp (- 0 (* b x))))"


@pytest.mark.parametrize("client", ["dmci", "bytecode"])
def test_grad_is_reduced_natively_and_jacobian_matches(client):
    ev = ndvm.Evaluator(client=client)
    rng = np.random.default_rng(0)
    a, b, x = rng.normal(1, 0.1, 3), rng.normal(0.5, 0.1, 3), np.linspace(0, 2, 7)
    res = ev.evaluate(PROG, params={"a": a, "b": b}, data={"x": x}, grad=True)
    jac = res.jacobian()
    for k in ("a", "b"):
        assert jac[k].shape == (3, 7)
        np.testing.assert_allclose(res.grad[k], jac[k].sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(jac["a"], np.exp(-b[:, None] * x), rtol=1e-14)


def test_jacobian_on_demand_uses_the_inputs_of_the_call():
    ev = ndvm.Evaluator()
    a, b, x = np.array([1.0, 2.0]), np.array([0.5, 0.25]), np.linspace(0, 1, 4)
    res = ev.evaluate(PROG, params={"a": a, "b": b}, data={"x": x}, grad=True)
    want = np.exp(-b[:, None] * x)
    b[:] = 9.0  # changing the caller's arrays afterwards does not change this result
    x[:] = 9.0
    ev.evaluate(PROG, params={"a": 3.0, "b": 1.0}, data={"x": 0.5}, grad=True)
    np.testing.assert_allclose(res.jacobian()["a"], want, rtol=1e-15)


def test_run_seeds_and_reductions_agree():
    ev = ndvm.Evaluator()
    prog = ndvm.parse(PROG)
    rng = np.random.default_rng(1)
    inputs = ev.bind(prog, {"a": rng.normal(1, 0.1, 4), "b": 0.3, "c": 2.0},
                     {"x": np.linspace(0, 3, 5)})
    assert (inputs.S, inputs.N, inputs.params) == (4, 5, ("a", "b", "c"))
    value, lanes, loss = ev.run(prog, inputs, grad=True, reduce="lane")
    assert lanes.shape == (3, 4, 5) and loss is None
    np.testing.assert_array_equal(lanes[2], 0.0)  # c is not in the program
    _, starts, _ = ev.run(prog, inputs, grad=True, reduce="start")
    np.testing.assert_allclose(starts, lanes.sum(axis=2), rtol=1e-14)
    seed = rng.normal(size=(4, 5))
    _, seeded, _ = ev.run(prog, inputs, grad=True, seed=seed)
    np.testing.assert_allclose(seeded, (lanes * seed).sum(axis=2), rtol=1e-12)
    # a kept tape swept later gives the same; a stale token gives None
    ev.run(prog, inputs, grad=True, reduce=None)
    token = ev.tape()
    np.testing.assert_array_equal(ev.sweep(token, seed), seeded)
    ev.run(prog, inputs)
    assert ev.sweep(token, seed) is None
    y = np.sin(np.linspace(0, 3, 5))
    _, g, loss = ev.run(prog, inputs, grad=True, target=y)
    np.testing.assert_allclose(loss, ((value - y) ** 2).mean(axis=1), rtol=1e-14)
    np.testing.assert_allclose(g, (lanes * 2 * (value - y) / 5).sum(axis=2), rtol=1e-12)


def test_limit_errors_come_from_the_core():
    ev = ndvm.Evaluator(max_memory=1 << 20)
    with pytest.raises(ndvm.LimitError, match="memory limit exceeded") as e:
        ev.evaluate(PROG, params={"a": np.ones(1000), "b": 1.0}, data={"x": np.ones(1000)},
                    grad=True)
    assert e.value.line == 1
    assert "lanes need 8 MiB, more than 1 MiB" in str(e.value)
    # (a small limit is written in the unit it is in: it read "need 0 MiB, more than 0 MiB")
    small = ndvm.Evaluator(max_memory=1000)
    with pytest.raises(ndvm.LimitError, match=r"lanes need 1 KiB, more than 1000 bytes \(raise"):
        small.evaluate(PROG, params={"a": np.ones(8), "b": 1.0}, data={"x": np.ones(16)},
                       grad=True)


def test_import_ndvm_does_not_load_the_cosearch_package():
    code = ("import sys, ndvm; assert 'ndvm.cosearch' not in sys.modules; "
            "assert ndvm.Task is ndvm.cosearch.Task and callable(ndvm.search)")
    # outside the checkout, so that the installed package is imported, not the source tree
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tempfile.gettempdir())


@pytest.mark.parametrize("bad", [10 ** 30, 2 ** 63, 1.5, True, 0, -3, "5"])
def test_limits_are_whole_numbers_the_core_can_hold(bad):
    # (10**30 raised the core's bare OverflowError; 1.5 was taken as 1, True as 1)
    for name in ("max_steps", "max_depth", "max_memory"):
        with pytest.raises(ValueError, match=f"{name} must be a whole number from 1 to "
                           r"2\*\*63 - 1"):
            ndvm.Evaluator(**{name: bad})
    assert ndvm.Evaluator(max_steps=np.int64(5)).limits["max_steps"] == 5


def test_parse_takes_text_and_says_so():
    # (ndvm.parse(None) raised "'NoneType' object has no attribute 'encode'")
    for args in ((None,), ("(+ 1 2)", None), (b"(+ 1 2)",)):
        with pytest.raises(TypeError, match="has incorrect type \\(expected str"):
            ndvm.parse(*args)
