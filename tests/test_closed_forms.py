"""Values and gradients against closed forms computed in numpy: elementwise functions of vectors
and matrices, evaluations large enough to run as several lane blocks, the MSE mode, and the
optimizers on problems whose optimum is known exactly (linear least squares, active bounds)."""
import numpy as np
import pytest

import ndvm
from conftest import CLIENTS

# name: (f, f') for the elementwise functions of vectors and matrices
ELEMENTWISE = {
    "exp": (np.exp, np.exp),
    "log": (np.log, lambda u: 1 / u),
    "sin": (np.sin, np.cos),
    "cos": (np.cos, lambda u: -np.sin(u)),
    "tanh": (np.tanh, lambda u: 1 - np.tanh(u) ** 2),
    "sqrt": (np.sqrt, lambda u: 0.5 / np.sqrt(u)),
    "-": (np.negative, lambda u: -np.ones_like(u)),
}
A = np.array([0.7, 1.3])        # S = 2
B = np.array([0.4, 2.2])
X = np.array([0.3, 1.1, 2.5])   # N = 3


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fn", sorted(ELEMENTWISE))
def test_elementwise_on_a_vector(fn, client):
    """(vsum (f (vec (* a x) (+ b 1) (* a b)))): value and per-lane partials in closed form."""
    f, df = ELEMENTWISE[fn]
    res = ndvm.Evaluator(client=client).evaluate(
        f"(vsum ({fn} (vec (* a x) (+ b 1) (* a b))))", params={"a": A, "b": B},
        data={"x": X}, grad=True)
    a, b, x = A[:, None], B[:, None], X[None, :]
    want = f(a * x) + f(b + 1) + f(a * b)
    np.testing.assert_allclose(res.value, want, rtol=1e-14)
    jac = res.jacobian()
    np.testing.assert_allclose(jac["a"], df(a * x) * x + df(a * b) * b, rtol=1e-13)
    np.testing.assert_allclose(jac["b"], np.broadcast_to(df(b + 1) + df(a * b) * a, (2, 3)),
                               rtol=1e-13)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fn", sorted(ELEMENTWISE))
def test_elementwise_on_a_matrix(fn, client):
    """(trace (matmul (f M) C)) with M = [[a x, b], [a b, 0.7]] and C = [[1, 2], [3, 4]]."""
    f, df = ELEMENTWISE[fn]
    res = ndvm.Evaluator(client=client).evaluate(
        f"(trace (matmul ({fn} (mat (vec (* a x) b) (vec (* a b) 0.7))) (mat [1 2] [3 4])))",
        params={"a": A, "b": B}, data={"x": X}, grad=True)
    a, b, x = A[:, None], B[:, None], X[None, :]
    # trace(F C) = F00 C00 + F01 C10 + F10 C01 + F11 C11
    want = f(a * x) * 1 + f(b) * 3 + f(a * b) * 2 + f(0.7) * 4
    np.testing.assert_allclose(res.value, want, rtol=1e-14)
    jac = res.jacobian()
    np.testing.assert_allclose(jac["a"], df(a * x) * x + 2 * df(a * b) * b, rtol=1e-13)
    np.testing.assert_allclose(jac["b"], np.broadcast_to(3 * df(b) + 2 * df(a * b) * a, (2, 3)),
                               rtol=1e-13)


DECAY = "(* a (exp (- 0 (* b x))))"


