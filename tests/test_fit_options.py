"""FitOptions: one frozen value of ndvm.fit's options, checked once; steps kept under the name of
what it counts; replace() per candidate; the native output layout's named fields."""
import dataclasses
import pickle

import numpy as np
import pytest

import ndvm
from ndvm._core import _core
from ndvm.cosearch.tasks import Task
from ndvm.fit import fit_with
from ndvm.fit_options import FitOptions

X = np.linspace(0.1, 2.0, 12)
Y = 1.5 * np.exp(-0.7 * X)
SRC = "(* a (exp (* b x)))"


@pytest.mark.parametrize("optimizer, field, other", [
    ("adam", "adam_steps", "max_evals"), ("lm", "max_evals", "adam_steps"),
    ("lbfgs", "max_evals", "adam_steps"), (None, "max_evals", "adam_steps"),
])
def test_steps_is_kept_under_the_name_of_what_it_counts(optimizer, field, other):
    o = FitOptions.of(optimizer=optimizer, steps=7)
    assert getattr(o, field) == 7 and getattr(o, other) is None
    assert o.steps == 7 and o.budget(3) == 7


def test_the_default_budget_depends_on_the_optimizer_and_the_parameters():
    assert FitOptions.of(optimizer="adam").budget(3) == 50
    assert FitOptions.of().budget(3) == 400  # 100 (P + 1), MINPACK's
    assert FitOptions.of(loss="value").solver == "lbfgs"
    assert FitOptions.of().solver == "lm" and FitOptions.of().optimizer is None


def test_replace_checks_again_and_maps_steps_for_the_new_optimizer():
    base = FitOptions.of(optimizer="adam", steps=30, lr=0.1)
    lm = base.replace(optimizer="lm", steps=20)
    assert (lm.adam_steps, lm.max_evals, lm.solver, lm.lr) == (30, 20, "lm", 0.1)
    assert base.replace(seed=4).seed == 4 and base.seed == 0  # base unchanged
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        base.replace(optimizer="sgd")
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.lr = 1.0


def test_tolerances_and_uncertainty_resolve_per_optimizer():
    assert FitOptions.of(optimizer="lm").tols == (1e-10, 1e-10, 1e-10)
    assert FitOptions.of(optimizer="adam").tols == (0.0, 0.0, 1e-10)
    assert FitOptions.of(tol=1e-3).tols[1] == 1e-3  # tol: an older name of xtol
    assert FitOptions.of(tol=1e-3, xtol=1e-5).tols[1] == 1e-5
    assert FitOptions.of(optimizer="lm").replace(optimizer="adam").tols == (0.0, 0.0, 1e-10)
    assert FitOptions.of().want_cov and not FitOptions.of(optimizer="adam").want_cov
    assert not FitOptions.of(loss="value", uncertainty=True).want_cov


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(stepz=3), TypeError, r"unknown fit option\(s\) \['stepz'\]"),
    (dict(steps=0), ValueError, r"steps must be at least 1, got 0 \(max_evals"),
    (dict(optimizer="adam", steps=0), ValueError, r"steps must be at least 1, got 0 \(adam_steps"),
    (dict(steps=5, max_evals=6), TypeError, "give steps or max_evals, not both"),
    (dict(loss="value", optimizer="lm"), ValueError, "needs optimizer 'lbfgs' or 'adam'"),
    (dict(starts=0), ValueError, "starts must be at least 1"),
    (dict(lr=0.0), ValueError, "lr must be positive"),
    (dict(gtol=-1.0), ValueError, "must be non-negative"),
    (dict(scaling="qr"), ValueError, "scaling must be one of"),
    (dict(nan_policy="drop"), ValueError, "nan_policy must be"),
    (dict(unused_data="warn"), ValueError, "unused_data must be"),
])
def test_bad_options_raise_clear_errors_when_built(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        FitOptions.of(**kwargs)


def test_fit_with_options_is_ndvm_fit_bit_for_bit():
    kw = dict(starts=3, optimizer="lm", steps=40, seed=2)
    a = ndvm.fit(SRC, data={"x": X}, target=Y, **kw)
    b = fit_with(SRC, FitOptions.of(**kw), {"x": X}, Y)
    assert a.history.shape == (40, 3)
    np.testing.assert_array_equal(a.history, b.history)
    assert a.params == b.params and a.n_evals == b.n_evals


def test_options_pickle_and_per_candidate_options_apply():
    o = FitOptions.of(optimizer="adam", steps=12, init={"a": 1.0}, bounds={"b": (-2.0, 0.0)})
    back = pickle.loads(pickle.dumps(o))
    assert back == o and back.solver == "adam" and back.budget(2) == 12
    fits = ndvm.fit_many([SRC, SRC], data={"x": X}, target=Y, options=o, workers=1,
                         per_candidate=[None, {"steps": 5}])
    assert [f.history.shape[0] for f in fits] == [12, 5]
    assert fits[1].all_params["b"][0] <= 0.0  # the shared bounds hold for both


def test_a_task_with_bad_fit_options_fails_when_made():
    with pytest.raises(ValueError, match="unknown optimizer"):
        Task("t", {"x": X}, Y, np.arange(10, 12), fit={"optimizer": "sgd"})
    task = Task("t", {"x": X}, Y, np.arange(10, 12), fit={"steps": 5, "start_scales": (1.0,)})
    options, scales = task.fit_options({"starts": 2})
    assert (options.adam_steps, options.starts, options.scaling, scales) == (5, 2, "jac", (1.0,))


def test_the_output_layout_pickles_as_named_fields():
    """A FitOutputs table is a structured array named as the C++ FitSlot: its history rows and
    whether it has uncertainties are fields of their own (not packed into one number)."""
    r = ndvm.fit(SRC, data={"x": X}, target=Y, starts=2, optimizer="adam", steps=9)
    table = r._lazy.outputs.__reduce__()[1][2]
    assert table.dtype.names == _core.SLOT_FIELDS
    row = table[r._lazy.k]
    assert (row["history_rows"], row["uncertainty"], row["P"], row["S"]) == (9, 0, 2, 2)
    assert row["n_evals"] == r.n_evals
    back = pickle.loads(pickle.dumps(r._lazy.outputs))
    np.testing.assert_array_equal(back.arrays(r._lazy.k)[2], r.history)
    with pytest.raises(ValueError, match="not a FitOutputs table"):
        _core._fit_outputs(np.zeros(1), np.zeros(1, np.uint8), np.zeros((1, 14), np.int64))


def test_ndvm_fit_checks_the_same_arguments_once():
    """ndvm.fit in a loop builds its FitOptions once per distinct (hashable) arguments; equal
    arguments of another type (seed 0 and numpy's 0) and unhashable ones (an init dict) are not
    mistaken for them."""
    fit_mod = __import__("sys").modules["ndvm.fit"]
    args = dict(zip(fit_mod._FIT_ARGS, [None] * len(fit_mod._FIT_ARGS)))
    args.update(starts=2, lr=0.05, loss="mse", seed=0, client="dmci", dtype="float64",
                positive=(), nan_policy="raise", unused_data="typo", scaling="both", steps=9)
    a = tuple(args.values())
    assert fit_mod._options(a) is fit_mod._options(a)
    as_numpy = tuple(dict(args, seed=__import__("numpy").int64(0)).values())
    assert fit_mod._options(as_numpy) is not fit_mod._options(a)
    with_init = tuple(dict(args, init={"a": 1.0}).values())
    assert fit_mod._options(with_init) is not fit_mod._options(with_init)
    assert fit_mod._options(with_init).init == {"a": 1.0} and fit_mod._options(a).max_evals == 9
