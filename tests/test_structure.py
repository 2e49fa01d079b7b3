"""The structure the training data suggest before a search (ndvm/cosearch/structure.py): power
laws, single indices y = c M h(z), the building blocks made of them, and the search using them."""
import numpy as np
import pytest

import ndvm
from ndvm.cosearch import structure
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import atoms as _atoms
from ndvm.cosearch.sexpr import to_source
from ndvm.cosearch.simplify import canonical_source


def _X(n, d, lo=1.0, hi=5.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, (n, d))


def _grammar(d, **kw):
    return Grammar(inputs=tuple(f"x{i}" for i in range(d)), params=("a", "b", "c", "d", "f", "g"),
                   loop=False, **kw)


def test_power_law_recovers_the_exponents_of_a_monomial():
    X = _X(500, 5)
    y = 3.0 * X[:, 0] * X[:, 1] ** 2 * np.sqrt(X[:, 2]) / (X[:, 3] * X[:, 4] ** 1.5)
    ks, r2 = structure.power_law(X, y)
    np.testing.assert_allclose(ks, [1, 2, 0.5, -1, -1.5], atol=1e-9)
    assert r2 == pytest.approx(1.0)


def test_power_law_refuses_what_cannot_be_a_monomial():
    X = _X(200, 2)
    assert structure.power_law(X, X[:, 0] - 3.0) is None  # y changes sign
    X[:, 1] -= 3.0
    assert structure.power_law(X, X[:, 0]) is None  # an input changes sign
    assert structure.power_law(X[:3], X[:3, 0]) is None  # too few rows


@pytest.mark.parametrize("law, index, outer", [
    # a Boltzmann factor: n0 exp(-m g / (k T)) over five inputs
    (lambda x: x[0] * np.exp(-x[1] * x[2] / (x[3] * x[4])), (0, 1, 1, -1, -1), (1, 0, 0, 0, 0)),
    # an input outside and inside the function: n mu tanh(mu B / T)
    (lambda x: x[0] * x[1] * np.tanh(x[1] * x[2] / x[3]), (0, 1, 1, -1), (1, 1, 0, 0)),
    # y changes sign: no log fit, y = h(z) alone
    (lambda x: np.sin(x[0] * x[1] / x[2]), (1, 1, -1), None),
])
def test_single_indices_find_the_group_a_function_depends_on(law, index, outer):
    d = len(index)
    X = _X(3000, d, seed=1)
    found = structure.single_indices(X, law(X.T))
    ks, a, r2 = found[0]
    assert tuple(ks) == index
    assert r2 > 0.9  # (the running mean blurs the steep tail of exp)
    if outer is None:
        assert a is None
    else:
        assert list(outer) in structure.gauges(a, ks)


def test_monomial_trees_use_only_the_grammar_operators():
    g = _grammar(3)
    assert structure.monomial(["x0", "x1", "x2"], [2, -1, 0.5], g) == \
        ["/", ["*", ["square", "x0"], ["sqrt", "x2"]], "x1"]
    assert structure.monomial(["x0", "x1", "x2"], [0, 0, 0], g) == 1.0
    assert structure.monomial(["x0", "x1"], [1, None], g) == "x0"
    no_sqrt = _grammar(2, unary=("exp", "square"))
    assert structure.monomial(["x0", "x1"], [0.5, 1], no_sqrt) is None
    no_div = _grammar(2, binary=("+", "*"))
    assert structure.monomial(["x0", "x1"], [1, -1], no_div) is None
    assert structure.monomial(["x0", "x1"], [0.25, -1], g) == ["/", ["pow", "x0", 0.25], "x1"]
    assert structure.monomial(["x0"], [0.25], no_div) is None  # (no pow either)


def test_the_first_building_block_of_a_monomial_law_is_that_law():
    g = _grammar(3)
    X = _X(500, 3, seed=5)
    y = 0.7 * X[:, 0] * np.sqrt(X[:, 1]) / X[:, 2] ** 2
    blocks = structure.building_blocks(g, X, y)
    assert blocks[0] == ["*", "a", ["/", ["*", "x0", ["sqrt", "x1"]], ["square", "x2"]]]


