"""The co-search's mechanisms for small symbolic-regression data: input shifts, extension by a
function of the model's own part, refits from many starts, ranking by the worse split."""
import math

import numpy as np
import pytest
from ndvm._core._core import population_fold

import ndvm
from ndvm.cosearch import grammar as gp
from ndvm.cosearch.rounds import _Fittest, _fittest
from ndvm.cosearch.select import fitness
from ndvm.cosearch.sexpr import to_source, to_tree
from ndvm.cosearch.tasks import Task

P = ("a", "b", "c", "d", "f", "g")


def _only(kind, **kw):
    g = gp.Grammar(inputs=("x0", "x1"), params=P, loop=False, **kw)
    g.mutation_rates = {k: float(k == kind) for k in g.mutation_rates}
    return g


def test_shift_rewrites_an_input_as_a_fitted_shift_scale_or_square():
    g = _only("shift")
    rng = np.random.default_rng(0)
    tree = to_tree("(* x0 (sin x1))")
    kinds = set()
    for _ in range(200):
        child = to_source(gp.mutate(rng, g, tree))
        for form in ("(+ {p} {x})", "(* {p} {x})", "(square (+ {p} {x}))"):
            if any(form.format(p=p, x=x) in child for p in P for x in ("x0", "x1")):
                kinds.add(form)
    assert kinds == {"(+ {p} {x})", "(* {p} {x})", "(square (+ {p} {x}))"}


def test_shift_of_a_part_shifts_every_input_in_it():
    g = gp.Grammar(inputs=("x0", "x1"), params=P)
    part = gp._shift_inputs(to_tree("(sin (* x0 x1))"), g)
    assert to_source(part) == "(sin (* (+ a x0) (+ a x1)))"
    # the simplifier gives each shift its own parameter
    from ndvm.cosearch.simplify import canonicalize
    assert to_source(canonicalize(part, P)) == "(sin (* (+ a x0) (+ b x1)))"


def test_shift_without_inputs_falls_back_to_a_subtree_mutation():
    g = _only("shift")
    child = gp.mutate(np.random.default_rng(1), g, to_tree("(sin a)"))
    assert child != to_tree("(sin a)")


def test_extend_adds_a_function_of_one_of_the_models_own_parts():
    g = _only("extend")
    rng = np.random.default_rng(2)
    tree = to_tree("(* x0 x1)")
    wanted = {f"({u} (* x0 x1))" for u in g.unary}
    hits = 0
    for _ in range(300):
        child = gp.mutate(rng, g, tree)
        assert child[1] == tree  # the model itself is kept, a term is added or multiplied in
        hits += any(w in to_source(child[2]) for w in wanted)
    assert hits > 10


def test_fitness_is_the_worse_split_and_ranks_lucky_heldout_fits_last():
    lucky = {"id": 1, "proposed": "u", "model": "u", "train_error": 9.0, "heldout_error": 0.01, "size": 9}
    honest = {"id": 2, "proposed": "v", "model": "v", "train_error": 0.35, "heldout_error": 0.47, "size": 3}
    assert fitness(lucky) == 9.0 and fitness(honest) == 0.47
    assert [r["id"] for r in _fittest([lucky, honest])] == [2, 1]


def test_fitness_is_max_of_the_two_errors_nan_and_ties_included():
    values = [0.5, 0.25, 0.5, math.inf, -math.inf, math.nan, 0.0, -0.0, 3]
    for tr in values:
        for ho in values:
            got = fitness({"train_error": tr, "heldout_error": ho})
            want = max(tr, ho)
            assert got is want or (got == want and type(got) is type(want)), (tr, ho)
    with pytest.raises(TypeError):
        fitness({"train_error": None, "heldout_error": 0.5})


def test_population_keeps_one_record_per_model_its_best_fit():
    recs = [{"id": i, "proposed": s, "model": s, "train_error": e, "heldout_error": e}
            for i, (s, e) in enumerate([("m", 2.0), ("m", 1.0), ("n", 1.5)])]
    assert [r["id"] for r in _fittest(recs)] == [1, 2]


