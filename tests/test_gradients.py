"""Gradients against central finite differences (float64), over every primitive and form.

Each case runs with S=3 parameter vectors and N=4 data points (12 lanes), so the same checks also
exercise per-start gradients and divergent branches.
"""
import numpy as np
import pytest

import ndvm
from conftest import CLIENTS

X4 = np.array([0.3, 0.9, 1.7, 2.6])

# (id, source, params {name: [S values]}, data {name: [N]}, consts)
CASES = [
    ("add_sub_mul_div", "(/ (- (* a x) (+ b 1.5 x)) (+ c 2.0))", {"a": [1.2, -0.7, 2.0], "b": [0.3, 1.1, -0.4], "c": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("unary_minus_recip", "(+ (- a) (/ b) (- a b x))", {"a": [1.2, -0.7, 2.0], "b": [0.3, 1.1, -0.4]}, {"x": X4}, {}),
    ("exp_log_sqrt", "(+ (exp (* a x)) (log (+ b x)) (sqrt (+ b (* x x))))", {"a": [0.2, -0.4, 0.9], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("trig", "(+ (sin (* a x)) (cos (* b x)) (tan (* 0.3 a x)) (atan (* a x)))", {"a": [0.2, -0.4, 0.9], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("atan2_tanh", "(+ (atan a (+ x b)) (tanh (* a x)))", {"a": [0.2, -0.4, 0.9], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("pow_expt_square", "(+ (pow (+ x b) a) (expt b 2.5) (square (* a x)))", {"a": [0.2, -0.4, 0.9], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("abs_min_max", "(+ (abs (- a x)) (min a b x) (max (* a x) b 0.1))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("rounding_is_flat", "(+ (* a (floor (* 3 x))) (ceiling a) (round b) (truncate (* a b)))", {"a": [0.2, -0.4, 2.9], "b": [0.6, 1.4, -3.2]}, {"x": X4}, {}),
    ("modulo_remainder", "(+ (modulo (+ a 7.3) b) (remainder (- 0 a 7.3) b) (* x 0))", {"a": [0.2, -0.4, 2.9], "b": [2.1, 1.5, -3.1]}, {"x": X4}, {}),
    ("zero_factor", "(* a b 0.0 (exp x))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("zero_factor_data", "(* a (- x x) (sqrt b))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("zero_factor_param", "(* a (log b) x)", {"a": [0.0, 0.0, 1.0], "b": [0.5, 1.5, 3.0]}, {"x": X4}, {}),
    ("let_letstar", "(let ((u (* a x)) (v b)) (let* ((w (+ u v)) (z (* w w))) (- z u)))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("closures", "(define (make-scaler s) (lambda (z) (* s z))) (define f (make-scaler a)) (+ (f x) ((make-scaler b) (f b)))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("higher_order_prelude", "(fold-left + 0 (map (lambda (c) (* c x)) (list a b (* a b))))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("fold_right_filter", "(fold-right (lambda (u acc) (+ u (* 0.5 acc))) b (filter number? (list a x b)))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("recursion", "(define (p n) (if (= n 0) b (+ (* a x) (* 0.9 (p (- n 1)))))) (p 6)", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("letrec_mutual", "(letrec ((ev? (lambda (n) (if (= n 0) a (od? (- n 1))))) (od? (lambda (n) (if (= n 0) b (* 1.1 (ev? (- n 1))))))) (* x (ev? 7)))", {"a": [0.2, -0.4, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("named_let", "(let lp ((k 0) (s a)) (if (= k 5) s (lp (+ k 1) (+ (* s b) x))))", {"a": [0.2, -0.4, 0.9], "b": [0.5, 0.7, -0.3]}, {"x": X4}, {}),
    ("loop_recur", "(loop ((k 0) (y x)) (if (= k 8) y (recur (+ k 1) (+ y (* a (sin y))))))", {"a": [0.2, -0.4, 0.9]}, {"x": X4}, {}),
    ("loop_divergent_trip_count", "(loop ((k 0) (y a)) (if (> y x) (* y b) (recur (+ k 1) (* y 1.3))))", {"a": [0.2, 0.4, 0.95], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("divergent_if", "(if (< (* a x) 1.0) (* b (exp (* a x))) (/ b (+ a x)))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("cond_case_when", "(+ (cond ((< x 0.5) a) ((< x 2.0) (* a b)) (else b)) (case 2 ((1) a) ((2 3) (* 2 b)) (else 0)) (if (when (> b 0) #t) a 0.0))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("and_or_not", "(if (and (> x 0.5) (or (< a 1.0) (not (> b 0)))) (* a b x) (- a b))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("dead_lane_inf", "(if (> x 0.5) (log (- x 0.5)) (* a (sqrt (- 0.5 x))))", {"a": [0.2, 0.8, 2.9]}, {"x": np.array([0.3, 0.5, 1.7, 2.6])}, {}),
    ("dead_lane_div_zero", "(if (= x 0.0) a (/ (* a b) x))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": np.array([0.0, 0.9, 0.0, 2.6])}, {}),
    ("lists", "(+ (car (list a b)) (cadr (list a b)) (length (list a b x)) (list-ref (reverse (append (list a) (list b x))) 1) (car (cddr (cons a (cons b (list x))))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("vectors", "(let ((u (vec a b x)) (v [b x a])) (+ (dot u v) (vsum (cross u v)) (norm u) (ref (normalize v) 2) (vsum (scale a u)) (vlen u)))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("vector_broadcast", "(vsum (+ (* a (vec 1 x b)) (- (vec b b b) x) (/ (vec a 2 3) b) (* (vec 1 2 3) (vec a b x))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("matrices", "(let ((M (mat (vec a b) (vec x 1.5))) (v (vec b a))) (+ (trace (matmul M (transpose M))) (vsum (matvec M v)) (trace (outer v v)) (ref (* M a) 0 1) (vsum (ref (- M 1) 1))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, -3.0]}, {"x": X4}, {}),
    ("linalg_2x2", "(let ((M (mat (vec (+ 2 a) b) (vec x (+ 3 b))))) (+ (det M) (logdet (* M M)) (trace (inv M)) (vsum (solve M (vec 1 a)))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, 0.3]}, {"x": X4}, {}),
    ("linalg_3x3", "(let ((M (mat (vec (+ 4 a) b 0.5) (vec x (+ 3 b) a) (vec 0.2 a 5)))) (+ (det M) (logdet M) (trace (inv M)) (vsum (solve M (vec 1 a b))) (trace (solve M (eye 3)))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, 0.3]}, {"x": X4}, {}),
    ("linalg_4x4", "(let ((M (+ (scale 5 (eye 4)) (outer (vec a b x 1) (vec 1 a 0.5 b))))) (+ (det M) (logdet M) (trace (inv M)) (vsum (solve M (ones 4)))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, 0.3]}, {"x": X4}, {}),
    ("singular_det_grad", "(det (mat (vec a (* 2 a)) (vec b (* 2 b))))", {"a": [0.2, 0.8, 2.9], "b": [0.5, 1.5, 0.3]}, {"x": X4}, {}),
    ("kalman_small", "(loop ((k 0) (m 0.0) (P 1.0) (L 0.0)) (if (= k 5) L (let* ((Pp (+ P q)) (S (+ Pp r)) (e (- (ref obs k) m)) (K (/ Pp S))) (recur (+ k 1) (+ m (* K e)) (* (- 1 K) Pp) (+ L (log S) (/ (* e e) S))))))", {"q": [0.05, 0.2, 1.0], "r": [0.1, 0.5, 2.0]}, {}, {"obs": np.array([0.3, -0.2, 0.5, 1.1, 0.7])}),
    ("zeros_ones_eye", "(+ (vsum (zeros 3)) (trace (ones 2 2)) (* a (trace (eye 3))) (ref (ones 2 3) 1 2))", {"a": [0.2, 0.8, 2.9]}, {"x": X4}, {}),
    ("predicates", "(+ (if (number? a) a 0) (if (zero? (- a a)) b 0) (if (positive? b) 1 2) (if (negative? (* a x)) a b) (if (eqv? a a) 1 0) (if (equal? (list 1 a) (list 1 a)) b 0))", {"a": [0.2, -0.8, 2.9], "b": [0.5, 1.5, -0.3]}, {"x": X4}, {}),
    ("rest_args", "(define (f first . more) (* first (fold-left + 0 more))) (f a b x 2)", {"a": [0.2, -0.8, 2.9], "b": [0.5, 1.5, -0.3]}, {"x": X4}, {}),
    ("internal_define", "(define (g y) (define h (* y a)) (define (k z) (+ z h b)) (k (* h y))) (g x)", {"a": [0.2, -0.8, 2.9], "b": [0.5, 1.5, -0.3]}, {"x": X4}, {}),
    ("compat_free_sqrt_neg_is_nan_free_elsewhere", "(sqrt (+ (* a a) x))", {"a": [0.2, -0.8, 2.9]}, {"x": X4}, {}),
]


def _fd(ev, prog, params, data, consts, name, s):
    base = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    h = 1e-6 * max(1.0, abs(base[name][s]))
    up = {k: v.copy() for k, v in base.items()}
    dn = {k: v.copy() for k, v in base.items()}
    up[name][s] += h
    dn[name][s] -= h
    fu = ev.evaluate(prog, params=up, data=data, consts=consts).value[s]
    fd = ev.evaluate(prog, params=dn, data=data, consts=consts).value[s]
    return (fu - fd) / (2 * h)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradient_matches_finite_differences(case, client):
    _, src, params, data, consts = case
    ev = ndvm.Evaluator(client=client)
    prog = ndvm.parse(src)
    res = ev.evaluate(prog, params=params, data=data, consts=consts, grad=True)
    # every case is built to be finite on every live lane (dead_lane_*: the arm that would give
    # inf or nan is not taken there)
    assert np.all(np.isfinite(res.value))
    jac = res.jacobian()
    for name, vals in params.items():
        for s in range(len(vals)):
            fd = _fd(ev, prog, params, data, consts, name, s)
            np.testing.assert_allclose(jac[name][s], fd, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} start {s}")
            assert np.all(np.isfinite(jac[name][s]))


@pytest.mark.parametrize("client", CLIENTS)
def test_zero_factor_gives_exact_zero_gradient(client):
    """No gradient divides by a factor: (* a b 0) has gradient exactly 0, never nan."""
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate("(* a (log b) 0.0)", params={"a": 0.0, "b": 0.0}, grad=True)
    # the value is 0 * -inf * 0 = nan, but a literal zero factor gives both gradients exactly 0
    assert np.isnan(res.item())
    assert res.grad["a"].tolist() == [0.0] and res.grad["b"].tolist() == [0.0]
    res = ev.evaluate("(* a (log b) 0.0)", params={"a": 1.5, "b": 2.0}, grad=True)
    assert res.item() == 0.0
    assert res.grad["a"].tolist() == [0.0] and res.grad["b"].tolist() == [0.0]
    res = ev.evaluate("(* a b)", params={"a": 0.0, "b": 3.0}, grad=True)
    assert res.grad["a"][0] == 3.0 and res.grad["b"][0] == 0.0


@pytest.mark.parametrize("client", CLIENTS)
def test_min_max_ties_split_evenly(client):
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate("(+ (min a b) (max a b c))", params={"a": 1.0, "b": 1.0, "c": 1.0}, grad=True)
    assert res.grad["a"][0] == pytest.approx(0.5 + 1 / 3)
    assert res.grad["b"][0] == pytest.approx(0.5 + 1 / 3)
    assert res.grad["c"][0] == pytest.approx(1 / 3)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("n", [1, 2, 5, 16])
def test_a_zero_adjoint_times_an_infinite_partial_is_zero(client, n):
    """(max (sqrt (* a x)) 1) where x = 0: max passes sqrt no adjoint there and sqrt's partial is
    inf; their product is 0, not NaN (one lane, a few lanes inline, and the kernel's many)."""
    ev = ndvm.Evaluator(client=client)
    x = np.zeros(n)
    x[1::2] = 4.0  # sqrt(a x) = 2 > 1: d/da = x / (2 sqrt(a x)) = 1
    res = ev.evaluate("(max (sqrt (* a x)) 1)", params={"a": 1.0}, data={"x": x}, grad=True)
    np.testing.assert_array_equal(res.jacobian()["a"][0], np.where(x > 0, 1.0, 0.0))
    assert res.grad["a"][0] == (x > 0).sum()


@pytest.mark.parametrize("client", CLIENTS)
def test_scalar_side_of_broadcast_gets_its_gradient(client):
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate("(vsum (* s (vec 1.0 2.0 3.0)))", params={"s": 2.0}, grad=True)
    assert res.grad["s"][0] == 6.0
    res = ev.evaluate("(vsum (/ (vec 1.0 2.0) s))", params={"s": 2.0}, grad=True)
    assert res.grad["s"][0] == pytest.approx(-3.0 / 4.0)


@pytest.mark.parametrize("client", CLIENTS)
def test_literals_and_data_get_no_gradient(client):
    ev = ndvm.Evaluator(client=client)
    res = ev.evaluate("(* 3.0 x)", params={}, data={"x": [1.0, 2.0]}, grad=True)
    assert res.grad == {}
    np.testing.assert_array_equal(res.value, [[3.0, 6.0]])
