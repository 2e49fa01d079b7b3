"""ndvm.fit: native multi-start calibration with Adam, L-BFGS and Levenberg-Marquardt."""
import warnings

import numpy as np
import pytest

import ndvm
from conftest import CLIENTS, shared_json_or_empty

SUITE = shared_json_or_empty("calibration_suite.json", "programs")
DAMPED = "(* a (* (exp (- 0 (* b x))) (cos (* c x))))"


def _damped_data():
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    return x, y


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("optimizer, steps", [("lm", 50), ("lbfgs", 200), ("adam", 3000)])
def test_recovers_known_parameters(optimizer, steps, client):
    x, y = _damped_data()
    res = ndvm.fit(DAMPED, data={"x": x}, target=y, init={"a": 0.8, "b": 0.2, "c": 1.9},
                   optimizer=optimizer, steps=steps, lr=0.01, client=client)
    assert res.params["a"] == pytest.approx(1.0, abs=1e-3)
    assert res.params["b"] == pytest.approx(0.3, abs=1e-3)
    assert res.params["c"] == pytest.approx(2.0, abs=1e-3)
    assert res.loss < 1e-6
    assert res.history.shape == (steps, 1)
    assert res.n_evals >= 2


@pytest.mark.parametrize("model", SUITE, ids=[m["id"] for m in SUITE])
@pytest.mark.parametrize("optimizer", ["lm", "adam"])
def test_calibration_suite_recovers_true_parameters(model, optimizer):
    """Every model of the calibration suite, from its `init`, with LM (tight) and Adam (looser)."""
    rng = np.random.default_rng(0)
    inputs = {k: rng.uniform(lo, hi, model["n"]) for k, (lo, hi) in model["inputs"].items()}
    truth = ndvm.Evaluator().evaluate(model["src"], params=model["params"], data=inputs)
    y = truth.value[0]
    if optimizer == "lm":
        res = ndvm.fit(model["src"], data=inputs, target=y, init=model["init"], optimizer="lm",
                       steps=200)
        tol = 1e-4
    else:
        res = ndvm.fit(model["src"], data=inputs, target=y, init=model["init"], optimizer="adam",
                       steps=20000, lr=0.01)
        tol = 1e-3
        if model["id"] == "M12_newton_sqrt":
            # five Newton steps converge to sqrt(x) from almost any start: `a` barely moves the
            # output, so Adam's steps vanish with the gradient; it still fits the data
            assert res.loss < 1e-6
            return
    for name, want in model["params"].items():
        assert res.params[name] == pytest.approx(want, rel=tol, abs=tol), (name, res)


def test_multi_start_runs_starts_as_lanes_and_picks_the_best():
    x, y = _damped_data()
    res = ndvm.fit(DAMPED, data={"x": x}, target=y, starts=16, optimizer="lm", steps=100, seed=3)
    assert res.all_losses.shape == (16,)
    assert res.all_params["a"].shape == (16,)
    assert res.loss == np.nanmin(res.all_losses)
    assert res.loss < 1e-8  # at least one of 16 random starts finds the optimum
    best = res.best_start
    assert res.params["c"] == res.all_params["c"][best]


def test_seeded_starts_are_deterministic():
    x, y = _damped_data()
    r1 = ndvm.fit(DAMPED, data={"x": x}, target=y, starts=4, steps=20, optimizer="adam", seed=5)
    r2 = ndvm.fit(DAMPED, data={"x": x}, target=y, starts=4, steps=20, optimizer="adam", seed=5)
    np.testing.assert_array_equal(r1.history, r2.history)
    r3 = ndvm.fit(DAMPED, data={"x": x}, target=y, starts=4, steps=20, optimizer="adam", seed=6)
    assert not np.array_equal(r1.history, r3.history)