def test_a_population_folded_a_round_at_a_time_is_the_fittest_of_all_it_met():
    rng = np.random.default_rng(4)
    for trial in range(100):
        n = int(rng.integers(1, 400))
        recs = [{"id": i, "model": f"m{rng.integers(0, 90)}",
                 "train_error": float(rng.integers(0, 30) / 4),
                 "heldout_error": float(rng.choice([rng.integers(0, 30) / 4, math.inf]))}
                for i in range(n)]
        if trial % 10 == 0:  # (a NaN fitness: ranked as sorted ranks it)
            recs[int(rng.integers(0, n))]["train_error"] = math.nan
        kept, expected, at = _Fittest(), [], 0
        while at < n:
            step = int(rng.integers(1, 20))
            kept.add(recs[at:at + step])
            expected = _fittest(expected + recs[at:at + step])
            at += step
            assert [r["id"] for r in kept.records] == [r["id"] for r in expected], trial


def _fittest_by_sorting(pool, most):
    """The ``most`` records of lowest fitness, one per model (its first in sorted order)."""
    out, models = [], set()
    for r in sorted(pool, key=fitness):
        if r["model"] not in models:
            models.add(r["model"])
            out.append(r)
            if len(out) == most:
                break
    return out


def test_population_fold_is_the_fittest_by_sorting_for_any_limit():
    # (ties in fitness, models met again fitter and less fit, a limit the population fills and
    # passes, records folded one at a time or a round at a time)
    rng = np.random.default_rng(6)
    for trial in range(200):
        most = int(rng.integers(1, 9))
        n = int(rng.integers(1, 60))
        recs = [{"id": i, "model": f"m{rng.integers(0, 12)}",
                 "train_error": float(rng.integers(0, 6) / 4),
                 "heldout_error": float(rng.integers(0, 6) / 4)} for i in range(n)]
        out, keys, models, at = [], [], {}, 0
        while at < n:
            step = int(rng.integers(1, 6))
            part = recs[at:at + step]
            population_fold(out, keys, models, [fitness(r) for r in part], part, most)
            at += step
            want = _fittest_by_sorting(recs[:at], most)
            assert [r["id"] for r in out] == [r["id"] for r in want], trial
            assert keys == [fitness(r) for r in out]
            assert models == {r["model"]: fitness(r) for r in out}
    with pytest.raises(ValueError, match="2 fitnesses for 1 records"):
        population_fold([], [], {}, [0.5, 0.25], [recs[0]], 4)
    out, keys, models = [], [], {}
    population_fold(out, keys, models, [fitness(recs[0])], [recs[0]], 0)  # (no room)
    assert out == [] and keys == [] and models == {}


def _keijzer11(seed=1):
    rng = np.random.default_rng(1000 + seed)
    X = rng.uniform(-3, 3, (20, 2))
    y = X[:, 0] * X[:, 1] + np.sin((X[:, 0] - 1) * (X[:, 1] - 1))
    inputs = {"x0": X[:, 0].copy(), "x1": X[:, 1].copy()}
    return Task.from_arrays("k11", inputs, y, heldout=6, seed=0, params=P,
                            fit={"optimizer": "lm", "steps": 30, "starts": 4}, loops=False,
                            threshold=None, budget_seconds=None)


def test_refit_recovers_a_right_structure_its_default_starts_miss(tmp_path):
    """With 4 starts from normal(0, 0.3) LM misses (x0-1)(x1-1) in keijzer 11's data; the refit of
    the population's leader from 16 wider starts finds it."""
    true = "(+ (* x0 x1) (* a (sin (* (+ b x0) (+ c x1)))))"
    fillers = ["(* x0 x1)", "(+ x0 x1)", "(* a x0)", "(sin x0)"]
    task = _keijzer11()

    def run(refits):
        f = tmp_path / f"c{refits}.jsonl"
        f.write_text("".join(f'{{"src": "{s}"}}\n' for s in [true] + fillers))
        return ndvm.search(task, proposer="replay", candidates=[str(f)], batch=1, workers=1,
                           refits=refits)

    plain = run(0)
    first = next(r for r in plain.records if r["model"].startswith("(+ (* a (sin"))
    assert first["train_error"] > 1e-3  # the default starts miss it (the premise)
    res = run(1)
    refits = [r for r in res.records if r["proposer"] == "refit"]
    assert refits and refits[0]["refit_of"] == first["id"]
    assert refits[0]["status"] == "ok" and refits[0]["train_error"] < 1e-12
    assert refits[0]["model"] == first["model"]
    assert res.best["model"] in (first["model"], "(+ (* x0 x1) (sin (* (+ -1.0 x0) (+ -1.0 x1))))")
    assert res.best["mse_all"] < 1e-12
    # every model is refitted once, and a search without refits records none
    assert len({r["refit_of"] for r in refits}) == len(refits)
    assert not any(r["proposer"] == "refit" for r in plain.records)
    assert all(math.isfinite(r["heldout_error"]) for r in refits)