def test_building_blocks_hold_the_index_models():
    g = _grammar(4)
    X = _X(2000, 4, seed=2)
    y = X[:, 0] * np.exp(-0.5 * X[:, 1] * X[:, 2] / X[:, 3])
    blocks = structure.building_blocks(g, X, y)
    assert blocks and len({to_source(b) for b in blocks}) == len(blocks)
    sources = {canonical_source(b, g.params) for b in blocks}
    want = canonical_source(["*", "a", "x0", ["exp", ["*", "b", ["/", ["*", "x1", "x2"], "x3"]]]],
                            g.params)
    assert want in sources
    for b in blocks:  # every block is a program over the grammar's names
        names = {a for a in _atoms(b) if isinstance(a, str)}
        assert names <= set(g.inputs) | set(g.params) | set(g.unary) | set(g.binary), names


def test_no_building_blocks_without_products_or_with_one_input():
    X = _X(100, 2)
    y = X[:, 0] * X[:, 1]
    assert structure.building_blocks(_grammar(2, binary=("+", "-")), X, y) == []
    assert structure.building_blocks(_grammar(1), X[:, :1], y) == []


def _search(X, y, blocks, n):
    """The best model's R^2 and size after a seeded search of n candidates."""
    from ndvm.cosearch.task import Task
    inputs = {f"x{i}": X[:, i] for i in range(X.shape[1])}
    params = ("a", "b", "c", "d", "f", "g")
    task = Task.from_arrays("law", inputs, y, heldout=0.25, params=params, loops=False,
                            fit={"optimizer": "lm", "steps": 30, "starts": 4})
    res = ndvm.search(task, proposer="mutate", max_candidates=n, seed=0, workers=1,
                      grammar=_grammar(X.shape[1]), blocks=blocks)
    return res.best["r2_all"], res.best["size"]


def test_a_five_input_monomial_law_is_found_from_its_building_blocks_and_not_without():
    X = _X(400, 5, seed=3)
    y = 2.5 * X[:, 0] * X[:, 1] * X[:, 2] / (X[:, 3] * X[:, 4] ** 2)
    r2, size = _search(X, y, True, 60)
    assert r2 > 0.999999 and size <= 12
    r2, _ = _search(X, y, False, 60)
    assert r2 < 0.999  # (the small models alone miss it in 60 candidates)


def test_no_building_blocks_when_the_data_do_not_support_them():
    X = _X(20, 2, lo=-3.0, hi=3.0, seed=4)
    y = X[:, 0] * X[:, 1] + np.sin((X[:, 0] - 1) * (X[:, 1] - 1))  # (Keijzer 11)
    assert structure.single_indices(X, y)[0][2] < structure.SUPPORT
    assert structure.building_blocks(_grammar(2), X, y) == []


@pytest.mark.parametrize("law, outer, terms, root", [
    # a kinetic energy m (u^2 + v^2 + w^2) / 2
    (lambda x: x[0] * (x[1] ** 2 + x[2] ** 2 + x[3] ** 2) / 2, [1, 0, 0, 0],
     [(1, 2), (2, 2), (3, 2)], False),
    # a heat flow k A (T2 - T1) / d: y changes sign
    (lambda x: x[0] * x[3] * (x[2] - x[1]) / x[4], [1, 0, 0, 1, -1], [(1, 1), (2, 1)], False),
    # a potential difference G m1 m2 (1/r2 - 1/r1)
    (lambda x: x[0] * x[1] * (1 / x[3] - 1 / x[2]), [1, 1, 0, 0], [(2, -1), (3, -1)], False),
    # a magnitude mu sqrt(Bx^2 + By^2 + Bz^2)
    (lambda x: x[0] * np.sqrt(x[1] ** 2 + x[2] ** 2 + x[3] ** 2), [1, 0, 0, 0],
     [(1, 2), (2, 2), (3, 2)], True),
])
def test_additive_laws_find_a_monomial_times_a_sum_of_powers(law, outer, terms, root):
    X = _X(3000, len(outer), seed=6)
    y = law(X.T) * (1 + 0.01 * np.random.default_rng(7).standard_normal(3000))
    found = [(list(o), t, r) for o, t, c, r, r2 in structure.additive_laws(X, y)
             if r2 > structure.SUPPORT]
    assert (outer, terms, root) in found, found
    g = _grammar(len(outer))
    blocks = {canonical_source(b, g.params) for b in structure.building_blocks(g, X, y)}
    sums = [b for b in blocks if "(+" in b and ("sqrt (+" in b) == root]
    assert sums, blocks


