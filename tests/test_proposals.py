"""The mutate proposer's fast paths change nothing it proposes: its seeded sequence is the
recorded one, and its long-lived caches (the holding Simplifier, the canonical forms by content)
give what a fresh computation gives, within their bounds."""
import hashlib
import math

import numpy as np
import pytest

from ndvm._core import _core
from ndvm.cosearch import grammar as gp
from ndvm.cosearch import proposers, rounds
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.sexpr import size, skeleton, to_source, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.tasks import get_task

PARENTS = ["(* a (exp (* b x)))", "(+ a (* b (cos (* c x))))", "(* a (sin x))", "(/ a (+ b x))"]


def _proposals(seed, batches=6, n=50):
    """300 genetic children of a fixed front on the damped task (no library), with a population
    that grows from them batch by batch."""
    task = get_task("damped")
    g = Grammar(inputs=tuple(task.inputs), params=tuple(task.params), loop=task.loops)
    prop = proposers.Mutate(seed=seed)
    prop._small, prop._shapes = [], []  # (no library: every proposal is a genetic child)
    state = rounds.SearchState(task=task, grammar=g)
    state.front = [{"proposed": s, "model": s, "size": i + 3, "train_error": 1.0 / (i + 1),
                    "heldout_error": 1.0 / (i + 1)} for i, s in enumerate(PARENTS)]
    out = []
    for _ in range(batches):
        srcs = prop.propose(n, state)
        for s in srcs:
            state.seen.add(s)
        state.population = state.population + [
            {"proposed": s, "model": s, "size": prop.made[s][2], "train_error": 1.0 + len(s) % 7,
             "heldout_error": 1.0 + len(s) % 5} for s in srcs[:10]]
        out += srcs
    return out


def test_the_seeded_proposals_are_the_recorded_ones():
    # recorded on main at e205840 (before the proposer's fast paths): a seed proposes what it did
    recorded = {0: ("af445a67e4275a6a0409ef4ac5e66db4d785f9c6bf9082f296b643aae92333a8",
                    "(* (+ a (* b (cos (* c x)))) (sqrt (+ a (cos (* c x)))))"),
                1: ("a481e6c50b0a49f7b0d078640e675f7664999ba26352c6a32bb52cac6a3bfe70", "a")}
    for seed, (digest, first) in recorded.items():
        got = _proposals(seed)
        assert len(got) == 300 and got[0] == first
        assert hashlib.sha256("\n".join(got).encode()).hexdigest() == digest


def _children(seed, n):
    """Random trees as a search makes them: children that share lists with their parents."""
    rng = np.random.default_rng(seed)
    g = Grammar(params=("a", "b", "c"))
    pool = [to_tree(s) for s in PARENTS] + [gp.grow(rng, g) for _ in range(8)]
    out = []
    for _ in range(n):
        r = rng.random()
        a = pool[int(rng.integers(len(pool)))]
        if r < 0.3:
            child = gp.crossover(rng, g, a, pool[int(rng.integers(len(pool)))])
        elif r < 0.4:
            child = gp.grow(rng, g)
        else:
            child = gp.mutate(rng, g, a)
        out.append(child)
        pool.append(child)
    return out


def _fresh(tree, params):
    """The canonical entry of ``tree`` computed from nothing (a new Simplifier, sexpr's skeleton)."""
    try:
        t, src, n = Simplifier(params).canonical_form(tree)
    except TooManyParameters:
        return None
    return t, src, n, skeleton(t, params)


def _held_canonical(simp, tree):
    try:
        return simp.canonical_form(tree, skeleton=True)
    except TooManyParameters:
        return None


def test_a_holding_simplifier_gives_what_a_fresh_one_gives():
    # every parent held, as the proposer holds them: each child's shared lists are met by identity
    params = ("a", "b", "c")
    held = Simplifier(params)
    trees = _children(0, 600)
    for i, tree in enumerate(trees + trees[::7]):
        if type(tree) is list and i % 3 == 0:
            held.hold(tree)
        assert _held_canonical(held, tree) == _fresh(tree, params)
    assert held.canonical_form.__self__.n_held > 0
    assert any(_fresh(t, params) is None for t in trees)  # (both outcomes met)


def test_the_proposers_cached_canonical_forms_equal_uncached_ones(monkeypatch):
    monkeypatch.setattr(proposers, "_SIMPLIFIERS", {})
    params = ("a", "b", "c")
    trees = _children(1, 400)
    core = proposers._simplifier(params).core
    first = [proposers._canonical(t, params) for t in trees]
    made = core.n_entries_made  # (the measure of canonical forms computed: one a new content)
    assert 0 < made <= len(trees)
    again = [proposers._canonical(t, params) for t in trees]  # (cache hits)
    copies = [proposers._canonical(_copy(t), params) for t in trees]  # (new lists, same content)
    assert core.n_entries_made == made
    for t, a, b, c in zip(trees, first, again, copies):
        expect = _fresh(t, params)
        if expect is None:
            assert a is b is c is None
        else:
            assert a == b == c == expect and a[2] == size(a[0])