def test_every_returned_model_is_simplified():
    """The front's models are canonical (canonicalizing changes nothing) and the chosen model
    is a fixpoint of the simplifier (a snap may write integers as literals)."""
    from ndvm.cosearch.simplify import canonicalize, simplify
    from ndvm.estimator import PARAMS
    rng = np.random.default_rng(0)
    X = rng.uniform(0.1, 3, (40, 2))
    y = 2.5 * np.exp(-(X[:, 0] - 1) ** 2) / (1.2 + X[:, 1])
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=600, random_state=0).fit(X, y)
    for r in m.result_.front:
        assert to_source(canonicalize(to_tree(r["model"]), PARAMS)) == r["model"]
    assert to_source(simplify(to_tree(m.program_), PARAMS)) == m.program_


def test_extend_may_shift_the_inputs_of_the_part_it_reuses():
    """(* x0 x1) extended by u((x0 + a)(x1 + b)): the keijzer 11 and Vladislavleva 7 form."""
    g = _only("extend")
    rng = np.random.default_rng(3)
    tree = to_tree("(* x0 x1)")
    shifted = {f"({u} (* (+ a x0) (+ a x1)))" for u in g.unary}
    hits = sum(any(w in to_source(gp.mutate(rng, g, tree)) for w in shifted) for _ in range(300))
    assert hits > 5


def test_extend_adds_multiplies_and_divides():
    g = _only("extend")
    rng = np.random.default_rng(4)
    heads = {gp.mutate(rng, g, to_tree("(* x0 x1)"))[0] for _ in range(200)}
    assert heads == {"+", "*", "/"}
    g.binary = ("+", "-", "*")  # no division in the grammar: none in an extension either
    heads = {gp.mutate(rng, g, to_tree("(* x0 x1)"))[0] for _ in range(200)}
    assert heads == {"+", "*"}


def test_shift_may_make_an_input_a_ratio_or_product_with_another():
    g = gp.Grammar(inputs=("x0", "x1"), params=P)
    rng = np.random.default_rng(5)
    forms = {to_source(gp.shifted(rng, g, "x0")) for _ in range(300)}
    assert "(/ x0 x1)" in forms and "(* x0 x1)" in forms
    one = gp.Grammar(inputs=("x",), params=P)  # one input: no ratio to draw
    assert all("x0" not in to_source(gp.shifted(rng, one, "x")) for _ in range(100))


def test_small_programs_hold_products_of_two_scaled_features_of_one_input():
    g = gp.Grammar(inputs=("x",), params=P, loop=False)
    small = [to_source(t) for t in gp.small_programs(g)]
    assert "(* a (cos (* b x)) (exp (* c x)))" in small  # exp(-0.3x) cos(2x) in one step
    assert "(* a (cos (* b x)) (cos (* c x)))" not in small  # (u < v: each pair once)


def test_the_shape_library_holds_separable_products_of_response_shapes():
    g = gp.Grammar(inputs=("x0", "x1"), params=P, loop=False)
    shapes = [to_source(t) for t in gp.separable_shapes(g)]
    # the normal density in a ratio, with its 1/sigma (Feynman I.6.2)
    assert "(/ (* a (exp (* b (square (/ x0 x1))))) x1)" in shapes
    # a shifted Gaussian bump over a rational one (Vladislavleva 1)
    assert "(* a (exp (* b (square (+ c x0)))) (/ 1.0 (+ d (square (+ f x1)))))" in shapes
    assert "(* a (pow x0 b) (pow x1 d))" in shapes  # a power law in each input
    assert "(* a (exp (* b (square (* x0 x1)))))" in shapes  # products of two inputs
    assert len(shapes) == len(set(shapes))
    # bounded with more inputs: ratios but no products of inputs beyond two
    g3 = gp.Grammar(inputs=("x0", "x1", "x2"), params=P, loop=False)
    shapes3 = [to_source(t) for t in gp.separable_shapes(g3)]
    assert len(shapes3) < 1500 and not any("(* x0 x1)" in s for s in shapes3)
    assert not gp.separable_shapes(gp.Grammar(inputs=("x",), params=P[:4]))  # too few names