def test_no_additive_law_in_a_product_of_sums():
    X = _X(2000, 4, seed=8)
    y = (X[:, 0] + X[:, 1]) * (X[:, 2] + X[:, 3])  # a product of two sums is not one sum
    assert all(r2 < structure.SUPPORT or len(t) > 3
               for _, t, _, _, r2 in structure.additive_laws(X, y))


def test_a_kinetic_energy_is_found_from_its_building_blocks_and_not_without():
    X = _X(400, 4, seed=9)
    y = 0.5 * X[:, 0] * (X[:, 1] ** 2 + X[:, 2] ** 2 + X[:, 3] ** 2)
    r2, _ = _search(X, y, True, 60)
    assert r2 > 0.999999
    r2, _ = _search(X, y, False, 60)
    assert r2 < 0.999


def test_degenerate_data_gives_no_blocks_or_quiet_ones_never_an_error():
    import warnings
    rng = np.random.default_rng(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (no RuntimeWarning escapes the analysis)
        assert structure.building_blocks(_grammar(2), _X(300, 2), np.zeros(300)) == []
        assert structure.building_blocks(_grammar(2), _X(300, 2), np.full(300, 3.0)) == []
        huge = rng.uniform(1e150, 1e160, (300, 3))
        structure.building_blocks(_grammar(3), huge, huge[:, 2] / 1e150)
        structure.building_blocks(_grammar(3), huge, np.log(huge[:, 0]) * huge[:, 2])
        with_zeros = np.c_[rng.integers(0, 3, 200).astype(float), _X(200, 1)]
        structure.building_blocks(_grammar(2), with_zeros, with_zeros[:, 1] * 2.0)


def test_a_constant_target_is_searched_without_dividing_by_its_zero_variance():
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=40, random_state=0).fit(
        _X(100, 2), np.zeros(100))
    assert m.result_.best["r2"] == 1.0 and np.all(m.predict(_X(10, 2)) == 0.0)


def test_building_blocks_are_analysed_once_per_grammar_and_data(monkeypatch):
    """A search's islands each ask for the blocks: the same grammar and data are analysed once;
    other data, or another grammar, are analysed anew; callers get their own copies."""
    rng = np.random.default_rng(3)
    X = rng.uniform(1, 3, (200, 3))
    y = 2.0 * X[:, 0] * X[:, 1] ** 2 / X[:, 2]
    g = _grammar(3)
    calls = []
    real = structure._building_blocks
    monkeypatch.setattr(structure, "_building_blocks",
                        lambda *a: calls.append(1) or real(*a))
    structure._MEMO.clear()
    first = structure.building_blocks(g, X, y)
    assert first and structure.building_blocks(g, X.copy(), y.copy()) == first
    assert len(calls) == 1
    first[0].append("mutated by a caller")
    assert structure.building_blocks(g, X, y)[0] != first[0]
    structure.building_blocks(g, X, 2 * y)
    structure.building_blocks(_grammar(3, unary=("exp", "sqrt", "square")), X, y)
    assert len(calls) == 3