def _copy(t):
    return [_copy(x) for x in t] if isinstance(t, list) else t


def test_the_holding_simplifier_keeps_a_bounded_number_of_lists(monkeypatch):
    monkeypatch.setattr(_core, "SIMPLIFY_HOLD_LIMIT", 50)
    params = ("a", "b", "c")
    held = Simplifier(params)
    core = held.canonical_form.__self__
    peak = 0
    for tree in _children(2, 300):
        if type(tree) is list:
            held.hold(tree)
        assert _held_canonical(held, tree) == _fresh(tree, params)  # (after each forgetting too)
        peak = max(peak, core.n_held)
    assert 0 < peak <= 50
    assert Simplifier(params).canonical_form.__self__.n_held == 0  # (holds only when asked)


def test_the_canonical_entries_survive_the_cores_memo_resets():
    # a long-lived Simplifier forgets its Nodes, contents and held lists many times in a search
    # (its memo is bounded to stay within a core's cache): what it gives after each forgetting,
    # through the held parents and the entries kept by content, is what a fresh one gives
    params = ("a", "b", "c")
    held = Simplifier(params)
    core = held.canonical_form.__self__
    trees = _children(3, 14000)
    for i, tree in enumerate(trees):
        if type(tree) is list and i % 4 == 0:
            held.hold(tree)
        entry = core.entry(tree)
        if i % 7 == 0:
            assert entry == _fresh(tree, params)
    assert core.n_resets >= 2


def _python_children(rng, breed, g, n, out, made, seen, parents, errors, n_front, seeds, admits,
                     fresh=0.1, crossover=0.3, tournament=3, front_rate=0.25, tries=None):
    """The search's former Python loop over a round's children (Breeder.children replaced it);
    ``tries``: a list its number of children bred (kept or not) is appended to."""
    def pick():
        if n_front and rng.random() < front_rate:
            return parents[int(rng.integers(n_front))]
        best = rng.integers(len(parents))
        for _ in range(min(tournament, len(parents)) - 1):
            i = rng.integers(len(parents))
            if errors[i] < errors[best]:
                best = i
        return parents[best]

    bred = 0
    for _ in range(n * 20):
        if len(out) >= n:
            break
        bred += 1
        r = rng.random()
        if not parents or r < fresh:
            if seeds and rng.random() < 0.3:
                seed = seeds[rng.integers(len(seeds))]
                child = breed.mutate(rng, seed.tree, seed)
            else:
                child = breed.grow(rng)
        elif r < fresh + crossover and len(parents) > 1:
            a, b = pick(), pick()
            child = breed.crossover(rng, a.tree, b.tree, a, b)
        else:
            parent = pick()
            child = breed.mutate(rng, parent.tree, parent)
        canon = proposers._canonical(child, g.params)
        if canon is None or canon[2] > g.max_size or (admits is not None and not admits(canon[0])):
            continue
        if canon[1] in made or canon[1] in seen:
            continue
        out.append(canon[1])
        made[canon[1]] = canon
    if tries is not None:
        tries.append(bred)
    return out


def test_the_native_children_are_the_python_loops_draw_for_draw():
    g = Grammar(params=("a", "b", "c"))
    breed = gp.breeder(g)
    parents = [gp.Sites(to_tree(s)) for s in PARENTS]
    errors = [0.5, 0.1, 2.0, 0.3]
    seeds = [gp.Sites(to_tree("(* a (exp (* b x)))"))]
    seen = rounds.Seen()
    seen.add("(* a x)")

    def admits(tree):  # (a units-like filter: no sin anywhere)
        return "sin" not in str(tree)

    for settings in ({"fresh": 0.1, "crossover": 0.3}, {"fresh": 0.5, "crossover": 0.2},
                     {"fresh": 0.0, "crossover": 1.0, "tournament": 1, "front_rate": 0.6}):
        for use_seeds, use_admits, n_front in ((True, True, 2), (False, None, 0), (True, None, 4)):
            got, want, tries = [], [], []
            a, b = _core.Draws(np.random.default_rng(5)), _core.Draws(np.random.default_rng(5))
            made_a, made_b = {}, {}
            for _ in range(3):
                before = breed.n_tries
                breed.children(a, 40 + len(got), got, made_a, seen, proposers._simplifier(g.params).core,
                               parents, errors, n_front, seeds if use_seeds else [],
                               admits=admits if use_admits else None, **settings)
                _python_children(b, breed, g, 40 + len(want), want, made_b, seen, parents,
                                 errors, n_front, seeds if use_seeds else [],
                                 admits if use_admits else None, **settings, tries=tries)
                assert breed.n_tries - before == tries[-1]  # (the measure counts every child)
            assert got == want and made_a == made_b and len(got) >= 40
            assert a.random() == b.random()  # (the streams moved on alike)


