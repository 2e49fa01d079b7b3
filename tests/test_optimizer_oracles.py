"""The optimizers' outputs against oracles outside ndvm: standard errors against the ordinary
least-squares closed form and scipy.optimize.curve_fit, and a parameter optimized as its
logarithm (`positive=`) against torch.optim.Adam run on the logarithm. Each test kills a planted
bug of tests/mutation/mutants.py that the other fit tests let through (named in its docstring)."""
import numpy as np
import pytest

import ndvm
from conftest import CLIENTS

LINE = "(+ a (* b x))"
DECAY = "(* a (exp (- 0 (* b x))))"


def _line_data():
    rng = np.random.default_rng(23)
    x = np.linspace(-2.0, 5.0, 30)
    y = 0.7 - 1.9 * x + rng.normal(0, 0.3, x.size)
    return x, y


def _ols(x, y):
    """Least-squares coefficients, covariance s^2 (X^T X)^-1 with s^2 = rss / (N - P)."""
    X = np.stack([np.ones_like(x), x], 1)
    coef = np.linalg.solve(X.T @ X, X.T @ y)
    rss = np.sum((X @ coef - y) ** 2)
    cov = rss / (x.size - 2) * np.linalg.inv(X.T @ X)
    return coef, cov


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("optimizer, steps", [("lm", 20), ("lbfgs", 60)])
def test_standard_errors_of_a_linear_model_are_the_ols_closed_form(optimizer, steps, client):
    """The covariance of a model linear in its parameters is s^2 (X^T X)^-1 with s^2 the residual
    sum of squares over N - P (kills fit-cov-dof: dividing by N makes every standard error
    sqrt(N / (N - P)) = 1.035 times too small here)."""
    x, y = _line_data()
    coef, cov = _ols(x, y)
    res = ndvm.fit(LINE, data={"x": x}, target=y, init={"a": 5.0, "b": 3.0},
                   optimizer=optimizer, steps=steps, client=client, uncertainty=True)
    assert res.params["a"] == pytest.approx(coef[0], abs=1e-7)
    # the Jacobian of a linear model is exact wherever the fit stopped; the residual sum of
    # squares is flat at the optimum, so a 1e-7 error in the parameters moves it by ~1e-14
    np.testing.assert_allclose(res.covariance, cov, rtol=1e-9)
    assert res.stderr["a"] == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-9)
    assert res.stderr["b"] == pytest.approx(np.sqrt(cov[1, 1]), rel=1e-9)


def test_a_search_selections_standard_errors_on_many_points_are_the_ols_closed_form():
    """The standard errors a search reports for its chosen model (select.standard_errors) on
    300,000 points: s^2 (X^T X)^-1 of the line. Its SVD of the Jacobian made the N x N matrix
    U as well (a MemoryError here; 450 MB and seconds on a 7,500-point Feynman set)."""
    from ndvm.cosearch.select import standard_errors
    from ndvm.evaluator import Evaluator

    rng = np.random.default_rng(4)
    x = np.linspace(-2.0, 5.0, 300_000)
    y = 0.7 - 1.9 * x + rng.normal(0, 0.3, x.size)
    coef, cov = _ols(x, y)
    se = standard_errors(LINE, {"a": coef[0], "b": coef[1]}, {"x": x}, y, Evaluator())
    assert se["a"] == pytest.approx(np.sqrt(cov[0, 0]), rel=1e-7)
    assert se["b"] == pytest.approx(np.sqrt(cov[1, 1]), rel=1e-7)


def _noisy_decay_and_curve_fit():
    """(x, y, popt, pcov): 2 exp(-0.8 x) plus noise, and scipy's tightly converged curve_fit."""
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(5)
    x = np.linspace(0.0, 4.0, 25)
    y = 2.0 * np.exp(-0.8 * x) + rng.normal(0, 0.05, x.size)
    popt, pcov = optimize.curve_fit(lambda t, a, b: a * np.exp(-b * t), x, y, p0=[1.0, 1.0],
                                    xtol=1e-14, ftol=1e-14, gtol=1e-14)
    return x, y, popt, pcov


