"""Hand-written JAX models of the benchmark programs, staged with jax.jit(jax.value_and_grad).

Each model maps (params {name: [S]}, data, consts) to the [S] program values; the staged loss is
their sum, so its gradient is each start's gradient, as in ndvm. Keyed by case name, or by source
text for the co-search candidates.
"""
import jax
import jax.numpy as jnp
from jax import lax

jax.config.update("jax_enable_x64", True)


def scalar_mul_add(p, d, c):
    return p["alpha"] * d["x"] + p["beta"]


def michaelis_menten(p, d, c):
    return p["Vmax"] * d["S"] / (p["Km"] + d["S"])


def damped_oscillator(p, d, c):
    t = d["t"]
    return p["A"] * (jnp.exp(0.0 - p["b"] * t) * jnp.cos(p["omega"] * t))


def logistic_map_loop(p, d, c):
    r = p["r"]
    return lax.fori_loop(0, 16, lambda k, x: r * (x * (1.0 - x)), p["x0"])


def rec_sinsum10(p, d, c):
    acc = jnp.zeros_like(p["a"])
    for n in range(1, 11):  # f(n) = a sin(b n) + f(n - 1), innermost first
        acc = p["a"] * jnp.sin(p["b"] * n) + acc
    return acc


def kalman2d_T80(p, d, c):
    q, r = p["q"], p["r"]
    eye = jnp.eye(2)
    S = q.shape[0]

    def step(carry, y):
        x, P, L = carry
        Ppred = P + q[:, None, None] * eye
        e = y - x
        Sm = Ppred + r[:, None, None] * eye
        Sinv = jnp.linalg.inv(Sm)
        Kg = Ppred @ Sinv
        xnew = x + (Kg @ e[..., None])[..., 0]
        Pnew = (eye - Kg) @ Ppred
        nll = jnp.log(jnp.linalg.det(Sm)) + jnp.einsum("si,si->s", e, (Sinv @ e[..., None])[..., 0])
        return (xnew, Pnew, L + nll), None

    init = (jnp.zeros((S, 2)), jnp.broadcast_to(eye, (S, 2, 2)), jnp.zeros(S))
    (_, _, L), _ = lax.scan(step, init, c["obs"])
    return L


def _cosearch_sr(p, d, c):
    x = d["x"]
    return p["a"] * (jnp.exp(p["b"] * x) * jnp.sin(p["c"] * x))


def _cosearch_rec(p, d, c):
    a, b = p["a"], p["b"]
    return lax.fori_loop(0, 10, lambda k, s: a * s + b, p["c"] * d["x"])


MODELS = {
    "scalar_mul_add": scalar_mul_add,
    "michaelis_menten": michaelis_menten,
    "damped_oscillator": damped_oscillator,
    "logistic_map_loop": logistic_map_loop,
    "rec_sinsum10": rec_sinsum10,
    "kalman2d_T80": kalman2d_T80,
    "(* a (* (exp (* b x)) (sin (* c x))))": _cosearch_sr,
    "(loop ((s (* c x)) (k 0)) (if (= k 10) s (recur (+ (* a s) b) (+ k 1))))": _cosearch_rec,
}


def model_for(case):
    """The hand-written model of a case, or None."""
    return MODELS.get(case.name) or MODELS.get(case.src.strip())


def staged(model, consts):
    """jit(value_and_grad) of the summed model over params; call as f(params, data)."""
    consts = {k: jnp.asarray(v) for k, v in consts.items()}

    def loss(p, d):
        return jnp.sum(model(p, d, consts))

    return jax.jit(jax.value_and_grad(loss))