def _decay(a, b, x):
    e = np.exp(-b[:, None] * x[None, :])
    return a[:, None] * e, e, -a[:, None] * x[None, :] * e


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("S, N", [(3, 1500), (5000, 1), (1, 4099)])
def test_lane_blocks_against_the_closed_form(S, N, client):
    """More lanes than one block (2048): starts split across blocks, one data point, one start.
    Every lane's value and partials equal the closed form."""
    rng = np.random.default_rng(S + N)
    a, b = rng.uniform(0.5, 2.0, S), rng.uniform(0.1, 1.0, S)
    x = rng.uniform(0.0, 3.0, N)
    res = ndvm.Evaluator(client=client).evaluate(DECAY, params={"a": a, "b": b},
                                                 data={"x": x}, grad=True)
    f, dfa, dfb = _decay(a, b, x)
    np.testing.assert_allclose(res.value, f, rtol=1e-14)
    jac = res.jacobian()
    np.testing.assert_allclose(jac["a"], dfa, rtol=1e-14)
    np.testing.assert_allclose(jac["b"], dfb, rtol=1e-14)
    np.testing.assert_allclose(res.grad["b"], dfb.sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("client", CLIENTS)
def test_mse_mode_against_the_closed_form(client):
    """Evaluator.mse over 4 x 3000 lanes (several blocks): loss and gradient in closed form."""
    rng = np.random.default_rng(5)
    S, N = 4, 3000
    a, b = rng.uniform(0.5, 2.0, S), rng.uniform(0.1, 1.0, S)
    x = rng.uniform(0.0, 3.0, N)
    y = np.sin(x)
    loss, grad = ndvm.Evaluator(client=client).mse(DECAY, y, params={"a": a, "b": b},
                                                   data={"x": x})
    f, dfa, dfb = _decay(a, b, x)
    r = f - y
    np.testing.assert_allclose(loss, (r * r).mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(grad["a"], (2 * r * dfa).mean(axis=1), rtol=1e-11)
    np.testing.assert_allclose(grad["b"], (2 * r * dfb).mean(axis=1), rtol=1e-11)


def test_torch_backward_uses_the_upstream_gradient():
    """ndvm.torch's backward seeds the sweep with the real upstream gradient: d/da of
    sum(w * f) is sum(w * df/da), against the closed form."""
    torch = pytest.importorskip("torch")
    import ndvm.torch as nt

    rng = np.random.default_rng(2)
    x = rng.uniform(0.0, 3.0, 7)
    a = torch.tensor([0.8, 1.6], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.3, 0.6], dtype=torch.float64, requires_grad=True)
    w = torch.tensor(rng.normal(size=(2, 7)))
    out = nt.evaluate(DECAY, {"a": a, "b": b}, data={"x": x})
    (out * w).sum().backward()
    _, dfa, dfb = _decay(a.detach().numpy(), b.detach().numpy(), x)
    np.testing.assert_allclose(a.grad.numpy(), (w.numpy() * dfa).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), (w.numpy() * dfb).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("form", ["(trace (inv M))", "(vsum (solve M [1 1 1]))"])
def test_dead_lanes_of_a_singular_matrix_leave_the_gradient_alone(form, client):
    """A divergent branch inverts M = diag(a, x, 1) only where x > 0: on the other lanes M is
    singular (its inverse is inf/nan there) and the lane takes the else arm. Both d/da = -1/a^2
    on the live lanes and 0 on the dead ones: the n x n linear algebra adjoint must stay under
    its node's lane mask (its zero upstream adjoint times a nan inverse would be nan)."""
    a = np.array([0.5, 2.0])
    x = np.array([1.5, 0.0, 3.0, 0.0])
    res = ndvm.Evaluator(client=client).evaluate(
        f"(let ((M (mat (vec a 0 0) (vec 0 x 0) (vec 0 0 1)))) (if (> x 0) {form} 0.5))",
        params={"a": a}, data={"x": x}, grad=True)
    live = x > 0
    aa = a[:, None]
    xs = np.where(live, x, 1.0)[None, :]
    want = np.where(live, 1 / aa + 1 / xs + 1, 0.5)
    np.testing.assert_allclose(res.value, want, rtol=1e-14)
    jac = res.jacobian()
    np.testing.assert_allclose(jac["a"], np.where(live, -1 / aa ** 2, 0.0), rtol=1e-14)
    np.testing.assert_allclose(res.grad["a"], live.sum() * -1 / a ** 2, rtol=1e-14)


@pytest.mark.parametrize("client", CLIENTS)
def test_arithmetic_with_a_uniform_zero_or_one_operand(client):
    """The identity folds (x - 0, x * 1, x / 1, 1 * x, x + 0, x * 0) fire only on the side that
    is an identity: a scalar data input z = 0 or u = 1 on the other side must still compute
    0 - a = -a, 1 / a, 0 / a and 1 - a. Values and partials in closed form."""
    a = np.array([0.7, -1.3, 2.5])
    ev = ndvm.Evaluator(client=client)
    cases = {  # program: (value, d/da)
        "(- z a)": (-a, -np.ones_like(a)), "(- a z)": (a, np.ones_like(a)),
        "(/ u a)": (1 / a, -1 / a ** 2), "(/ z a)": (0 * a, 0 * a),
        "(- u a)": (1 - a, -np.ones_like(a)), "(* u a)": (a, np.ones_like(a)),
        "(+ z (* 3 a))": (3 * a, 3 * np.ones_like(a)),
    }
    for prog, (val, d) in cases.items():
        res = ev.evaluate(prog, params={"a": a}, data={"z": 0.0, "u": 1.0}, grad=True)
        np.testing.assert_allclose(res.value.ravel(), val, rtol=1e-15, err_msg=prog)
        np.testing.assert_allclose(res.grad["a"], d, rtol=1e-15, err_msg=prog)


# ---- optimizers against known optima -------------------------------------------------------

LINE = "(+ a (* b x))"


def _line_data():
    rng = np.random.default_rng(11)
    x = np.linspace(-2.0, 5.0, 40)
    y = 0.7 - 1.9 * x + rng.normal(0, 0.3, x.size)
    coef = np.linalg.lstsq(np.stack([np.ones_like(x), x], 1), y, rcond=None)[0]
    return x, y, coef


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("optimizer, steps, tol", [("lm", 10, 1e-10), ("lbfgs", 30, 1e-7)])
def test_fit_reaches_the_least_squares_solution(optimizer, steps, tol, client):
    """A model linear in its parameters: the optimum is numpy's least-squares solution; LM
    reaches it in a few steps (Gauss-Newton is exact here), L-BFGS within 30."""
    x, y, (c0, c1) = _line_data()
    res = ndvm.fit(LINE, data={"x": x}, target=y, init={"a": 5.0, "b": 3.0},
                   optimizer=optimizer, steps=steps, client=client)
    assert res.params["a"] == pytest.approx(c0, abs=tol)
    assert res.params["b"] == pytest.approx(c1, abs=tol)
    want = np.mean((c0 + c1 * x - y) ** 2)
    assert res.loss == pytest.approx(want, rel=1e-9)


def test_fit_reports_the_loss_of_the_parameters_it_returns():
    """Adam with a step too large oscillates: the result is the best point of the run, and its
    loss is the loss of the parameters reported (recomputed here)."""
    x, y, _ = _line_data()
    res = ndvm.fit(LINE, data={"x": x}, target=y, init={"a": [5.0, -3.0], "b": [3.0, 0.0]},
                   starts=2, optimizer="adam", steps=60, lr=2.0)
    for s in range(2):
        a, b = res.all_params["a"][s], res.all_params["b"][s]
        assert res.all_losses[s] == pytest.approx(np.mean((a + b * x - y) ** 2), rel=1e-12)
        assert res.all_losses[s] == pytest.approx(np.nanmin(res.history[:, s]), rel=1e-12)
    assert res.history.shape == (60, 2)


def test_fit_starts_from_each_starts_init():
    """The first recorded loss of each start is the loss at its own initial value."""
    x, y, _ = _line_data()
    init_a, init_b = np.array([1.0, -2.0, 0.5]), np.array([0.0, 4.0, -1.0])
    res = ndvm.fit(LINE, data={"x": x}, target=y, init={"a": init_a, "b": init_b}, starts=3,
                   optimizer="adam", steps=2)
    want = [np.mean((init_a[s] + init_b[s] * x - y) ** 2) for s in range(3)]
    np.testing.assert_allclose(res.history[0], want, rtol=1e-12)


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs", "lm"])
def test_fit_stops_at_an_active_lower_bound(optimizer):
    """(* a x) fitted to 3 x with a in [4, 10]: the optimum is the lower bound, exactly."""
    x = np.linspace(0.1, 1.0, 20)
    res = ndvm.fit("(* a x)", data={"x": x}, target=3.0 * x, bounds={"a": (4.0, 10.0)},
                   optimizer=optimizer, steps=100, lr=0.5, starts=3, seed=1)
    assert np.all(res.all_params["a"] >= 4.0) and np.all(res.all_params["a"] <= 10.0)
    assert res.params["a"] == 4.0
    assert res.loss == pytest.approx(np.mean((4.0 * x - 3.0 * x) ** 2), rel=1e-12)


def test_lm_converges_in_few_steps_on_a_nonlinear_model():
    """Levenberg-Marquardt from near the optimum of a zero-residual problem converges
    quadratically: 12 steps take the loss below 1e-20."""
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    res = ndvm.fit("(* a (* (exp (- 0 (* b x))) (cos (* c x))))", data={"x": x}, target=y,
                   init={"a": 0.8, "b": 0.2, "c": 1.9}, optimizer="lm", steps=12)
    assert res.loss < 1e-20
    assert res.params == pytest.approx({"a": 1.0, "b": 0.3, "c": 2.0}, abs=1e-9)