def test_standard_errors_of_a_nonlinear_model_match_scipy_curve_fit():
    """Levenberg-Marquardt's covariance on a nonlinear model equals scipy's pcov (also
    s^2 (J^T J)^-1 at the optimum, from its own MINPACK fit and its own Jacobian)."""
    x, y, popt, pcov = _noisy_decay_and_curve_fit()
    res = ndvm.fit(DECAY, data={"x": x}, target=y, init={"a": 1.0, "b": 1.0}, optimizer="lm",
                   steps=100)
    assert [res.params["a"], res.params["b"]] == pytest.approx(popt, rel=1e-8)
    # scipy's Jacobian is a forward difference (relative error ~1e-8): pcov agrees to ~1e-6
    np.testing.assert_allclose(res.covariance, pcov, rtol=1e-5)
    assert res.stderr["b"] == pytest.approx(np.sqrt(pcov[1, 1]), rel=1e-5)


def test_adam_on_a_positive_parameter_is_torch_adam_on_its_logarithm():
    """positive=["b"] optimizes u = log b: the trajectory equals torch.optim.Adam's on u, whose
    gradient is b d loss / d b (kills fit-positive-chain: Adam is blind to a constant factor
    on a coordinate's gradient, so the first step is the same without the factor b, but b
    changes as it moves and the trajectories part from the second step on)."""
    torch = pytest.importorskip("torch")
    x = np.linspace(0.0, 4.0, 25)
    y = 2.0 * np.exp(-0.8 * x)
    steps, lr = 30, 0.05
    res = ndvm.fit(DECAY, data={"x": x}, target=y, init={"a": 1.5, "b": 0.3},
                   positive=["b"], optimizer="adam", steps=steps, lr=lr)
    a = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    u = torch.tensor(np.log(0.3), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([a, u], lr=lr)
    xt, yt = torch.tensor(x), torch.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((a * torch.exp(-torch.exp(u) * xt) - yt) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    np.testing.assert_allclose(res.history[:, 0], losses, rtol=1e-10)


@pytest.mark.parametrize("optimizer, steps", [("lm", 40), ("lbfgs", 100)])
def test_a_positive_parameter_reaches_the_unconstrained_optimum(optimizer, steps):
    """When the optimum is inside (0, inf), optimizing log b changes the path, not the optimum:
    scipy.optimize.curve_fit's (unconstrained) solution."""
    x, y, popt, _ = _noisy_decay_and_curve_fit()
    res = ndvm.fit(DECAY, data={"x": x}, target=y, init={"a": 1.0, "b": 0.1}, positive=["b"],
                   optimizer=optimizer, steps=steps)
    assert [res.params["a"], res.params["b"]] == pytest.approx(popt, rel=1e-6)


@pytest.mark.parametrize("optimizer", ["lm", "lbfgs"])
def test_lm_and_lbfgs_never_accept_a_point_worse_than_the_current_one(optimizer):
    """A trust-region method accepts a step only when the loss actually decreased (ratio test),
    a line search only a step meeting the sufficient-decrease condition: from starts far from the
    optimum of an oscillating model (where many trial steps overshoot), the recorded loss of
    every start never increases (kills fit-lm-accept-any, which accepts any trial)."""
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    res = ndvm.fit("(* a (* (exp (- 0 (* b x))) (cos (* c x))))", data={"x": x}, target=y,
                   starts=12, seed=4, optimizer=optimizer, steps=60)
    h = res.history
    for s in range(h.shape[1]):
        col = h[np.isfinite(h[:, s]), s]
        assert col.size >= 2
        # (LM records its first loss as the mean of squares, later ones as ||r||^2 / N from
        # a scaled norm: the same number up to rounding, hence the 1e-12 relative slack)
        assert np.all(np.diff(col) <= 1e-12 * col[:-1]), (s, col)


@pytest.mark.parametrize("optimizer, steps", [("lbfgs", 60), ("lm", 30)])
def test_a_parameter_held_at_its_bound_lets_the_others_reach_their_optimum(optimizer, steps):
    """(+ a (* b x)) with a in [0, 5] where the unconstrained optimum has a < 0: the solution is
    a = 0 (an active bound) and b the least-squares slope through the origin, sum x y / sum x^2.
    Started on the bound, the optimizer must hold a there and keep optimizing b (kills
    fit-lbfgs-held: the line search's largest step becomes 0 along a direction that pushes a out
    of the box, and the fit stops where it started)."""
    rng = np.random.default_rng(8)
    x = np.linspace(0.5, 3.0, 30)
    y = -1.0 + 2.0 * x + rng.normal(0, 0.1, x.size)
    b = np.sum(x * y) / np.sum(x * x)
    # the KKT condition that makes a = 0 the constrained optimum: d loss / d a > 0 there
    assert np.mean(2 * (b * x - y)) > 0
    res = ndvm.fit(LINE, data={"x": x}, target=y, init={"a": 0.0, "b": 0.0},
                   bounds={"a": (0.0, 5.0)}, optimizer=optimizer, steps=steps)
    assert res.params["a"] == 0.0
    assert res.params["b"] == pytest.approx(b, rel=1e-8)
    assert res.loss == pytest.approx(np.mean((b * x - y) ** 2), rel=1e-12)


@pytest.mark.parametrize("model, f, df, start", [
    ("(* a x)", lambda a, x: a * x, lambda a, x: x, -100.0),                 # optimum 103 away
    ("(exp (* a x))", lambda a, x: np.exp(a * x), lambda a, x: x * np.exp(a * x), -3.0),
], ids=["linear", "exp"])
def test_every_lbfgs_step_meets_the_strong_wolfe_conditions(model, f, df, start):
    """A one-parameter L-BFGS run, read after each evaluation budget 2, 3, ...: every accepted
    step s from a to a' meets sufficient decrease, loss(a') <= loss(a) + 1e-4 g(a) s, and the
    strong curvature condition |g(a')| <= 0.9 |g(a)|, with the loss and its gradient g computed
    here in numpy (kills fit-wolfe-curvature: without the absolute value the search accepts
    the first trial of a unit step that is still descending almost as steeply as at a)."""
    x = np.linspace(0.1, 1.0, 15)
    y = f(0.4, x) if model.startswith("(exp") else 3.0 * x

    def loss(a):
        return np.mean((f(a, x) - y) ** 2)

    def grad(a):
        return np.mean(2.0 * (f(a, x) - y) * df(a, x))

    points = [start]
    for k in range(2, 40):
        res = ndvm.fit(model, data={"x": x}, target=y, init={"a": start}, optimizer="lbfgs",
                       steps=k, gtol=1e-12)
        a = res.params["a"]
        if a != points[-1]:
            points.append(a)
        if res.status[0] > 0:
            break
    assert len(points) >= 2
    for a0, a1 in zip(points, points[1:]):
        s = a1 - a0
        assert loss(a1) <= loss(a0) + 1e-4 * grad(a0) * s, (a0, a1)
        assert abs(grad(a1)) <= 0.9 * abs(grad(a0)) + 1e-12, (a0, a1)


@pytest.mark.parametrize("start", [0.08, 0.3])
def test_lbfgs_zooms_inside_the_first_bracket_when_sufficient_decrease_fails(start):
    """loss(a) = sin(pi a)^2 has period 1 and a minimum at every integer. L-BFGS's first trial
    is a unit step to start - 1, where the loss equals loss(start): sufficient decrease fails, so
    the search zooms inside [start - 1, start], whose only minimum is 0 (kills fit-wolfe-armijo:
    a sign error that lets the test pass for any f <= f0 + 1e-4 a |phi'(0)| accepts that equal
    loss, keeps extrapolating, and lands on another period's minimum, -1 or -7)."""
    x = np.full(4, np.pi)
    res = ndvm.fit("(sin (* a x))", data={"x": x}, target=np.zeros(4), init={"a": start},
                   optimizer="lbfgs", steps=60)
    assert res.status[0] > 0
    assert abs(res.params["a"]) < 1e-6
    assert res.loss < 1e-20


def test_lbfgs_is_invariant_to_a_scaling_of_the_loss():
    """Model and target times 4 multiply the loss by 16 and its gradient by 16, exactly in
    floating point. L-BFGS's iterates do not change: the first trial step 1 / |g| (for |g| > 1)
    and the quasi-Newton direction H g with the initial Hessian gamma I, gamma = s^T y / y^T y,
    are invariant, and so are the Wolfe tests. With the tolerances that depend on the loss's
    scale off (gtol = ftol = 0), every recorded loss is 16 times the other run's (kills
    fit-lbfgs-gamma: gamma = y^T y / s^T y scales the step by 256 instead)."""
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    model = "(* a (* (exp (- 0 (* b x))) (cos (* c x))))"
    runs = []
    for k in (8, 32):  # (8 rather than 1, so that |g| > 1 at the start of both)
        res = ndvm.fit(f"(* {k} {model})", data={"x": x}, target=k * y,
                       init={"a": 0.5, "b": 0.1, "c": 1.5}, optimizer="lbfgs", steps=25,
                       gtol=0.0, ftol=0.0)
        runs.append(res.history[:, 0] / k ** 2)
    assert runs[0][-1] < 1e-20  # converged within the budget
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-12)


@pytest.mark.parametrize("client", CLIENTS)
def test_lbfgs_forgets_a_step_of_negative_curvature(client):
    """loss = sin(0.77 a) - c^2 + exp(2.78 a) + 0.01 (a^2 + b^2 + c^2) on the box [-1.5, 1.5]^3:
    c sits on a concave piece, so the line search that runs c to its bound (the third
    evaluation to the fifth) ends at its largest step, where the change of gradient has s^T y < 0. A quasi-Newton pair of negative
    curvature would make the inverse-Hessian estimate indefinite; L-BFGS must drop it. The
    constrained minimum from this start is a = c = -1.5 (both bounds active: d loss/da > 0 and
    d loss/dc > 0 there) and b = 0, checked here by hand and against scipy's L-BFGS-B (kills
    fit-lbfgs-curvature-pair: keeping the pair shrinks the next steps in b until the relative
    reduction of the loss falls below ftol at b = 0.076, and the fit says converged there)."""
    import scipy.optimize

    def loss(v):
        a, b, c = v
        return np.sin(0.77 * a) - c * c + np.exp(2.78 * a) + 0.01 * (a * a + b * b + c * c)

    edge = np.array([-1.5, 0.0, -1.5])
    assert 0.77 * np.cos(0.77 * -1.5) + 2.78 * np.exp(2.78 * -1.5) + 0.02 * -1.5 > 0  # KKT in a
    assert -2 * -1.5 + 0.02 * -1.5 > 0                                                  # KKT in c
    init = {"a": -0.47, "b": 0.08, "c": -0.11}
    ref = scipy.optimize.minimize(loss, list(init.values()), method="L-BFGS-B",
                                  bounds=[(-1.5, 1.5)] * 3)
    res = ndvm.fit("(+ (sin (* 0.77 a)) (- 0 (* c c)) (exp (* 2.78 a))"
                   " (* 0.01 (+ (square a) (square b) (square c))))", loss="value",
                   optimizer="lbfgs", init=init, bounds={n: (-1.5, 1.5) for n in "abc"},
                   client=client)
    assert res.converged
    assert (res.params["a"], res.params["c"]) == (-1.5, -1.5)
    assert abs(res.params["b"]) < 1e-8
    assert res.loss == pytest.approx(loss(edge), rel=1e-14)
    assert res.loss <= ref.fun + 1e-14