def test_a_search_asks_for_its_grammars_breeder_once(monkeypatch):
    # (grammar.breeder reads the grammar's repr, a round's fixed cost were it asked every round;
    # a search's grammar does not change while it runs, and the next search's state asks again)
    import pickle
    from types import SimpleNamespace

    asked = []
    breeder = gp.breeder
    monkeypatch.setattr(proposers.gp, "breeder", lambda g: asked.append(g) or breeder(g))
    task = SimpleNamespace(objective="mse", inputs={"x": 0}, seeds=())

    def state(g):
        return SimpleNamespace(grammar=g, task=task, seen=set(), front=[], population=[])

    m = proposers.Mutate(seed=0, small=False)
    g, h = Grammar(params=("a", "b")), Grammar(params=("a", "b"), unary=("sin",))
    first = state(g)
    for _ in range(5):
        m.propose(16, first)
    assert asked == [g]
    second = state(h)  # (another search: its own grammar's operators)
    kids = {s for _ in range(5) for s in m.propose(16, second)}
    assert asked == [g, h] and not any(op in s for s in kids for op in ("cos", "exp", "log"))
    back = pickle.loads(pickle.dumps(m))  # (an island's next epoch: its state unpacked anew)
    back.propose(16, pickle.loads(pickle.dumps(second)))
    assert asked == [g, h, h]


def test_the_native_children_refuse_wrong_inputs():
    g = Grammar(params=("a", "b", "c"))
    breed = gp.breeder(g)
    simp = proposers._simplifier(g.params).core
    rng = _core.Draws(np.random.default_rng(0))
    parents = [gp.Sites(to_tree(s)) for s in PARENTS]
    with pytest.raises(ValueError, match="one error per parent"):
        breed.children(rng, 4, [], {}, set(), simp, parents, [1.0], 0, [])
    with pytest.raises(ValueError, match="n_front"):
        breed.children(rng, 4, [], {}, set(), simp, parents, [1.0] * 4, 5, [])
    with pytest.raises(ValueError, match="tournament"):
        breed.children(rng, 4, [], {}, set(), simp, parents, [1.0] * 4, 0, [], tournament=0)
    with pytest.raises(TypeError):  # (a parent that is not a tree's Sites: an error, no crash)
        breed.children(rng, 4, [], {}, set(), simp, ["(* a x)"] * 2, [1.0] * 2, 0, [],
                       fresh=0.0)
    with pytest.raises(TypeError):
        breed.children(rng, 4, [], {}, set(), "not a simplifier", parents, [1.0] * 4, 0, [])
    with pytest.raises(ValueError):
        breed.pick(rng, [1.0, 2.0], n_front=3)