def test_the_enumerations_before_evolution_are_cut_at_their_first_so_many():
    # (the shape library grows as d^3: on 60 inputs 3 GB of trees before the first candidate,
    # a search of 150 inputs killed for its memory; the small models as d^2)
    wide = gp.Grammar(inputs=tuple(f"x{i}" for i in range(40)), params=P, loop=False)
    for enumerate_them, most in ((gp.small_programs, gp.SMALL_MAX),
                                 (gp.separable_shapes, gp.LIBRARY_MAX)):
        cut = [to_source(t) for t in enumerate_them(wide)]
        longer = [to_source(t) for t in enumerate_them(wide, limit=most + 100)]
        assert len(cut) == most and len(longer) == most + 100 and longer[:most] == cut
        assert len(set(longer)) == len(longer)
    narrow = gp.Grammar(inputs=tuple(f"x{i}" for i in range(9)), params=P, loop=False)
    for enumerate_them in (gp.small_programs, gp.separable_shapes):  # (all of them: not cut)
        assert len(enumerate_them(narrow)) == len(enumerate_them(narrow, limit=None))


def test_a_search_of_one_hundred_and_fifty_inputs_finds_a_law_of_three():
    X = np.random.default_rng(0).uniform(1.0, 3.0, (1000, 150))
    y = X[:, 0] * X[:, 1] / X[:, 2] ** 2
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=64, random_state=0).fit(X, y)
    assert m.score(X, y) > 0.999999


def test_the_shape_library_is_scored_but_never_a_parent():
    from types import SimpleNamespace

    from ndvm.cosearch.proposers import Mutate
    g = gp.Grammar(inputs=("x0", "x1"), params=P, loop=False)
    task = SimpleNamespace(objective="mse", inputs={"x0": 0, "x1": 0}, seeds=())
    state = SimpleNamespace(grammar=g, task=task, seen=set(), front=[], population=[])
    m = Mutate(seed=0, blocks=False)  # (the fake task has no data to draw blocks from)
    n_small = len({s for s in (m.propose(10_000, state))})  # small models, then the library
    assert m._island and n_small > len(m._island)
    lib = next(iter(m._island))
    rec = {"proposed": lib, "model": lib, "size": 9, "train_error": 1e-9, "heldout_error": 1e-9}
    other = {"proposed": "(* a x0)", "model": "(* a x0)", "size": 3, "train_error": 1.0, "heldout_error": 1.0}
    state.front, state.population = [rec, other], [rec, other]
    trees, _ = m._parents(state)
    assert [t.tree for t in trees] == [to_tree("(* a x0)")] * 2 and m.n_front == 1


def test_the_shape_library_finds_the_normal_density_in_a_ratio():
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 3, (100, 2))
    y = np.exp(-(X[:, 0] / X[:, 1]) ** 2 / 2) / (np.sqrt(2 * np.pi) * X[:, 1])
    m = ndvm.SymbolicRegressor(budget=None, max_candidates=700, random_state=0).fit(X, y)
    Xt = rng.uniform(1, 3, (500, 2))
    yt = np.exp(-(Xt[:, 0] / Xt[:, 1]) ** 2 / 2) / (np.sqrt(2 * np.pi) * Xt[:, 1])
    assert m.score(Xt, yt) > 0.99999 and m.size_ <= 12, (m.program_, m.score(Xt, yt))


def test_front_parents_are_drawn_uniformly_at_front_rate():
    """A front member that loses every tournament on error is still a parent at front_rate."""
    from ndvm.cosearch import grammar as gp
    from ndvm.cosearch.proposers import Mutate
    errors = [100.0, 1.0, 1.0, 1.0, 1.0]  # (the first is the front's one member)
    breed = gp.breeder(gp.Grammar(inputs=["x0"], params=["a"]))

    def picks(rate):
        m = Mutate(seed=0, front_rate=rate)
        return sum(breed.pick(m.rng, errors, n_front=1, front_rate=m.front_rate,
                              tournament=m.tournament) == 0 for _ in range(2000))

    assert picks(0.0) < 40  # only when all three tournament draws are it: (1/5)^3 of 2000
    assert 400 < picks(0.25) < 600
    assert picks(1.0) == 2000


