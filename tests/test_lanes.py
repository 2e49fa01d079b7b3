"""Lane decomposition: a batched run over S x N lanes equals the S*N single-lane runs.

Includes divergent programs: nested ifs, loops whose trip count differs per lane, arms that
return structurally different values (the lanes are partitioned and re-run), and a dead lane
that would produce inf or nan.
"""
import numpy as np
import pytest

import ndvm
from conftest import CLIENTS

PROGRAMS = {
    "straight": "(* a (exp (- 0 (* b x))))",
    "nested_if": "(if (< x 1.0) (if (< a 0.5) (* a x) (- a x)) (if (> b 0) (* b b x) (/ a x)))",
    "trip_count": "(loop ((k 0) (y a)) (if (> y (+ x 1.0)) (+ y k) (recur (+ k 1) (* y 1.5))))",
    "recursion_depth_varies": "(define (f y n) (if (> y 3.0) (* n y) (f (* y (+ 1.2 b)) (+ n 1)))) (f (+ a x) 0)",
    "structural_divergence": "(let ((r (if (< x 1.0) (list a b) (* a x)))) (if (pair? r) (+ (car r) (cadr r)) (* 2 r)))",
    "divergent_list_lengths": "(define (build n acc) (if (< n 0.5) acc (build (- n 1) (cons n acc)))) (* a (length (build (floor (* 2 x)) '())))",
    "dead_lane_inf": "(if (> x 1.0) (log (- x 1.0)) (* a b))",
    "dead_lane_nan_grad": "(if (> (* a x) 0.5) (sqrt (- (* a x) 0.5)) (* b x))",
    "bool_result_merge": "(if (and (< x 2.0) (or (> a 0.5) (< b 0.0))) (* a x) (* b x))",
    "closure_divergence": "(let ((f (if (< x 1.0) (lambda (z) (* a z)) (lambda (z) (+ b z))))) (f x))",
    "vector_divergence": "(let ((v (if (< x 1.0) (vec a b) (vec b a)))) (dot v (vec 1.0 x)))",
    "shape_divergence": "(let ((v (if (< x 1.0) (vec a b) (vec a b x)))) (vsum v))",
    "filter_varying": "(fold-left + 0 (filter (lambda (u) (> u 1.0)) (list a b x)))",
    # pow and tanh on the vector kernels: a varying base, a varying exponent, both, and a
    # uniform one, over 15 lanes (whole vectors and a padded tail)
    "pow_tanh": "(+ (pow (+ x a) b) (pow (+ b 1.0) x) (pow x 2.5) (tanh (* a x)))",
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_batched_equals_single_lanes(name, client, dtype):
    prog = ndvm.parse(PROGRAMS[name], name)
    ev = ndvm.Evaluator(client=client, dtype=dtype)
    a = np.array([0.3, 0.7, 1.4])
    b = np.array([0.2, 0.5, 0.9]) if name == "recursion_depth_varies" else np.array([0.2, -0.5, 0.9])
    x = np.array([0.25, 0.8, 1.0, 1.6, 2.5])
    params = {k: v for k, v in (("a", a), ("b", b)) if k in prog.free_names}
    res = ev.evaluate(prog, params=params, data={"x": x}, grad=True)
    jac = res.jacobian()
    for s in range(3):
        for n in range(5):
            one = ev.evaluate(prog, params={k: v[s] for k, v in params.items()},
                              data={"x": x[n]}, grad=True)
            assert res.value[s, n] == one.value[0, 0] or (
                np.isnan(res.value[s, n]) and np.isnan(one.value[0, 0])), (s, n)
            for k in params:
                g1, g2 = jac[k][s, n], one.grad[k][0]
                tol = 1e-13 if dtype == "float64" else 1e-6
                assert g1 == g2 or abs(g1 - g2) <= tol * max(1.0, abs(g1)), (k, s, n, g1, g2)
    if name.startswith("dead_lane"):
        for k in params:
            assert np.all(np.isfinite(jac[k])), "a dead lane leaked into a gradient"


@pytest.mark.parametrize("client", CLIENTS)
def test_structural_divergence_values(client):
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate(PROGRAMS["structural_divergence"], params={"a": 2.0, "b": 3.0},
                      data={"x": [0.5, 2.0]}, grad=True)
    np.testing.assert_array_equal(res.value, [[5.0, 8.0]])
    np.testing.assert_array_equal(res.jacobian()["a"], [[1.0, 4.0]])
    np.testing.assert_array_equal(res.jacobian()["b"], [[1.0, 0.0]])


@pytest.mark.parametrize("client", CLIENTS)
def test_uniform_loop_counter_runs_a_million_steps(client):
    """Loop counters and literals stay uniform: a million iterations run in constant memory."""
    ev = ndvm.Evaluator(client=client, max_steps=50_000_000)
    res = ev.evaluate("(loop ((i 0) (s 0.0)) (if (= i 1000000) s (recur (+ i 1) (+ s 1.0))))")
    assert res.item() == 1_000_000.0


@pytest.mark.parametrize("client", CLIENTS)
def test_many_lanes(client):
    ev = ndvm.Evaluator(client=client)
    S, N = 64, 200
    a = np.linspace(0.5, 2.0, S)
    x = np.linspace(0.0, 6.0, N)
    res = ev.evaluate("(* a (exp (- 0 (* 0.3 x))) (cos (* a x)))", params={"a": a},
                      data={"x": x}, grad=True)
    want = a[:, None] * np.exp(-0.3 * x[None, :]) * np.cos(a[:, None] * x[None, :])
    np.testing.assert_allclose(res.value, want, rtol=1e-14)
    dwant = (np.exp(-0.3 * x[None, :]) * np.cos(a[:, None] * x[None, :])
             - a[:, None] * x[None, :] * np.exp(-0.3 * x[None, :]) * np.sin(a[:, None] * x[None, :]))
    np.testing.assert_allclose(res.jacobian()["a"], dwant, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("client", CLIENTS)
def test_lane_blocks_equal_one_run(client):
    """Evaluations larger than one lane block (2048 lanes) run block by block; the result is
    bit for bit that of single-lane runs, divergent branches and partitions included."""
    prog = ndvm.parse(PROGRAMS["structural_divergence"])
    ev = ndvm.Evaluator(client=client)
    a = np.linspace(0.1, 2.0, 7)
    b = np.linspace(-1.0, 1.0, 7)
    x = np.linspace(0.0, 2.0, 700)  # 4900 lanes: three blocks, a start split across blocks
    res = ev.evaluate(prog, params={"a": a, "b": b}, data={"x": x}, grad=True)
    jac = res.jacobian()
    for s, n in [(0, 0), (2, 650), (2, 651), (3, 0), (6, 699), (5, 333)]:
        one = ev.evaluate(prog, params={"a": a[s], "b": b[s]}, data={"x": x[n]}, grad=True)
        assert res.value[s, n] == one.value[0, 0]
        assert jac["a"][s, n] == one.grad["a"][0] and jac["b"][s, n] == one.grad["b"][0]


POW_BASES = [-8.0, -2.0, -0.5, -0.0, 0.0, 0.3, 1.0, 2.0, 1e300, np.inf, -np.inf, np.nan]
POW_EXPONENTS = [-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 1e-300, 1e300, np.inf, -np.inf,
                 np.nan]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("client", CLIENTS)
def test_pow_and_tanh_follow_ieee_on_every_lane(client, dtype):
    """pow and tanh run on the vector kernels where there are any: each lane still gives C's
    pow and tanh, the special cases exactly (negative bases with integer and other exponents,
    signed zeros, infinities, NaN) and the rest to within a few units in the last place, and
    the same on one lane as beside others (a uniform operand, a varying one, or both)."""
    ev = ndvm.Evaluator(client=client, dtype=dtype)
    ft = np.float64 if dtype == "float64" else np.float32
    a, b = (np.array(v, dtype=np.float64) for v in zip(*[(x, y) for x in POW_BASES
                                                        for y in POW_EXPONENTS]))
    with np.errstate(all="ignore"):
        want = np.power(a.astype(ft), b.astype(ft)).astype(np.float64)
        got = ev.evaluate("(pow a b)", params={"a": a, "b": b}).value[:, 0]
        tol = 4 * np.finfo(ft).eps
        for i in range(a.size):
            w, g = want[i], got[i]
            if np.isnan(w) or np.isinf(w) or w == 0:
                assert (np.isnan(g) if np.isnan(w) else g == w and np.signbit(g) == np.signbit(w)), \
                    (a[i], b[i], g, w)
            else:
                assert abs(g - w) <= tol * abs(w), (a[i], b[i], g, w)
        for x in (-0.5, 2.0):  # a uniform base with varying exponents, and the other way round
            e = np.array([x for x in POW_EXPONENTS if np.isfinite(x)])
            lanes = ev.evaluate("(pow x e)", data={"e": e}, consts={"x": x}).value[0]
            ones = [ev.evaluate(f"(pow x {float(v)!r})", consts={"x": x}).value[0, 0] for v in e]
            np.testing.assert_array_equal(lanes, ones)
        x = np.array([-np.inf, -30.0, -1.0, -1e-300, -0.0, 0.0, 1e-8, 0.5, 19.0, np.inf, np.nan])
        want = np.tanh(x.astype(ft)).astype(np.float64)
        got = ev.evaluate("(tanh x)", data={"x": x}).value[0]
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)
    assert np.array_equal(np.signbit(got[:-1]), np.signbit(want[:-1]))
