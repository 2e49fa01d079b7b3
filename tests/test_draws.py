"""The proposer's C-speed draws (ndvm._core Draws) are numpy's own, draw for draw."""
import pickle

import numpy as np
import pytest

from ndvm._core._core import Draws


def _step(gen, kind, arg):
    if kind == "random":
        return gen.random()
    if kind == "below":
        return int(gen.integers(arg))
    if kind == "range":
        return int(gen.integers(*arg))
    if kind == "uniform":
        return gen.uniform(-3, 3)
    if kind == "gauss":
        return gen.normal(0.25, 0.5)
    return gen.standard_normal()


@pytest.mark.parametrize("seed", range(4))
def test_draws_follow_numpys_stream_in_any_interleaving(seed):
    # spans of every size (1 draws nothing; near 2**32 rejects often, 2**32 and above are numpy's
    # other branches), mixed with uniforms and normals (numpy's own C functions in Draws) that
    # share the bit generator
    plan_rng = np.random.default_rng(1000 + seed)
    spans = [1, 2, 3, 5, 17, 64, 65, 1000, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**40]
    plan = []
    for _ in range(3000):
        kind = ("random", "below", "range", "uniform", "normal",
                "gauss")[int(plan_rng.integers(6))]
        if kind == "below":
            arg = spans[int(plan_rng.integers(len(spans)))]
        elif kind == "range":
            lo = int(plan_rng.integers(-5, 5))
            arg = (lo, lo + spans[int(plan_rng.integers(len(spans)))])
        else:
            arg = None
        plan.append((kind, arg))
    numpy_gen = np.random.default_rng(seed)
    draws = Draws(np.random.default_rng(seed))
    got = [_step(draws, k, a) for k, a in plan]
    assert got == [_step(numpy_gen, k, a) for k, a in plan]
    assert draws.rng.bit_generator.state == numpy_gen.bit_generator.state


def test_draws_normal_refuses_a_negative_scale_as_numpy_does():
    draws = Draws(np.random.default_rng(0))
    with pytest.raises(ValueError, match="scale"):
        draws.normal(0.0, -1.0)
    assert np.isnan(draws.normal(0.0, float("nan"))) == np.isnan(
        np.random.default_rng(0).normal(0.0, float("nan")))


def test_draws_give_python_ints_in_range_and_refuse_empty_ranges():
    draws = Draws(np.random.default_rng(0))
    xs = [draws.integers(3, 7) for _ in range(200)]
    assert all(type(x) is int for x in xs) and set(xs) == {3, 4, 5, 6}
    assert draws.integers(1) == 0
    with pytest.raises(ValueError, match="low >= high"):
        draws.integers(0)
    with pytest.raises(ValueError, match="low >= high"):
        draws.integers(5, 5)


def test_draws_pickle_with_their_generator_and_continue_its_stream():
    draws = Draws(np.random.default_rng(7))
    for _ in range(5):
        draws.integers(10)
    copy = pickle.loads(pickle.dumps(draws))
    assert [copy.integers(100) for _ in range(50)] == [draws.integers(100) for _ in range(50)]
    # a proposer that holds both pickles one Generator: the two stay one stream
    a, b = pickle.loads(pickle.dumps((draws, draws.rng)))
    a.integers(5)
    assert a.rng is b