def test_a_law_whose_function_changes_sign_gets_its_index_block():
    """-p B cos(theta) (Feynman II.15.4) has no majority sign, so no log fit of y with one sign;
    the scan of log|y| on every nonzero row finds theta and the outer monomial p B, and the
    block c p B cos(b theta) is proposed (it was missed by the search at 30 s before)."""
    rng = np.random.default_rng(2)
    X = np.stack([rng.uniform(1, 5, 3000), rng.uniform(1, 5, 3000), rng.uniform(0, 5, 3000)],
                 axis=1)
    y = -X[:, 0] * X[:, 1] * np.cos(X[:, 2])
    assert structure.log_target(y) is None
    ks, a, r2 = structure.single_indices(X, y, absolute=True)[0]
    assert tuple(ks) == (0, 0, 1) and r2 >= structure.SUPPORT
    assert np.allclose(a[:2], 1.0, atol=0.05)
    assert structure.single_indices(X, y)[0][2] < structure.SUPPORT  # (h(theta) alone: no)
    structure._MEMO.clear()
    blocks = [to_source(b) for b in structure.building_blocks(_grammar(3), X, y)]
    assert "(* (* x0 x1) (* a (cos (* b x2))))" in blocks
    r2, size = _search(X, y, True, 40)
    assert r2 > 0.999999


def _indices_by_their_rules(d):
    # the definition of structure._index_exponents, every exponent vector tried in turn
    import itertools
    import math
    values = (-2, -1, 0, 1, 2) if d <= 4 else (-1, 0, 1)
    most = structure.MAX_TERMS + (1 if d <= 7 else 0)
    out = []
    for ks in itertools.product(values, repeat=d):
        nz = [k for k in ks if k]
        if nz and nz[0] > 0 and len(nz) <= most and math.gcd(*[abs(k) for k in nz]) == 1:
            out.append(ks)
    return tuple(out)


@pytest.mark.parametrize("d", range(1, 11))
def test_the_index_scan_tries_every_index_of_its_rules_in_their_order(d):
    assert structure._index_exponents(d) == _indices_by_their_rules(d)


@pytest.mark.parametrize("d", [13, 20, 60, 400])
def test_the_index_scan_of_many_inputs_is_bounded(d):
    # (every exponent vector of 3^d was enumerated: 20 inputs took ~25 minutes before the scan)
    ks = structure._index_exponents(d)
    assert 0 < len(ks) <= structure.MAX_INDICES and len(set(ks)) == len(ks)
    assert all(len(k) == d and next(v for v in k if v) > 0 for k in ks)
    singles = [k for k in ks if sum(1 for v in k if v) == 1]
    assert len(singles) == d  # (each input alone is always an index)


def test_single_indices_sort_tied_points_as_a_stable_sort_does():
    # (points of equal z, from inputs with few values, are ordered as they come: the running
    # mean along z depends on that order, and numpy's faster sort is not stable)
    rng = np.random.default_rng(7)
    X = np.stack([rng.integers(1, 4, 600), rng.integers(1, 3, 600), rng.uniform(1, 2, 600)],
                 axis=1).astype(float)
    lx = np.log(X)
    ks = structure._index_exponents(3)
    orders = structure._orders(lx, None, ks)
    for k, order in zip(ks, orders):
        np.testing.assert_array_equal(order, np.argsort(lx @ np.asarray(k, float), kind="stable"))