def test_adam_matches_the_update_rule_of_torch_adam():
    """The native Adam trajectory equals torch.optim.Adam's on the same loss and gradient."""
    torch = pytest.importorskip("torch")
    x, y = _damped_data()
    steps, lr = 25, 0.05
    res = ndvm.fit(DAMPED, data={"x": x}, target=y, init={"a": 0.5, "b": 0.1, "c": 1.5},
                   optimizer="adam", steps=steps, lr=lr)
    p = torch.tensor([0.5, 0.1, 1.5], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([p], lr=lr)
    xt = torch.tensor(x)
    yt = torch.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        f = p[0] * torch.exp(-p[1] * xt) * torch.cos(p[2] * xt)
        loss = ((f - yt) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    np.testing.assert_allclose(res.history[:, 0], losses, rtol=1e-10)


def test_zero_factor_in_data():
    """A model with an exactly-zero factor in the data fits, and its gradient has no nan."""
    x = np.array([0.0, 0.0, 1.0, 2.0, 3.0])
    y = 2.0 * x * np.log(1.0 + x)
    res = ndvm.fit("(* k x (log (+ 1 x)))", data={"x": x}, target=y, init={"k": 1.0},
                   optimizer="lm", steps=50)
    assert res.params["k"] == pytest.approx(2.0, rel=1e-9)
    assert np.all(np.isfinite(res.history[np.isfinite(res.history)]))


def test_diverging_start_is_retired_without_poisoning_the_others():
    x = np.linspace(0.5, 2.0, 10)
    y = np.sqrt(x) * 2.0
    # the start at k=-5 makes sqrt of a negative number: nan, retired
    res = ndvm.fit("(sqrt (* k x))", data={"x": x}, target=y, starts=2,
                   init={"k": [-5.0, 1.0]}, optimizer="lm", steps=50)
    assert np.isnan(res.history[0, 0]) and np.isinf(res.all_losses[0])
    assert res.params["k"] == pytest.approx(4.0, rel=1e-8)
    assert res.best_start == 1


@pytest.mark.parametrize("scaling", ["jac", "none", "both"])
def test_lm_trust_region_grows_after_successful_steps(scaling):
    """A linear fit from a start a million times too small: MINPACK's radius starts at 100
    ||D x0|| and doubles after each step whose ratio is near 1, so 16 evaluations reach the
    answer (a radius that shrank after good steps would never get there)."""
    x = np.linspace(0.5, 2.0, 10)
    res = ndvm.fit("(* a x)", data={"x": x}, target=1000.0 * x, init={"a": 1e-3},
                   optimizer="lm", steps=40, scaling=scaling)
    assert res.params["a"] == pytest.approx(1000.0, rel=1e-12)
    assert res.n_evals <= 20 and res.success


def test_bounds_are_respected():
    x = np.linspace(0, 1, 20)
    res = ndvm.fit("(* a x)", data={"x": x}, target=3.0 * x, bounds={"a": (0.0, 2.0)},
                   optimizer="adam", steps=300, lr=0.1, starts=3)
    assert np.all(res.all_params["a"] <= 2.0) and np.all(res.all_params["a"] >= 0.0)
    assert res.params["a"] == pytest.approx(2.0)


@pytest.mark.parametrize("kwargs, exc, match", [
    (dict(data={"y": np.ones(5)}, params=["a"]), ndvm.UnboundError, "x"),
    (dict(data={"x": np.ones(4)}), ValueError, "points"),
    (dict(data={"x": np.ones(5)}, optimizer="sgd"), ValueError, "unknown optimizer"),
    (dict(data={"x": np.ones(5)}, params=["zz"]), ValueError, "do not occur"),
    (dict(data={"x": np.ones(5)}, steps=0), ValueError, "steps"),
    (dict(data={"x": np.ones(5)}, loss="mae"), ValueError, "loss"),
    (dict(data={"x": np.ones(5)}, init={"a": [1.0, 2.0]}), ValueError, "init"),
    (dict(data={"x": np.ones(5)}, bounds={"a": (2.0, 1.0)}), ValueError, "low <= high"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        ndvm.fit("(* a x)", target=np.ones(5), **kwargs)


def _fit_digest(r):
    return (repr(r.all_params), repr(r.all_losses), repr(r.history), repr(r.status),
            repr(r.all_covariance), repr(r.all_stderr), r.n_evals)


@pytest.mark.parametrize("options", [
    {"optimizer": "adam", "steps": 40, "lr": 0.05},
    {"optimizer": "lbfgs", "steps": 30},
    {"optimizer": "lbfgs", "steps": 30, "bounds": {"b": (-0.5, 0.5)}},
    {"optimizer": "lm", "steps": 30},                       # scaling "both": two lanes a start
    {"optimizer": "lm", "steps": 30, "scaling": "jac", "uncertainty": False},
    {"optimizer": "lm", "steps": 30, "scaling": "none", "positive": ["a"]},
])
def test_a_fit_gives_the_same_numbers_after_a_bigger_fit_on_its_thread(options):
    """The optimizers keep their buffers per thread between fits (no allocation in the steady
    state): a fit run after a larger one (more points, parameters and starts) on the same
    thread gives exactly what it gives on a fresh thread."""
    import threading
    rng = np.random.default_rng(5)
    x = np.linspace(0, 2, 30)
    small = dict(data={"x": x}, target=1.3 * np.exp(-0.4 * x) + 0.2, starts=3, seed=1,
                 **options)
    xb = rng.uniform(0, 2, 400)
    big = dict(data={"x": xb}, target=np.sin(xb) + 0.5 * xb, starts=9, seed=2,
               **{k: v for k, v in options.items() if k not in ("bounds", "positive")})
    out = {}

    def on_a_fresh_thread(key, *fits):
        def run():
            for prog, kw in fits:
                out[key] = ndvm.fit(prog, **kw)
        t = threading.Thread(target=run)
        t.start()
        t.join()

    model = "(+ (* a (exp (* b x))) c)"
    on_a_fresh_thread("fresh", (model, small))
    on_a_fresh_thread("after", ("(+ (* a (sin (* b x))) (* c x) d (* e x x))", big),
                      (model, small))
    assert _fit_digest(out["after"]) == _fit_digest(out["fresh"])


@pytest.mark.parametrize("scale", [1e11, 1e13, 1e15, 1e17, 1e20, 1e30])
@pytest.mark.parametrize("scaling", ["both", "none"])
def test_lm_reaches_a_large_parameter_from_a_start_near_zero(scale, scaling):
    # (MINPACK's ftol test met at the first step, which the trust region cut short: its relative
    # reduction, 3.8 / 2e11 of the loss, is below ftol though the linear model predicted it
    # exactly; the fit stopped, "no further progress possible", a = 3.8. From 1e17 on, the
    # first steps change the residuals' norm by less than its rounding, and the region shrank
    # after each: "no further progress possible" at a = 0.04 after 2 evaluations)
    x = np.linspace(1.0, 3.0, 100)
    r = ndvm.fit("(* a x)", data={"x": x}, target=2.0 * scale * x, seed=0, scaling=scaling)
    assert r.converged[r.best_start] and r.params["a"] == pytest.approx(2.0 * scale, rel=1e-9)


@pytest.mark.parametrize("optimizer", ["lm", "lbfgs"])
@pytest.mark.parametrize("scaling", ["both", "jac", "none"])
def test_a_fit_whose_loss_overflows_everywhere_it_went_is_non_finite_not_converged(optimizer,
                                                                                   scaling):
    # (finite residuals near 1e160, or of exp(50 t) at t = 10, whose squares overflow: LM's
    # norms do not overflow, it took its frozen steps for "xtol met", converged, loss inf)
    t = np.linspace(0.0, 10.0, 60)
    y = 5.0 * np.exp(-0.7 * t)
    r = ndvm.fit("(* A (exp (- 0 (* k t))))", data={"t": t}, target=y,
                 init={"A": 1e6, "k": -50.0}, optimizer=optimizer, scaling=scaling)
    assert not np.isfinite(r.loss) and not r.converged.any() and not r.success
    assert (r.status == -2).all() and "non-finite" in r.message
    x = np.linspace(1.0, 10.0, 50)
    r = ndvm.fit("(* a x)", data={"x": x}, target=np.full(50, 1e160), init={"a": 0.0},
                 optimizer=optimizer, scaling=scaling)
    assert not r.converged.any() and (r.status == -2).all()


@pytest.mark.parametrize("scale", [1e6, 1e11, 1e15, 1e17, 1e20, 1e30])
def test_lbfgs_reaches_a_large_parameter_and_never_claims_convergence_short_of_it(scale):
    # (its gradient test is relative to the loss: from a start near 1 for a = 2e15 the loss is
    # ~1e31 and its gradient ~1e16, below gtol = 1e-10 of it, and L-BFGS said "gtol met" at
    # a = 0.038 after 2 evaluations. It now also asks its quasi-Newton model, which predicts
    # nearly the whole loss away. From 1e17 on, the first steepest-descent trials, a change of
    # 1 in a, change the loss by less than its rounding: the line search took the tie for a
    # bracket and L-BFGS said "ftol met" at the start, after 4 evaluations)
    x = np.linspace(1.0, 2.0, 30)
    r = ndvm.fit("(* a x)", data={"x": x}, target=2.0 * scale * x, optimizer="lbfgs", seed=0)
    assert r.converged[r.best_start] and r.params["a"] == pytest.approx(2.0 * scale, rel=1e-9)
    for s in range(len(r.converged)):  # (and no start that stopped elsewhere says it converged)
        assert not r.converged[s] or r.all_losses[s] <= 1e-12 * (2.0 * scale) ** 2, r.message


def test_a_data_input_of_one_point_against_many_is_refused_and_a_number_is_every_points():
    # (an array of one value was broadcast to every point: x[:1] for x fitted a = -0.18, with
    # standard errors and "gtol met", where a = 2; a number is still every point's value)
    x = np.linspace(1.0, 5.0, 50)
    z = np.linspace(1.0, 2.0, 50) ** 2
    with pytest.raises(ValueError, match=r"'x' has 1 point but target has 50 \(a value shared"):
        ndvm.fit("(+ (* a x) (* b z))", data={"x": x[:1], "z": z}, target=2 * x + z)
    with pytest.raises(ValueError, match="'x' has 1 point"):
        ndvm.fit_many(["(+ (* a x) (* b z))"], data={"x": [1.0], "z": z}, target=2 * x + z,
                      workers=1)
    r = ndvm.fit("(+ (* a x) (* b z))", data={"x": 3.0, "z": z}, target=6.0 + 2.0 * z)
    assert r.params["a"] == pytest.approx(2.0) and r.params["b"] == pytest.approx(2.0)


def test_a_dataframe_is_data_and_pandas_rows_out_of_order_are_refused():
    pd = pytest.importorskip("pandas")
    x = np.linspace(1.0, 5.0, 50)
    df = pd.DataFrame({"x": x, "y": 2.0 * x})
    # (a DataFrame raised pandas' "truth value of a DataFrame is ambiguous")
    assert ndvm.fit("(* a x)", data=df[["x"]], target=df.y).params["a"] == pytest.approx(2.0)
    # (a shuffled Series was fitted by position: loss 11.6 instead of 0)
    shuffled = df.y.sample(frac=1, random_state=0)
    with pytest.raises(ValueError, match="the target and data input 'x' have different indexes"):
        ndvm.fit("(* a x)", data=df[["x"]], target=shuffled)
    with pytest.raises(ValueError, match="different indexes"):
        ndvm.fit("(* a x z)", data={"x": df.x, "z": shuffled}, target=df.y.to_numpy())
    r = ndvm.fit("(* a x)", data=df[["x"]], target=shuffled.loc[df.index])
    assert r.params["a"] == pytest.approx(2.0)


@pytest.mark.parametrize("optimizer", ["lm", "lbfgs", "adam"])
def test_a_parameter_that_ends_at_a_bound_is_named_in_the_message(optimizer):
    # (LM said only "gtol met: the cosine between the residuals and every Jacobian column is
    # below it" where k's column, held at its bound, has a cosine of 0.73)
    t = np.linspace(0.0, 10.0, 60)
    y = 5.0 * np.exp(-0.7 * t) + 0.02 * np.random.default_rng(0).standard_normal(60)
    src = "(* A (exp (- 0 (* k t))))"
    r = ndvm.fit(src, data={"t": t}, target=y, bounds={"k": (0.8, 2.0)}, optimizer=optimizer)
    assert r.params["k"] == 0.8 and "k ended at a bound" in r.message and "A ended" not in r.message
    r = ndvm.fit(src, data={"t": t}, target=y, bounds={"k": (0.1, 2.0)}, optimizer=optimizer,
                 init={"A": 5.0, "k": 0.5})
    assert "bound" not in r.message


def test_a_non_finite_start_is_refused_without_advice_about_data_points():
    t = np.linspace(0.0, 1.0, 10)
    with pytest.raises(ValueError, match=r"init\['k'\] has a non-finite value \(nan\).*a start "
                                         r"is a finite number"):
        ndvm.fit("(* A (exp (* k t)))", data={"t": t}, target=t, init={"k": float("nan")},
                 nan_policy="omit")


@pytest.mark.parametrize("optimizer", ["lm", "lbfgs", "adam"])
@pytest.mark.parametrize("n", [200, 203])
def test_each_start_of_a_fit_is_that_start_fitted_alone(optimizer, n):
    # (a batched evaluation takes only the starts still running, packed as its first lanes: a
    # start's path must not depend on which of the others have stopped; here they stop after
    # 7 to 21 evaluations)
    rng = np.random.default_rng(0)
    x = np.linspace(0.1, 3.0, n)
    y = 2.0 * np.exp(-0.7 * x) * np.cos(3 * x) + 0.01 * rng.standard_normal(n)
    src = "(* a (exp (* b x)) (cos (* c x)))"
    S = 12
    init = {"a": rng.normal(1, 1, S), "b": rng.normal(-0.5, 0.5, S), "c": rng.normal(3, 0.8, S)}
    r = ndvm.fit(src, data={"x": x}, target=y, starts=S, init=init, optimizer=optimizer)
    evals = set()
    for s in range(S):
        one = ndvm.fit(src, data={"x": x}, target=y, init={k: v[s] for k, v in init.items()},
                       optimizer=optimizer)
        evals.add(one.n_evals)
        assert one.status[0] == r.status[s]
        for k in init:
            assert one.all_params[k][0] == pytest.approx(r.all_params[k][s], rel=1e-12, abs=1e-14)
        assert one.all_losses[0] == pytest.approx(r.all_losses[s], rel=1e-12, abs=1e-300)
        if optimizer != "adam":
            assert one.all_stderr[0] == pytest.approx(r.all_stderr[s], rel=1e-9)
    assert len(evals) > 1 or optimizer == "adam"  # (the starts stopped at different times)


def test_a_numbered_name_left_out_of_the_data_is_fitted_as_a_parameter_with_a_warning():
    # (x3 with data x1, x2 was fitted as a constant without a word)
    x1 = np.linspace(1.0, 2.0, 30)
    x2 = x1 ** 2
    with pytest.warns(UserWarning, match=r"'x3' is fitted as a parameter: the data has x1, x2 "
                                         r"but no x3"):
        r = ndvm.fit("(+ (* a x1) (* b x2) x3)", data={"x1": x1, "x2": x2}, target=x1 + x2)
    assert set(r.params) == {"a", "b", "x3"}
    with warnings.catch_warnings():  # (parameters named like inputs of another stem, or named)
        warnings.simplefilter("error")
        ndvm.fit("(+ (* b1 x1) (* b2 x2))", data={"x1": x1, "x2": x2}, target=x1 + x2)
        ndvm.fit("(+ (* a x1) x3)", data={"x1": x1}, target=x1, params=["a", "x3"])