def test_seen_names_sources_by_a_digest_that_is_the_same_everywhere(tmp_path):
    import os
    import pickle
    import subprocess
    import sys

    s = rounds.Seen()
    texts = ["", "x", "(* a x)", "(* a (exp (* b x)))", "é (+ a b)", "abcdefgh", "abcdefghi"]
    for t in texts:
        assert t not in s and s.add_new(t) and t in s and not s.add_new(t)
    assert len(s) == len(texts) and "(* a  x)" not in s
    back = pickle.loads(pickle.dumps(s))
    assert len(back) == len(texts) and all(t in back for t in texts) and "y" not in back
    # recorded digests: another process, and another version of ndvm, name a source alike
    assert [_core.source_digest(t) for t in ("", "(* a x)")] == [
        0xe658fbe07e8750d4, _core.source_digest("(* a x)")]
    code = ("from ndvm._core import _core; print(_core.source_digest('(* a (exp (* b x)))'))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=tmp_path, env={**os.environ, "PYTHONHASHSEED": "7"})
    assert int(other.stdout) == _core.source_digest("(* a (exp (* b x)))")
    with pytest.raises(TypeError, match="str"):
        s.add(1)
    with pytest.raises(TypeError, match="str"):
        assert 1 not in s
    with pytest.raises(ValueError, match="8 bytes"):
        _core._seen_from(b"123")
    # a lone surrogate (a JSON "\ud800" in a candidates file, an LLM's answer) has no UTF-8:
    # it is digested by its surrogates' own bytes, which no valid text's UTF-8 holds (it raised
    # UnicodeEncodeError, and the search with it)
    assert "\ud800" not in s and s.add_new("\ud800") and "\ud800" in s
    assert "\ud800\udc00" not in s and "\U00010000" not in s
    assert _core.source_digest("\ud800") == _core.source_digest("\ud800")


def test_a_seen_of_many_sources_grows_and_travels_whole():
    import pickle

    s = rounds.Seen()
    texts = [f"(* a{i} (exp x))" for i in range(20_000)]
    assert all(s.add_new(t) for t in texts) and len(s) == len(texts)
    assert not any(s.add_new(t) for t in texts[::97]) and len(s) == len(texts)
    back = pickle.loads(pickle.dumps(s))
    assert len(back) == len(texts) and all(t in back for t in texts)
    assert not any(f"(* b{i} (exp x))" in back for i in range(2_000))
    assert len(pickle.loads(pickle.dumps(rounds.Seen()))) == 0
    # the digest 0 (a source may name it, with a chance of 2**-64) is a digest like any other
    zero = _core._seen_from(b"\0" * 8 + (5).to_bytes(8, "little") + b"\0" * 8)
    assert len(zero) == 2 and sorted(_digests(zero)) == [0, 5]
    again = pickle.loads(pickle.dumps(zero))
    assert len(again) == 2 and sorted(_digests(again)) == [0, 5]


def test_a_seen_keeps_what_it_gained_since_its_mark():
    """``mark()`` then ``added()``: the digests added since, once each, in the packed form; a
    Seen of an earlier packing joined with them is the Seen."""
    s = rounds.Seen()
    assert s.added() == b""  # (nothing kept before a mark)
    s.add("(+ a x)")
    before = _seen_bytes(s)
    s.mark()
    assert s.added() == b""
    assert s.add_new("(* a x)") and not s.add_new("(+ a x)")
    s.add("(* a x)")
    s.add("(- a x)")
    assert len(s.added()) == 16  # (two new ones; those met before are not added)
    gained = s.added()
    whole = rounds.Seen.of(before + gained)
    assert len(whole) == 3 and all(t in whole for t in ("(+ a x)", "(* a x)", "(- a x)"))
    s.mark()  # (a new mark forgets what was kept)
    assert s.added() == b"" and len(s) == 3
    assert len(rounds.Seen.of(b"")) == 0
    with pytest.raises(ValueError, match="8 bytes"):
        rounds.Seen.of(b"1234")
    # an earlier packing brought up to date with what was added since: the same Seen
    old = rounds.Seen.of(before)
    old.mark()
    old.extend(gained + before)  # (one met before: once)
    assert len(old) == 3 and all(t in old for t in ("(+ a x)", "(* a x)", "(- a x)"))
    assert old.added() == b""  # (what it is given is not kept as added)
    old.extend(b"")
    with pytest.raises(ValueError, match="8 bytes"):
        old.extend(b"12345678" + b"1")
    assert len(old) == 3
    with pytest.raises(TypeError):
        old.extend("(+ a x)")


def _seen_bytes(seen):
    _, (packed,) = seen.__reduce__()
    return packed


def _digests(seen):
    packed = _seen_bytes(seen)
    return [int.from_bytes(packed[k:k + 8], "little") for k in range(0, len(packed), 8)]


def test_the_canonical_entry_is_the_canonical_form_and_says_when_it_cannot_be():
    params = ("a", "b")
    simp = Simplifier(params)
    tree = to_tree("(+ (* 2.0 x) (* 3.0 x))")
    t, src, n = simp.canonical_form(tree)
    assert simp.entry(tree) == (t, src, n, skeleton(t, params))
    assert simp.entry(tree) is simp.entry(_copy_tree(tree))  # (kept per content)
    with pytest.raises(TooManyParameters):  # (more parameters than names: None)
        simp.canonical_form(to_tree("(+ (sin a) (* b y) (* c z) (* a (sin y)))"))
    assert simp.entry(to_tree("(+ (sin a) (* b y) (* c z) (* a (sin y)))")) is None
    odd = ["-"]  # (outside the forms: the owner's fallback, else what the rules raised)
    with pytest.raises(IndexError):
        simp.entry(odd)
    simp.core.fallback = lambda tree: ("kept", "as grown", 0, "")
    assert simp.entry(odd) == ("kept", "as grown", 0, "")
    with pytest.raises(TypeError, match="dict"):  # (not a tree at all: raised, fallback or not)
        simp.entry(["+", "x", {"not": "an atom"}])


def test_children_hold_their_parents_only_when_asked():
    # (the children loop held every parent it drew: a caller's parent changed in place after
    # the call kept its old canonical form, and a tree sharing the list came back stale)
    params = ("a", "b", "c")
    breed = gp.breeder(Grammar(params=params))
    for hold in (False, True):
        simp = Simplifier(params).core
        tree = to_tree("(* a (exp (* b x)))")
        breed.children(_core.Draws(np.random.default_rng(0)), 1, [], {}, set(), simp,
                       [gp.Sites(tree)], [1.0], 0, [], fresh=0.0, crossover=0.0,
                       hold_parents=hold)
        tree[2][0] = "cos"
        got = simp.entry(["+", tree, "c"])[1]
        assert (got == "(+ a (* b (exp (* c x))))") if hold else (
            got == Simplifier(params).core.entry(["+", tree, "c"])[1]
            == "(+ a (* b (cos (* c x))))")


def test_children_survive_a_reset_of_their_simplifier_while_seen_is_asked():
    # (a child's canonical form is kept without its tree until it is known to be new; a Seen
    # whose test used the same Simplifier past a reset met "a canonical form outlived the
    # simplifier's memo": it is computed again)
    params = ("a", "b", "c")
    g = Grammar(params=params)
    breed = gp.breeder(g)
    parents = ["(* a (exp (* b x)))", "(+ a (* b (cos (* c x))))"]

    def bred(seen, simp):
        out, made = [], {}
        breed.children(_core.Draws(np.random.default_rng(3)), 5, out, made, seen, simp,
                       [gp.Sites(to_tree(p)) for p in parents], [1.0, 2.0], 0, [])
        return out, made

    simp = Simplifier(params).core
    extra = np.random.default_rng(9)

    class Resetting:
        def __contains__(self, src):
            before = simp.n_resets
            while simp.n_resets == before:
                simp.entry(gp.grow(extra, g))
            return False

    out, made = bred(Resetting(), simp)
    assert simp.n_resets >= 5
    want_out, want_made = bred(set(), Simplifier(params).core)
    assert out == want_out and all(made[s][1:] == want_made[s][1:] for s in out)
    # (the kept children's trees, made when read: here past the resets, by parsing their
    # sources; there from their canonical Nodes)
    assert all(made[s] == want_made[s] for s in out)


def test_a_kept_childs_entry_makes_its_tree_when_read_and_equals_the_simplifiers():
    # (a kept child's entry is a sequence whose tree is made when read: from its canonical
    # Node, or by parsing its source once the core was reset; the same tree either way, the
    # same entry as Simplifier.entry gives, and pickled as that tuple)
    import pickle

    params = ("a", "b", "c")
    g = Grammar(params=params)
    breed = gp.breeder(g)
    parents = [gp.Sites(to_tree(p)) for p in PARENTS]
    for reset in (False, True):
        simp = Simplifier(params).core
        out, made = [], {}
        breed.children(_core.Draws(np.random.default_rng(5)), 40, out, made, set(), simp,
                       parents, [0.5, 0.1, 2.0, 0.3], 0, [], hold_parents=True)
        # (a list's entry: an atom's is made whole, its tree the atom)
        assert len(out) == 40 and all(type(made[s]) is not tuple for s in out if s[0] == "(")
        if reset:
            before = simp.n_resets
            extra = np.random.default_rng(1)
            while simp.n_resets == before:
                simp.entry(gp.grow(extra, g))
        fresh = Simplifier(params).core
        for s in out:
            entry, want = made[s], fresh.entry(to_tree(s))
            assert len(entry) == 4 and entry[1] == s and tuple(entry) == want
            assert entry[0] is entry[0] and entry[0] == want[0] == to_tree(s)
            assert entry == want and pickle.loads(pickle.dumps(entry)) == want
            assert type(pickle.loads(pickle.dumps(entry))) is tuple
        # (a kept child met again by ``entry`` is the same tuple)
        assert all(simp.entry(to_tree(s))[1:] == made[s][1:] for s in out)


def test_a_kept_childs_tree_is_renamed_when_read_as_its_source_names_its_parameters():
    # (a child's canonical form keeps its source and skeleton, not its renamed tree: the tree
    # is renamed again from the form's Nodes when it is read, after later canonical forms
    # renamed other trees; each parameter its own name, or shared by name when the model
    # needs more occurrences than there are names)
    import re

    params = ("a", "b")
    g = Grammar(params=params)
    breed = gp.breeder(g)
    parents = ["(+ (* a x) (* a y) (* a (sin z)) (* b w))", "(* a (exp (* b x)) (cos (* a y)))"]
    simp = Simplifier(params).core
    out, made = [], {}
    breed.children(_core.Draws(np.random.default_rng(5)), 40, out, made, set(), simp,
                   [gp.Sites(to_tree(p)) for p in parents], [0.5, 0.1], 0, [],
                   hold_parents=True)
    assert sum(len(re.findall(r"\ba\b", s)) > 1 for s in out) >= 10  # (shared names)
    extra, n_resets = np.random.default_rng(2), simp.n_resets
    for _ in range(200):  # (other renamings in between, no reset)
        simp.entry(gp.grow(extra, g))
    assert simp.n_resets == n_resets
    fresh = Simplifier(params).core
    for s in out:
        assert made[s][0] == to_tree(s) == fresh.entry(to_tree(s))[0]
        assert tuple(made[s]) == fresh.entry(to_tree(s))
    # (a kept child that becomes a parent breeds from its renamed Nodes as from its tree)
    def bred(sites):
        got = []
        breed.children(_core.Draws(np.random.default_rng(8)), 30, got, {}, set(), simp, sites,
                       [1.0] * 6, 0, [])
        return got

    kept = bred([gp.Sites(made[s][0], made[s]) for s in out[:6]])
    assert len(kept) == 30 and kept == bred([gp.Sites(to_tree(s)) for s in out[:6]])


def test_a_simplifier_used_again_while_it_converts_a_tree_waits_to_reset():
    # (an atom whose comparison used the same Simplifier past its memo's limits reset it in the
    # middle of the conversion: the canonical form came back wrong, without a word)
    params = ("a", "b", "c")
    g = Grammar(params=params)
    tree = ["+", ["*", "a", "x"], ["*", "b", ["sin", "x"]], ["cos", "c"], 3, ["*", "a", "x"]]
    want = Simplifier(params).core.entry(_copy_tree(tree))
    probe, extra = Simplifier(params).core, np.random.default_rng(9)
    grown = 0
    while probe.n_resets == 0:  # (how many new trees take a Simplifier to its reset)
        probe.entry(gp.grow(extra, g))
        grown += 1
    core = Simplifier(params).core
    extra = np.random.default_rng(9)

    class Meddling(int):
        armed = True

        def __lt__(self, other):
            if Meddling.armed:
                Meddling.armed = False
                for _ in range(grown + 10):
                    core.entry(gp.grow(extra, g))
            return int.__lt__(self, other)

    assert core.entry([*tree[:4], Meddling(3), tree[5]]) == want
    assert core.n_resets == 0  # (it waited: the next call resets)
    assert core.entry(["*", "a", "y"])[1] == "(* a y)" and core.n_resets == 1


def test_a_fallback_that_is_not_an_entry_is_refused():
    simp = Simplifier(("a", "b"))
    simp.core.fallback = lambda tree: ("too", "short")
    with pytest.raises(TypeError, match="fallback returns .* not tuple of 2"):
        simp.entry(["-"])


def _copy_tree(t):
    return [_copy_tree(x) for x in t] if isinstance(t, list) else t


def test_the_parents_kept_from_the_last_round_are_what_a_fresh_proposer_finds():
    # Mutate keeps each parent's tree and tournament error by record from round to round: as
    # the front and population change (members replaced by new dicts, some re-made with the
    # same content), the parents are what a proposer with nothing kept finds
    task = get_task("damped")
    g = Grammar(inputs=tuple(task.inputs), params=tuple(task.params), loop=task.loops)
    state = rounds.SearchState(task=task, grammar=g)
    prop = proposers.Mutate(seed=0)
    rng = np.random.default_rng(5)
    models = PARENTS + [to_source(gp.grow(rng, g)) for _ in range(30)]

    def record(k):
        return {"proposed": models[k], "model": models[k], "size": size(to_tree(models[k])),
                "train_error": 1.0 + k % 3, "heldout_error": 0.5 + k % 5}

    for step in range(6):
        picks = rng.choice(len(models), size=12, replace=False)
        kept = [r for r in state.population if rng.random() < 0.5]
        state.population = kept + [record(int(k)) for k in picks]
        state.front = state.population[:3]
        trees, errors = prop._parents(state)
        fresh = proposers.Mutate(seed=0)
        fresh_trees, fresh_errors = fresh._parents(state)
        assert [t.tree for t in trees] == [t.tree for t in fresh_trees]
        assert errors == fresh_errors and prop.n_front == fresh.n_front == 3
        assert len(prop._as_parents) == len({id(r) for r in state.front + state.population})


def test_breed_parents_lists_the_front_then_the_population_and_reuses_their_entries():
    # (Mutate._parents' loop, native: the front's records, then the population's, without the
    # shape library's; a record's entry made once while it stays a parent, by identity: once a
    # round for a record in both the front and the population)
    front = [{"proposed": s, "e": i} for i, s in enumerate(["a", "lib", "b"])]
    population = [dict(front[0]), front[2], {"proposed": "c", "e": 5}]
    made = []

    def make(r):
        made.append(r)
        return (r, f"sites of {r['proposed']}", float(r["e"]))

    sites, errors, n_front, kept = _core.breed_parents(front, population, {"lib"}, None, make)
    assert sites == [f"sites of {s}" for s in "ababc"]
    assert errors == [0.0, 2.0, 0.0, 2.0, 5.0] and n_front == 2
    assert made == [front[0], front[2], population[0], population[2]]
    assert made[2] is population[0]  # (an equal copy: a record of its own)
    assert len(kept) == 4 and kept.entry(front[1]) is None
    assert all(kept.entry(r)[0] is r for r in made)
    made.clear()
    again = _core.breed_parents(population, [], {"lib"}, kept, make)
    assert again[:3] == ([f"sites of {s}" for s in "abc"], [0.0, 2.0, 5.0], 3) and made == []
    assert again[3] is kept and len(kept) == 3 and kept.entry(front[0]) is None  # (this round's)
    assert _core.breed_parents(front[:1], [], set(), kept, make)[0] == ["sites of a"]
    assert made == [front[0]]


def test_breed_parents_keeps_many_records_entries_across_rounds():
    # (the tables of kept records by address start small and grow with the records: every
    # record's entry found again, round after round, as the population grows and shrinks)
    made = []

    def make(r):
        made.append(r)
        return (r, f"sites of {r['proposed']}", float(r["e"]))

    population = [{"proposed": f"p{i}", "e": i} for i in range(600)]
    kept = None
    # (n records a round, and the first made anew: the ones the round before did not keep)
    for n, first in ((3, 0), (40, 3), (600, 40), (17, 17), (600, 17), (1, 1)):
        made.clear()
        sites, errors, _, kept = _core.breed_parents([], population[:n], set(), kept, make)
        assert sites == [f"sites of p{i}" for i in range(n)] and errors == list(map(float, range(n)))
        assert len(kept) == n and all(kept.entry(r)[0] is r for r in population[:n])
        assert all(kept.entry(r) is None for r in population[n:n + 5])
        assert made == population[first:n]


def test_breed_parents_keeps_what_it_had_when_an_entry_cannot_be_made():
    # (an exception from ``make``: the entries kept from the round before stay, for the next)
    front = [{"proposed": "a", "e": 1}, {"proposed": "b"}]
    made = []

    def make(r):
        made.append(r)
        return (r, f"sites of {r['proposed']}", float(r["e"]))

    _, _, _, kept = _core.breed_parents(front[:1], [], set(), None, make)
    with pytest.raises(KeyError):
        _core.breed_parents(front, [], set(), kept, make)
    made.clear()
    assert _core.breed_parents(front[:1], [], set(), kept, make)[0] == ["sites of a"]
    assert made == [] and len(kept) == 1
    with pytest.raises(TypeError):
        _core.breed_parents(front[:1], [], set(), {}, make)
    with pytest.raises(TypeError):  # (a record is a dict)
        _core.breed_parents([[("proposed", "a")]], [], {}, None, make)


def test_breed_parents_reads_a_list_that_make_changes_as_a_python_loop_reads_it():
    # (the records are read a step at a time, by index, as ``for r in records`` reads them: a
    # record ``make`` removes or appends while its list is read is skipped or read in turn, and
    # a record removed after it was read stays alive in its entry)
    def fresh():
        population = [{"proposed": s, "e": i} for i, s in enumerate("abcd")]

        def make(r):
            if r["proposed"] == "a":
                del population[1]  # ("b": never read)
                population.append({"proposed": "e", "e": 9})
            if r["proposed"] == "c":
                del population[0]  # ("a", read already: "d" moves to where "c" was read)
            return (r, f"sites of {r['proposed']}", float(r["e"]))

        return population, make

    population, make = fresh()
    want = [make(r)[1] for r in population]  # (Python's own loop over the same changes)
    population, make = fresh()
    sites, errors, n_front, kept = _core.breed_parents([], population, set(), None, make)
    assert sites == want == [f"sites of {s}" for s in "ace"] and errors == [0.0, 2.0, 9.0]
    assert n_front == 0 and len(kept) == 3 and [r["proposed"] for r in population] == list("cde")
    again = _core.breed_parents([], population, set(), kept, make)  # ("d" made, not the others)
    assert again[0] == [f"sites of {s}" for s in "cde"] and again[1] == [2.0, 3.0, 9.0]


def test_parent_entries_give_the_entry_and_sites_the_python_rule_gives():
    # (ParentEntries, which breed_parents calls natively: the record, the Sites of its model's
    # tree, fitness(record) * (1 + parsimony * size) as Python computes it, an int parsimony
    # too; a source parsed once, a proposal's own entry taken (popped) for its tree; what the
    # record lacks raises as the Python rule did)
    from ndvm.cosearch.select import fitness

    for parsimony in (0.02, 0, 1):
        parsed, proposed = {}, {}
        canon = Simplifier(("a", "b", "c")).entry(to_tree("(* a (sin x))"))
        proposed[canon[1]] = canon
        entries = _core.ParentEntries(parsed, proposed, parsimony, fitness, to_tree)
        rec = {"proposed": "(+ a (* b x))", "model": "(+ a (* b x))", "size": 5,
               "train_error": 0.25, "heldout_error": 0.5}
        got = entries(rec)
        assert got[0] is rec and got[1].tree == to_tree(rec["model"])
        assert got[2] == fitness(rec) * (1 + parsimony * rec["size"])
        assert type(got[2]) is type(fitness(rec) * (1 + parsimony * rec["size"]))
        assert entries(dict(rec))[1] is got[1] and list(parsed) == [rec["model"]]
        own = entries.sites_of(canon[1])
        assert own.tree is canon[0] and canon[1] not in proposed and parsed[canon[1]] is own
        with pytest.raises(KeyError):
            entries({"model": "(* a x)", "train_error": 1.0, "heldout_error": 1.0})
        with pytest.raises(KeyError):
            entries({"size": 3})
        sites, errors, n_front, _ = _core.breed_parents([rec], [], set(), None, entries)
        assert sites == [got[1]] and errors == [got[2]] and n_front == 1


def test_record_fitness_is_the_python_rule_and_parent_entries_read_it_without_a_call():
    # (select.fitness is the native record_fitness: the Python rule's answers, its errors and
    # their messages; ParentEntries given it reads it directly, given any other callable calls it)
    from collections import UserDict

    from ndvm.cosearch.select import fitness

    def rule(record):
        train, held = record["train_error"], record["heldout_error"]
        return held if held > train else train  # noqa: FURB136 - the rule as it was written

    assert fitness is _core.record_fitness
    for rec in ({"train_error": 0.5, "heldout_error": float("nan")},
                UserDict({"train_error": 2, "heldout_error": 1.5}),
                {"train_error": float("nan"), "heldout_error": 0.5}):
        got, want = fitness(rec), rule(rec)
        assert got is want or (math.isnan(got) and math.isnan(want))  # (the same, or NaN)
    for bad in ({"heldout_error": 1.0}, {"train_error": 1.0}, {"train_error": None,
                                                                "heldout_error": 0.5}, [1, 2]):
        with pytest.raises(Exception) as want:
            rule(bad)
        with pytest.raises(want.type) as got:
            fitness(bad)
        assert str(got.value) == str(want.value)
    calls = []

    def counted(record):
        calls.append(record)
        return rule(record)

    rec = {"proposed": "(* a x)", "model": "(* a x)", "size": 3, "train_error": 0.25,
           "heldout_error": 0.5}
    native = _core.ParentEntries({}, {}, 0.02, fitness, to_tree)(rec)
    python = _core.ParentEntries({}, {}, 0.02, counted, to_tree)(rec)
    assert native[2] == python[2] == 0.5 * (1 + 0.02 * 3) and calls == [rec]


def test_breed_parents_reads_a_kept_record_again_only_when_the_island_grew():
    # (a set island only grows: while it is the one the entries were read against, of the same
    # size, a kept record is not read again (a search's records never change: one changed here
    # shows it); a source added to it is looked for in every record; another set or container
    # is read every round)
    front = [{"proposed": s} for s in "abc"]
    island = {"lib"}

    def make(r):
        return (r, f"sites of {r['proposed']}", 1.0)

    kept = _core.breed_parents(front, [], island, None, make)[3]
    front[1]["proposed"] = "lib"
    assert len(_core.breed_parents(front, [], island, kept, make)[0]) == 3  # (not read)
    assert len(_core.breed_parents(front, [], set(island), kept, make)[0]) == 2
    kept = _core.breed_parents(front, [], island, None, make)[3]
    front[1]["proposed"] = "b"
    island.add("b")
    assert _core.breed_parents(front, [], island, kept, make)[0] == ["sites of a", "sites of c"]
    front[0]["proposed"] = "b"
    assert _core.breed_parents(front, [], frozenset(island), kept, make)[0] == ["sites of c"]
    front[0]["proposed"] = "a"
    assert len(_core.breed_parents(front, [], ["lib"], kept, make)[0]) == 3


def test_breed_parents_keeps_a_records_entry_by_the_record_and_checks_it_is_that_records():
    # (a copy with the same id, a migrant come back round the ring, is a record of its own; an
    # entry ``make`` gives for another record is not kept)
    front = [{"id": 1, "proposed": "a", "e": 1}, {"id": 5, "proposed": "b", "e": 2}]
    population = [{"id": 9, "proposed": "c", "e": 3}, dict(front[0])]
    made = []

    def make(r):
        made.append(r)
        return (r, f"sites of {r['proposed']}", float(r["e"]))

    sites, errors, _, kept = _core.breed_parents(front, population, set(), None, make)
    assert sites == [f"sites of {s}" for s in "abca"] and errors == [1.0, 2.0, 3.0, 1.0]
    assert len(kept) == 4 and kept.entry(population[1])[0] is population[1]
    made.clear()
    again = _core.breed_parents(front, population[:1] + [dict(front[0])], set(), kept, make)
    assert again[:2] == (sites, errors) and made == [front[0]]  # (the new copy; 1, 5, 9 known)
    made.clear()
    other = {"id": 2, "proposed": "d", "e": 4}
    stale = _core.breed_parents([other], [], set(), None, lambda r: (dict(r), "stale", 9.0))[3]
    assert len(stale) == 0
    assert _core.breed_parents([other], [], set(), stale, make)[0] == ["sites of d"]
    assert made == [other]


def test_a_kept_childs_sites_take_its_canonical_node_and_breed_the_same_children():
    # (a kept child that becomes a parent: its Sites made with its entry take the canonical Node
    # its tree was made of as the tree's Node form, not converting the tree back, while that
    # Node is valid; they breed the children its tree's own Sites breed, draw for draw, before
    # and past a reset of the core)
    params = ("a", "b", "c")
    g = Grammar(params=params)
    breed = gp.breeder(g)
    simp = Simplifier(params).core
    out, made = [], {}
    breed.children(_core.Draws(np.random.default_rng(7)), 12, out, made, set(), simp,
                   [gp.Sites(to_tree(p)) for p in PARENTS], [0.5, 0.1, 2.0, 0.3], 0, [])
    kept = [s for s in out if s[0] == "("][:6]
    assert len(kept) == 6

    def bred(sites, simplifier):
        got, entries = [], {}
        breed.children(_core.Draws(np.random.default_rng(11)), 30, got, entries, set(),
                       simplifier, sites, [1.0] * len(sites), 0, [], hold_parents=True)
        return got, {s: tuple(e) for s, e in entries.items()}

    seeded = [gp.Sites(made[s][0], made[s]) for s in kept]
    assert [x.spots for x in seeded] == [gp.positions(to_tree(s)) for s in kept]
    want = bred([gp.Sites(to_tree(s)) for s in kept], Simplifier(params).core)
    held = simp.n_held
    assert bred(seeded, simp) == want
    assert simp.n_held == held  # (their Node forms taken, not converted and held)
    before, extra = simp.n_resets, np.random.default_rng(1)
    while simp.n_resets == before:
        simp.entry(gp.grow(extra, g))
    assert bred([gp.Sites(made[s][0], made[s]) for s in kept], simp) == want
    # (another Simplifier's children, or an entry that is not a kept child's: converted)
    assert bred([gp.Sites(to_tree(s), (to_tree(s), s)) for s in kept], simp) == want