def _backfit_alone(order, t, wt, A, P, w, fit_a):
    # (one order's fit as single_indices made it one order at a time: running sums along the
    # order, window sums from clamped window starts, h scattered back to the points)
    n = t.size
    lo = np.clip(np.arange(n) - w // 2, 0, n - w)

    def mean(values, ws):
        sums = np.concatenate([[0.0], np.add.accumulate(values * ws)])
        mass = np.concatenate([[0.0], np.add.accumulate(ws)])
        mass = mass[lo + w] - mass[lo]
        return (sums[lo + w] - sums[lo]) / np.where(mass > 0, mass, 1.0)

    h, coef, r = np.empty(n), None, t
    if fit_a:
        r = t - A @ (P @ t)
        for _ in range(2):
            h[order] = mean(r[order], wt[order])
            coef = P @ (t - h)
            r = t - A @ coef
    h[order] = mean(r[order], wt[order])
    return float(np.sum(wt * (r - h) ** 2)), coef


def test_single_indices_fit_many_orders_at_once_as_each_alone():
    # (the backfits of a block of orders run at once, on 2-D arrays: each order's residual sum
    # and coefficients must be the bits of its fit alone, whatever the block, or a search's
    # building blocks and their order would depend on the batching)
    X = _X(700, 4, seed=3)
    y = X[:, 0] * np.exp(-X[:, 1] * X[:, 2] / X[:, 3])
    y *= 1 + 0.01 * np.random.default_rng(3).normal(size=y.size)
    rows, t, wt = structure.log_target(y)
    lx = np.log(X[rows])
    A = np.concatenate([np.ones((t.size, 1)), lx], axis=1)
    sw = np.sqrt(wt)
    P = np.linalg.pinv(A * sw[:, None]) * sw
    orders = structure._orders(lx, None, structure._index_exponents(4)[:40])
    w = max(5, t.size // 40)
    for fit_a in (True, False):
        rss, coefs = structure._backfits(orders, t, wt, A, P, structure._RunningMean(t.size, w),
                                         fit_a)
        for i in (0, 17, 39):
            one, coef = _backfit_alone(orders[i], t, wt, A, P, w, fit_a)
            assert rss[i] == one
            assert (coefs is None) == (coef is None)
            assert coef is None or np.array_equal(coefs[i], coef)


def test_an_additive_law_among_sixty_inputs_is_found():
    # (the sum's fit costs ~ its terms^5: over 59 free inputs it took minutes; it now takes the
    # 16 of the largest exponents in the log fit)
    X = _X(2000, 60, 1.0, 3.0, seed=1)
    y = X[:, 0] * (X[:, 1] ** 2 + X[:, 2] ** 2)
    laws = structure.additive_laws(X, y)
    assert any(outer[0] == 1.0 and sorted(terms) == [(1, 2), (2, 2)] and r2 > 0.999999
               for outer, terms, _, _, r2 in laws)


def test_a_law_of_three_of_twenty_inputs_is_found_from_its_building_blocks():
    # (the data's analysis enumerated 3^20 exponent vectors: the search hung before its first
    # candidate; with 16 inputs it spent a 10 s budget there and calibrated nothing)
    X = _X(500, 20, 1.0, 3.0, seed=2)
    y = X[:, 0] * X[:, 1] / X[:, 2] ** 2
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=64, random_state=0).fit(X, y)
    assert m.score(X, y) > 0.999999


def test_the_power_law_of_large_data_is_fitted_on_at_most_power_rows(monkeypatch):
    # (its log fit read every training row: ~2 s and 300 MB on 10^6 rows of 9 inputs)
    X = _X(250_000, 3, seed=4)
    y = 1.5 * X[:, 0] ** 2 / X[:, 1] * np.sqrt(X[:, 2])
    shapes, real = [], structure._lstsq
    monkeypatch.setattr(structure, "_lstsq", lambda A, b: shapes.append(A.shape) or real(A, b))
    ks, r2 = structure.power_law(X, y)
    np.testing.assert_allclose(ks, [2, -1, 0.5], atol=1e-9)
    assert r2 == pytest.approx(1.0) and shapes == [(structure.POWER_ROWS, 4)]
    small = X[:5000]  # (fewer rows: every one, as before)
    structure.power_law(small, y[:5000])
    assert shapes[-1] == (5000, 4)


def test_the_analysis_runs_on_one_blas_thread_and_gives_the_threads_back(monkeypatch):
    """While a search runs, its own threads and worker processes hold the cores: the analysis's
    small matrix products run on one BLAS thread (numpy's default is a thread a core, which only
    wait on the search's), and the caller's limit is back afterwards; data of one input (no
    analysis) leave BLAS alone."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("numpy's BLAS is not one threadpoolctl controls")
    seen = []
    real = structure._building_blocks
    monkeypatch.setattr(structure, "_building_blocks",
                        lambda *a: seen.append(blas_threads()) or real(*a))
    structure._MEMO.clear()
    X = _X(300, 3, seed=7)
    y = 1.5 * X[:, 0] * X[:, 1] / X[:, 2]
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert structure.building_blocks(_grammar(3), X, y)
        assert blas_threads() == [2] * len(seen[0])
        structure.building_blocks(_grammar(1), X[:, :1], y)
    assert seen == [[1] * len(seen[0]), [2] * len(seen[0])]
