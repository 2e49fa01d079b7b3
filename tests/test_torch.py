"""ndvm.torch: the autograd.Function boundary (skipped without torch)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import ndvm  # noqa: E402
import ndvm.torch as nt  # noqa: E402
from conftest import CLIENTS  # noqa: E402

MODEL = "(* a (exp (- 0 (* b x))) (cos (* c x)))"
X = np.linspace(0.1, 3.0, 7)


def _params(S=3, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return {k: (torch.rand(S, generator=g, dtype=dtype) + 0.5).requires_grad_()
            for k in "abc"}


@pytest.mark.parametrize("client", CLIENTS)
def test_gradcheck_float64(client):
    p = _params()

    def f(a, b, c):
        return nt.evaluate(MODEL, {"a": a, "b": b, "c": c}, data={"x": X}, client=client)

    assert torch.autograd.gradcheck(f, (p["a"], p["b"], p["c"]))


@pytest.mark.parametrize("client", CLIENTS)
def test_matches_torch_on_any_downstream_loss(client):
    p = _params()
    v = nt.evaluate(MODEL, p, data={"x": X}, client=client)
    y = torch.linspace(-1, 1, 7, dtype=torch.float64)
    loss = (torch.sin(v) * y).sum() + (v[1] ** 3).mean()
    loss.backward()
    q = {k: t.detach().clone().requires_grad_() for k, t in p.items()}
    xt = torch.tensor(X)
    w = q["a"][:, None] * torch.exp(-q["b"][:, None] * xt) * torch.cos(q["c"][:, None] * xt)
    ((torch.sin(w) * y).sum() + (w[1] ** 3).mean()).backward()
    torch.testing.assert_close(v.detach(), w.detach(), rtol=1e-13, atol=1e-14)
    for k in p:
        torch.testing.assert_close(p[k].grad, q[k].grad, rtol=1e-12, atol=1e-14)


def test_no_grad_and_parameters_without_grad():
    p = _params()
    with torch.no_grad():
        v = nt.evaluate(MODEL, p, data={"x": X})
    assert not v.requires_grad and v.shape == (3, 7)
    v = nt.evaluate(MODEL, {k: t.detach() for k, t in p.items()}, data={"x": X})
    assert not v.requires_grad


def test_tape_reused_only_when_intact():
    """Two forwards, then both backwards: the second forward overwrote the machine's tape."""
    p = _params()
    v1 = nt.evaluate(MODEL, p, data={"x": X})
    v2 = nt.evaluate("(* a b c x)", p, data={"x": X})
    (v1.sum() + v2.sum()).backward()
    grads = {k: t.grad.clone() for k, t in p.items()}
    q = {k: t.detach().clone().requires_grad_() for k, t in p.items()}
    (nt.evaluate(MODEL, q, data={"x": X}).sum()).backward()
    (nt.evaluate("(* a b c x)", q, data={"x": X}).sum()).backward()
    for k in p:
        torch.testing.assert_close(grads[k], q[k].grad, rtol=1e-13, atol=1e-14)


def test_parameter_matrix_form_and_scalars():
    P = torch.tensor([[1.0, 0.3, 2.0], [0.5, 0.2, 1.0]], dtype=torch.float64, requires_grad=True)
    v = nt.evaluate(MODEL, P, names=("a", "b", "c"), data={"x": X})
    v.sum().backward()
    assert P.grad.shape == (2, 3) and torch.all(torch.isfinite(P.grad))
    s = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    v = nt.evaluate("(* s x)", {"s": s}, data={"x": X})
    v.sum().backward()
    assert s.grad.item() == pytest.approx(X.sum())
    with pytest.raises(ValueError, match=r"\[S, P\]"):
        nt.evaluate(MODEL, P, data={"x": X})


def test_float32():
    p = _params(dtype=torch.float32)
    v = nt.evaluate(MODEL, p, data={"x": X})
    assert v.dtype == torch.float32
    v.sum().backward()
    assert p["a"].grad.dtype == torch.float32


def test_errors_propagate_as_ndvm_errors():
    with pytest.raises(ndvm.EvalError):
        nt.evaluate("(car a)", {"a": torch.ones(2, requires_grad=True)})


def test_torch_adam_driving_ndvm_torch_matches_ndvm_fit():
    """Adam's trajectory step by step: torch.optim.Adam over ndvm.torch vs native ndvm.fit."""
    x = np.linspace(0.1, 6.0, 44)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    init = {"a": 0.5, "b": 0.1, "c": 1.5}
    steps, lr = 30, 0.05
    res = ndvm.fit(MODEL, data={"x": x}, target=y, init=init, optimizer="adam", steps=steps, lr=lr)
    module = nt.Module(MODEL, init)
    opt = torch.optim.Adam(module.parameters(), lr=lr)
    yt = torch.tensor(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((module(x=x)[0] - yt) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        opt.step()
    np.testing.assert_allclose(res.history[:, 0], losses, rtol=1e-11)