def _cos_task():
    x = np.linspace(0.0, 6.0, 40)
    return Task.from_arrays("cos", {"x": x}, np.cos(2.5 * x), heldout=10, seed=0, params=P,
                            fit={"optimizer": "lm", "steps": 30, "starts": 4}, loops=False,
                            threshold=None, budget_seconds=None)


def test_start_scales_reach_a_frequency_the_default_starts_miss(tmp_path):
    """cos(a x) with a = 2.5: four LM starts from normal(0, 0.3) end in a local optimum; starts
    drawn at scales 0.3, 1 and 3 reach it. Deterministic for the search's seed."""
    f = tmp_path / "c.jsonl"
    f.write_text('{"src": "(cos (* a x))"}\n')

    def run(options):
        return ndvm.search(_cos_task(), proposer="replay", candidates=[str(f)], batch=1,
                           workers=1, fit_options=options).records[0]

    plain = run(None)
    assert plain["train_error"] > 1e-3  # the premise: the default starts miss it
    wide = run({"start_scales": (0.3, 1.0, 3.0)})
    assert wide["train_error"] < 1e-12
    assert abs(abs(wide["params"]["a"]) - 2.5) < 1e-6
    assert run({"start_scales": (0.3, 1.0, 3.0)})["params"] == wide["params"]


def test_a_batchs_starts_are_drawn_as_one_draw_per_parameter_in_batch_order(monkeypatch):
    """The starts of a batch's candidates (start_scales) are drawn in one call for the batch:
    the same numbers, in the same order, as one normal(0, scales) per parameter of each
    candidate with parameters, and the stream then goes on where those calls left it."""
    from ndvm.cosearch.score import Scorer, _Calibration

    x = np.linspace(0.0, 6.0, 40)
    task = Task.from_arrays("cos", {"x": x}, np.cos(2.5 * x), heldout=10, seed=0, params=P,
                            fit={"optimizer": "lm", "steps": 5, "starts": 4,
                                 "start_scales": (0.3, 1.0, 3.0)},
                            loops=False, threshold=None, budget_seconds=None)
    scorer = Scorer(task, workers=1)
    begun = {}

    class Fitting:
        def begin(self, progs, per_candidate=None, deadline=None, evaluated=(), starts=None):
            begun.update(progs=progs, per_candidate=per_candidate, evaluated=evaluated,
                         starts=starts)

    monkeypatch.setattr(scorer, "fitting", Fitting)
    items = [("p0", ("a", "b")), ("p1", ()), ("p2", ("c",)), ("p3", ("a", "b", "c"))]
    _Calibration(scorer, items)
    rng, scales = np.random.default_rng(0), np.resize([0.3, 1.0, 3.0], 4)
    want = [{n: rng.normal(0.0, scales) for n in ps} for _, ps in items if ps]
    assert begun["progs"] == ["p0", "p2", "p3"] and begun["evaluated"] == ["p1"]
    assert begun["per_candidate"] is None  # (each candidate's rows of the one draw, stacked)
    got = [dict(zip(*st)) for st in begun["starts"]]
    assert [list(g) for g in got] == [list(w) for w in want]
    assert all(np.array_equal(g[n], w[n]) for g, w in zip(got, want) for n in w)
    assert scorer.draws.random() == rng.random()


def test_the_front_counts_once_when_the_population_is_the_same_list():
    from ndvm.cosearch.proposers import Mutate
    from ndvm.cosearch.rounds import SearchState

    g = gp.Grammar(inputs=("x0",), params=("a",))
    task = Task.from_arrays("t", {"x0": np.linspace(0.0, 1.0, 20)}, np.linspace(0.0, 1.0, 20),
                            heldout=5, seed=0, params=("a",), threshold=None,
                            budget_seconds=None)
    state = SearchState(task=task, grammar=g)
    members = [{"proposed": "(* a x0)", "model": "(* a x0)", "size": 3, "train_error": 1.0,
                "heldout_error": 1.0}]
    state.front = state.population = members  # (one list object for both)
    m = Mutate(seed=0)
    trees, errors = m._parents(state)
    assert len(trees) == len(errors) == 2 and m.n_front == 1
