"""ndvm.search: trees, genetic operators, proposers, the loop, the front, resume, built-in tasks."""
import inspect
import json
import math
import os
import re
import threading
import traceback
import weakref
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest

import ndvm
from ndvm import schedule
from ndvm.cosearch import grammar as gp
from ndvm.cosearch import _calibrate
from ndvm.cosearch.loop import pareto_front
from ndvm.cosearch.proposers import CandidateFileError, extract_programs, read_candidates
from ndvm.cosearch.sexpr import canonical, size, skeleton, to_source, to_tree
from ndvm.cosearch.tasks import NILE, get_task

from conftest import DATA_MISSING, SHARED_DATA, local_http, shared_json

LOOP = "(loop ((s (* c x)) (k 0)) (if (= k 10) s (recur (+ (* a s) b) (+ k 1))))"


def test_trees_print_back_to_the_same_program():
    for src in ["(* a (exp (- 0.0 (* b x))))", LOOP, "(let ((u0 (sin x))) (+ u0 -1.5e-3))"]:
        tree = to_tree(src)
        assert to_tree(to_source(tree)) == tree
    assert size(to_tree("(* a (sin (* b x)))")) == 6
    assert skeleton(to_tree(LOOP), "abcd") == (
        "(loop ((s (* P x)) (k C)) (if (= k C) s (recur (+ (* P s) P) (+ k C))))")
    assert to_source(canonical(to_tree("(+ c (* d x))"), "abcd")) == "(+ a (* b x))"


def test_skeletons_match_the_published_candidate_file():
    def tidy(text):  # some published skeletons are written with spaces inside parentheses
        return re.sub(r"\s+\)", ")", re.sub(r"\(\s+", "(", text))

    for rec in shared_json("cosearch_candidates.jsonl"):
        assert skeleton(to_tree(rec["src"]), "abcd") == tidy(rec["skeleton"])


def test_loop_counters_are_never_mutation_targets():
    tree = to_tree(LOOP)
    paths = {p for p, _, _ in gp.positions(tree)}
    texts = {to_source(gp.get_at(tree, p)) for p in paths} - {LOOP}  # (the whole loop may go)
    assert "(* c x)" in texts and "(+ (* a s) b)" in texts and "s" in texts
    assert not any("k" in t.split() or "(= k" in t or "(+ k" in t for t in texts)
    assert "10" not in texts and "1" not in texts


def test_grown_and_mutated_programs_are_valid_and_deterministic():
    g = gp.Grammar()
    task = get_task("damped")
    x = task.inputs["x"]
    ev = ndvm.Evaluator(max_steps=100_000)

    def children(seed):
        rng = np.random.default_rng(seed)
        out, parents = [], [to_tree(LOOP), to_tree("(* a (sin (* b x)))")]
        for i in range(150):
            kind = i % 3
            if kind == 0:
                t = gp.grow(rng, g)
            elif kind == 1:
                t = gp.mutate(rng, g, parents[i % 2])
            else:
                t = gp.crossover(rng, g, parents[i % 2], parents[1 - i % 2])
            out.append(to_source(t))
            parents.append(t)
            parents = parents[-6:]
        return out

    a = children(3)
    assert a == children(3) and a != children(4)
    valid = 0
    for src in a:
        try:
            prog = ndvm.parse(src)
        except ndvm.SchemeError:
            continue
        if not set(prog.free_names) <= {"a", "b", "c", "d", "x"}:
            continue
        params = {n: 0.5 for n in prog.free_names if n != "x"}
        ev.evaluate(prog, params=params, data={"x": x} if "x" in prog.free_names else None)
        valid += 1  # every program that parses with allowed names terminates without error
    assert valid >= 0.9 * len(a)
    assert any("loop" in s for s in a) and any("let" in s for s in a)


def test_cheap_draws_are_numpys_own():
    # the proposer draws a mutation kind with one uniform and tournament indices one at a time;
    # both must be numpy's rng.choice(p=) and rng.integers(n, size=k) draw for draw, so a seed
    # proposes what it always did
    kinds = ("subtree", "constant", "operator", "hoist", "extend")
    p = [0.4, 0.2, 0.2, 0.08, 0.12]
    for seed in range(20):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        for n in (1, 2, 3, 17, 64, 65):
            assert gp.choice(a, kinds, p) == b.choice(kinds, p=p)
            assert [int(a.integers(n)) for _ in range(3)] == b.integers(n, size=3).tolist()
        assert a.random() == b.random()  # and the two streams are still in step


def test_pareto_front_is_the_non_dominated_set():
    recs = [{"id": i, "status": "ok", "size": s, "heldout_error": e}
            for i, (s, e) in enumerate([(3, 1.0), (5, 0.5), (5, 0.7), (7, 0.6), (9, 0.1),
                                         (2, math.inf), (4, 1.0)])]
    recs.append({"id": 99, "status": "invalid", "size": 1, "heldout_error": 0.0})
    assert [r["id"] for r in pareto_front(recs)] == [0, 1, 4]


def test_mutate_search_is_deterministic_for_a_seed():
    a = ndvm.search("damped", seed=5, max_candidates=48, budget=None)
    b = ndvm.search("damped", seed=5, max_candidates=48, budget=None)
    assert [r["proposed"] for r in a.records] == [r["proposed"] for r in b.records]
    assert len(a.records) == 48
    assert [r["heldout_error"] for r in a.records] == [r["heldout_error"] for r in b.records]


def test_the_pipelined_search_proposes_the_same_on_any_number_of_workers():
    # mutate is pipelined (the next batch is proposed while this one calibrates, from the state
    # one batch behind): what it proposes depends on the seed, never on the workers' timing
    from concurrent.futures import ThreadPoolExecutor

    def fields(res):
        return [(r["id"], r["proposed"], r["status"], r["params"], r["heldout_error"])
                for r in res.records]
    # workers=1: every step on the calling thread; 2: the proposer thread calibrates too once
    # it has proposed; 3: and a pool thread
    one = ndvm.search("damped", seed=2, max_candidates=160, workers=1, budget=None)
    two = ndvm.search("damped", seed=2, max_candidates=160, workers=2, budget=None)
    three = ndvm.search("damped", seed=2, max_candidates=160, workers=3, budget=None)
    with ThreadPoolExecutor(2) as ex:  # the executor path, in rounds of the same size
        ex_run = ndvm.search("damped", seed=2, max_candidates=160, executor=ex, batch=16,
                             budget=None)
    assert ndvm.cosearch.Mutate.pipelined and len(one.records) == 160
    assert fields(one) == fields(two) == fields(three) == fields(ex_run)
    assert sum(r["proposer"] == "mutate" and r["status"] == "ok" for r in one.records) > 100
    assert [r["proposed"] for r in one.front] == [r["proposed"] for r in two.front] == [
        r["proposed"] for r in ex_run.front]
    assert one.best["model"] == two.best["model"] == ex_run.best["model"]


def test_the_calling_thread_calibrates_the_next_batch_while_the_last_fits_end_elsewhere():
    # (_Pipeline's calling thread, none of batch k's fits left to start: it runs batch k+1's,
    # one at a time, until batch k's last fit has ended on the proposer thread)
    from ndvm.cosearch.loop import _help_next

    class Current:
        def __init__(self, ends_after):
            self.asked = 0
            self.ends_after = ends_after

        def finished(self):
            self.asked += 1
            return self.asked > self.ends_after

    class Next:
        def __init__(self, left):
            self.left, self.ran = left, 0

        def drain(self, limit):
            assert limit == 1
            if not self.left:
                return 0
            self.left -= 1
            self.ran += 1
            return 1

    def staged(value=None, error=None):
        f = Future()
        if error is not None:
            f.set_exception(error)
        elif value is not None:
            f.set_result(value)
        return f

    nxt = Next(left=10)
    _help_next(Current(ends_after=3), staged(("batch", nxt)))
    assert nxt.ran == 3  # (until batch k ended)
    nxt = Next(left=2)
    _help_next(Current(ends_after=5), staged(("batch", nxt)))
    assert nxt.ran == 2  # (until batch k+1 had none left to start)
    nxt = Next(left=5)
    _help_next(Current(ends_after=5), staged())  # (batch k+1 not proposed yet: no waiting)
    _help_next(Current(ends_after=5), staged(error=RuntimeError("proposer failed")))
    _help_next(Current(ends_after=5), staged(("exhausted", None)))
    _help_next(Current(ends_after=0), staged(("batch", nxt)))  # (batch k ended already)
    assert nxt.ran == 0


def test_a_proposer_bound_search_on_many_workers_is_told_to_use_islands():
    # on a big machine a search of one population waits for its one proposing thread: the
    # note says so, with the measured share, and only when it is so
    from ndvm.cosearch.loop import BOUND_SECONDS, BOUND_WORKERS, proposer_bound

    note = proposer_bound(9.5, 10.0, 64)
    assert "busy 95% of the run" in note and "64 worker threads" in note
    assert "--islands N" in note
    assert proposer_bound(5.0, 10.0, 64) is None  # (the calibrations were the limit)
    assert proposer_bound(9.5, 10.0, BOUND_WORKERS - 1) is None  # (too few workers to tell)
    assert proposer_bound(0.95 * BOUND_SECONDS / 2, BOUND_SECONDS / 2, 64) is None  # (too short)
    assert "busy 100%" in proposer_bound(10.2, 10.0, 8)  # (timers' overlap: never above 100%)


def test_the_proposer_bound_note_reaches_the_result(monkeypatch):
    # every threshold lowered: a search on BOUND_WORKERS threads carries the note in its
    # warnings (summary.json's), one on a single thread or with islands does not
    from ndvm.cosearch import loop

    monkeypatch.setattr(loop, "BOUND_BUSY", 0.0)
    monkeypatch.setattr(loop, "BOUND_SECONDS", 0.0)
    many = ndvm.search("damped", seed=2, max_candidates=96, workers=loop.BOUND_WORKERS,
                       budget=None)
    one = ndvm.search("damped", seed=2, max_candidates=96, workers=1, budget=None)
    isl = ndvm.search("damped", seed=2, max_candidates=96, workers=1, islands=2, budget=None)
    notes = [w for w in many.warnings if "--islands N" in w]
    assert len(notes) == 1 and f"{loop.BOUND_WORKERS} worker threads" in notes[0]
    assert not [w for w in one.warnings + isl.warnings if "--islands N" in w]
    # (the note is a remark on the run: the records are those of any other worker count)
    assert [r["model"] for r in many.records] == [r["model"] for r in one.records]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_search_cut_by_its_budget_keeps_whole_rounds_and_leaves_no_thread(workers, tmp_path):
    """A time budget cuts the search between rounds: what it keeps is exactly the first records
    of an uncut search of the same seed (the round begun for later is dropped, its fits
    cancelled), the file holds them all, and no thread of the search outlives it."""
    before = {t.ident for t in threading.enumerate()}
    cut = ndvm.search("damped", seed=4, budget=1.0, workers=workers, out=tmp_path / "run")
    assert cut.stopped == "budget" and len(cut.records) % 16 == 0 and cut.records
    full = ndvm.search("damped", seed=4, max_candidates=len(cut.records) + 32, budget=None,
                       workers=workers)
    fields = ("id", "proposed", "status", "params", "heldout_error")
    assert [[r[k] for k in fields] for r in cut.records] == [
        [r[k] for k in fields] for r in full.records[:len(cut.records)]]
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r["id"] for r in cut.records]
    # the search's proposer and calibration work ran on the persistent worker pool (its threads
    # are kept for the next call): none of it is still running there, so every one of the
    # pool's workers can take a probe at once (a worker stuck in the search breaks the barrier)
    pool = schedule._POOL
    if pool is not None:
        n = pool._max_workers
        barrier = threading.Barrier(n + 1, timeout=60)
        probes = [pool.submit(barrier.wait) for _ in range(n)]
        barrier.wait()
        for p in probes:
            p.result()
    left = [t for t in threading.enumerate()
            if t.ident not in before and not t.name.startswith("ndvm-worker")]
    assert not left, [t.name for t in left]


@pytest.mark.parametrize("pipelined", [True, False])
def test_a_pipelined_proposer_sees_every_batch_but_the_last(pipelined):
    class Spy(ndvm.cosearch.Replay):
        def propose(self, n, state):
            views.append(sorted(r["id"] for r in state.population))
            return super().propose(n, state)

    views = []
    spy = Spy(sources=[f"(+ a (* b ({u} x)))" for u in ("sin", "cos", "exp", "log", "sqrt",
                                                        "tanh", "square")]
              + [f"(+ a (* b ({u} (sin x))))" for u in ("sin", "cos", "exp", "tanh", "square")])
    spy.pipelined = pipelined
    res = ndvm.search("damped", proposer=spy, batch=4, budget=None)
    assert [r["status"] for r in res.records] == ["ok"] * 12 and res.stopped == "exhausted"
    if pipelined:  # batch k+1 is proposed while batch k calibrates
        assert views == [[], [], [0, 1, 2, 3], list(range(8))]
    else:
        assert views == [[], [0, 1, 2, 3], list(range(8)), list(range(12))]


def test_damped_reaches_a_good_fit_within_its_default_budget():
    task = get_task("damped")
    res = ndvm.search(task, proposer="mutate", seed=0, stop_on_success=True)
    assert res.stopped == "success"
    assert res.first_good["r2"] > 0.9 and res.first_good["time"] < task.budget_seconds
    assert res.best["r2"] > 0.9
    assert res.front[-1]["heldout_error"] == res.best["front_member"]["heldout_error"]


def _write_jsonl(path, srcs):
    path.write_text("".join(json.dumps({"src": s}) + "\n" for s in srcs))
    return path


def test_replay_validates_and_records_every_candidate(tmp_path):
    f = _write_jsonl(tmp_path / "c.jsonl", [
        "(* a (* (exp (* b x)) (cos (* c x))))",    # the true form
        "(* a z)",                                   # a name the task does not allow
        "(+ a",                                      # unreadable
        "(car a)",                                   # fails the probe
        "(* a (* (exp (* b x)) (cos (* c x))))",    # a duplicate
        "(sin x)",                                   # nothing to calibrate: scored as is
    ])
    res = ndvm.search("damped", proposer="replay", candidates=[str(f)], out=tmp_path / "run",
                      budget=None)
    assert res.stopped == "exhausted"
    st = [r["status"] for r in res.records]
    assert st == ["ok", "invalid", "invalid", "invalid", "duplicate", "ok"]
    assert "z" in res.records[1]["error"] and "EvalError" not in res.records[1]["error"]
    # (an unreadable candidate and one that cannot run both say where, in the candidate)
    assert res.records[2]["error"].startswith("<candidate>:1:1: ReadError")
    assert res.records[3]["error"].startswith("<candidate>:1:")
    assert res.records[0]["r2"] > 0.9 and res.first_good["id"] == 0
    assert res.records[5]["params"] == {}
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    assert [json.loads(x)["status"] for x in lines] == st
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["candidates"] == 6 and summary["first_good"]["id"] == 0


def _ours(garbage):
    """The objects of ``garbage`` that ndvm made: its functions, frames and exceptions raised
    in its code (a background thread, Dask's event loop of an earlier test, makes others)."""
    out = []
    for o in garbage:
        if inspect.isfunction(o) and (o.__module__ or "").startswith("ndvm"):
            out.append(o)
        elif inspect.isframe(o) and "ndvm" in o.f_code.co_filename:
            out.append(o)
        elif isinstance(o, BaseException) and o.__traceback__ is not None and any(
                "ndvm" in f.filename for f in traceback.extract_tb(o.__traceback__)):
            out.append(o)
    return out


def test_a_search_makes_no_reference_cycles_and_restores_the_collector(tmp_path):
    """The search pauses Python's cyclic garbage collector (its full collections walked the
    simplifier's memo under the GIL): that is safe because a search makes no reference cycles,
    not even for candidates that fail (their errors are kept without traceback frames), and the
    collector is left as the search found it. (gc.DEBUG_SAVEALL keeps what any collection finds,
    the search's own collections of the young generation included.)"""
    import gc

    f = _write_jsonl(tmp_path / "c.jsonl", [
        "(* a (* (exp (* b x)) (cos (* c x))))",
        "(+ a", "(car a)", "(* a z)",                      # invalid: read, probe, names
        "(if (< a 0.45) (car 1.0) (* a x))",              # fails while it is fitted
        "(/ a (- x b))",                                   # a pole between the points
    ])
    was = gc.isenabled()
    try:
        for workers in (1, 2):
            gc.collect()
            gc.garbage.clear()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            replayed = ndvm.search("damped", proposer="replay", candidates=[str(f)],
                                   budget=None, workers=workers)
            mutated = ndvm.search("damped", seed=3, max_candidates=120, budget=None,
                                  workers=workers)
            assert not gc.isenabled()  # (left as found: off)
            gc.collect()
            gc.set_debug(0)
            assert _ours(gc.garbage) == []
            gc.garbage.clear()
            assert {r["status"] for r in replayed.records} >= {"ok", "invalid"}
            assert len(mutated.records) == 120
            gc.enable()
            ndvm.search("damped", seed=3, max_candidates=32, budget=None, workers=workers)
            assert gc.isenabled()
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        (gc.enable if was else gc.disable)()


def _young_collections(monkeypatch, search):
    """What each collection of the young generation freed while ``search()`` ran with the
    collector off (parallel.YOUNG_LIMIT lowered to 200)."""
    import gc

    from ndvm import parallel

    freed = []

    def seen(phase, info):
        if phase == "stop" and info["generation"] == 0:
            freed.append(info["collected"])

    monkeypatch.setattr(parallel, "YOUNG_LIMIT", 200)
    was = gc.isenabled()
    gc.callbacks.append(seen)
    try:
        gc.collect()  # (what earlier code left is not the search's)
        gc.disable()
        search()
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(seen)
        (gc.enable if was else gc.disable)()
    return freed


def test_a_custom_proposers_cycles_are_collected_while_the_collector_is_paused(monkeypatch):
    """The search collects the young generation once it is large (parallel.collect_young):
    the cycles a custom proposer makes are freed during the search, not kept until its end."""

    class Cyclic(ndvm.cosearch.Replay):
        def propose(self, n, state):
            for _ in range(50):  # (garbage only a cyclic collection frees)
                a = {"payload": [0.0] * 8}
                a["self"] = a
            return super().propose(n, state)

    sources = [f"(* a ({u} x))" for u in ("sin", "cos", "exp", "tanh", "square", "sqrt")] * 4
    freed = _young_collections(monkeypatch, lambda: ndvm.search(
        "damped", proposer=Cyclic(sources=sources), batch=2, budget=None, workers=1))
    assert sum(freed) >= 100


def test_an_island_collects_its_young_generation_while_the_collector_is_paused(monkeypatch):
    freed = _young_collections(monkeypatch, lambda: ndvm.search(
        "damped", islands=2, workers=1, seed=1, max_candidates=128, migration_every=64,
        budget=None))
    assert len(freed) >= 2 and sum(freed) == 0  # (the search itself makes no cycles)


def test_the_young_objects_a_paused_collector_leaves_join_the_oldest_generation_unwalked():
    """When the collector is restored after a search's pause (the last parallel.gc_paused ends,
    one of them with promote), what the pause left young joins the oldest generation at once,
    without a collection: the first allocation after an island's epoch walked the ~5,000
    objects it kept, and freed none. A cycle made meanwhile is still collected (by a full
    collection); objects the program froze stay frozen; fit_many's pause alone (no promote)
    leaves the program's young objects young."""
    import gc

    from ndvm import parallel

    class Node:
        pass

    collections = []

    def seen(phase, info):
        if phase == "stop":
            collections.append(info["generation"])

    was = gc.isenabled()
    gc.enable()
    gc.callbacks.append(seen)
    try:
        gc.collect()
        collections.clear()
        with parallel.gc_paused():
            mine = [[i] for i in range(100)]
        assert not any(o is mine[0] for o in gc.get_objects(generation=2))
        with parallel.gc_paused(promote=True), parallel.gc_paused():
            kept = [[i] for i in range(5000)]
            cycle = Node()
            cycle.me = cycle
        few = [[i] for i in range(gc.get_threshold()[0] // 2)]  # (fewer than a collection's)
        assert collections == []  # (before: a young collection of the 5,000 lists)
        assert any(o is kept[0] for o in gc.get_objects(generation=2))
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        assert gone() is None and gc.get_freeze_count() == 0
        pinned = [[0]]
        gc.freeze()
        with parallel.gc_paused(promote=True):
            more = [[i] for i in range(100)]
        assert gc.get_freeze_count() > 0  # (not unfrozen: the program's frozen list is not
        assert not any(o is pinned for o in gc.get_objects())  # in any generation)
        assert len(kept) + len(few) + len(more) + len(mine) > 0
    finally:
        gc.unfreeze()
        gc.callbacks.remove(seen)
        (gc.enable if was else gc.disable)()


def test_a_failed_candidate_keeps_its_error_without_the_frames():
    x = np.linspace(0.1, 1.0, 8)
    bad = ndvm.fit_many(["(* a (car x))", "(* a x)"], data={"x": x}, target=2 * x, workers=1)
    assert isinstance(bad[0], ndvm.CandidateError) and bad[0].error.__traceback__ is None
    assert bad[0].kind == "EvalError" and "car" in str(bad[0].error)


def test_candidate_file_errors_name_the_line_and_column(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"src": "(* a x)"}\n{"src": (* a x)}\n')
    with pytest.raises(CandidateFileError, match=r"bad\.jsonl:2:9: invalid JSON"):
        read_candidates(f)
    f.write_text('{"source": "(* a x)"}\n')
    with pytest.raises(CandidateFileError, match=r"bad\.jsonl:1:1"):
        read_candidates(f)


def test_resume_continues_the_recorded_run(tmp_path):
    out = tmp_path / "run"
    first = ndvm.search("damped", seed=1, max_candidates=32, out=out, budget=None)
    before = (out / "candidates.jsonl").read_text().splitlines()
    second = ndvm.search("damped", seed=1, max_candidates=64, out=out, resume=True, budget=None)
    records = [json.loads(x) for x in (out / "candidates.jsonl").read_text().splitlines()]
    assert len(records) == 64 == len(second.records)
    assert sorted(r["id"] for r in records) == list(range(64))
    whole = ndvm.search("damped", seed=1, max_candidates=64, budget=None)  # never interrupted
    fields = ("id", "proposed", "model", "status", "params", "train_error", "heldout_error")
    assert ([[r[k] for k in fields] for r in second.records]
            == [[r[k] for k in fields] for r in whole.records])
    assert [r["id"] for r in second.front] == [r["id"] for r in whole.front]
    srcs = [r["proposed"] for r in records if r["status"] != "duplicate"]
    assert len(set(srcs)) == len(srcs)
    assert records[:len(before)] == [json.loads(x) for x in before]  # (kept as written)
    assert min(r["time"] for r in records[32:]) >= max(r["time"] for r in records[:32])
    ids = {r["id"] for r in pareto_front(second.records)}
    assert ids == {r["id"] for r in second.front}
    assert second.front[-1]["heldout_error"] <= first.front[-1]["heldout_error"]
    # a fresh run over the same directory is refused (it would lose the record) unless forced
    with pytest.raises(ndvm.cosearch.loop.RunExistsError,
                       match="holds a search \\(64 candidates in candidates.jsonl\\).*--resume.*--force"):
        ndvm.search("damped", seed=1, max_candidates=8, out=out, budget=None)
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 64
    ndvm.search("damped", seed=1, max_candidates=8, out=out, budget=None, force=True)
    assert len((out / "candidates.jsonl").read_text().splitlines()) == 8
    # (a folder left with only its summary was said to hold "0 candidates in candidates.jsonl")
    (out / "candidates.jsonl").unlink()
    with pytest.raises(ndvm.cosearch.loop.RunExistsError,
                       match="holds a search \\(its summary.json, no candidates.jsonl\\)"):
        ndvm.search("damped", seed=1, max_candidates=8, out=out, budget=None)


class _StubLLM(BaseHTTPRequestHandler):
    requests = []
    answer = ""

    def do_POST(self):  # noqa: N802 - the http.server interface
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body,
                                    "auth": self.headers.get("Authorization")})
        reply = {"choices": [{"message": {"role": "assistant", "content": type(self).answer}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_llm():
    _StubLLM.requests = []
    with local_http(_StubLLM) as url:
        yield url


def test_llm_proposer_against_a_local_stub(stub_llm, monkeypatch):
    _StubLLM.answer = ("Here are some ideas:\n```scheme\n"
                       "(* a (* (exp (* b x)) (cos (* c x))))\n"
                       "(* d (* (exp (* a x)) (cos (* b x))))\n"   # same skeleton: dropped
                       "(* a (sin (* b x)))\n"
                       "(+ a (* b (undefined-thing x)))\n"          # parses; unbound: invalid
                       "(* a (sin x\n```\n")                         # unbalanced: ignored
    monkeypatch.setenv("NDVM_TEST_KEY", "sk-test-123")
    llm = ndvm.cosearch.LLM(base_url=stub_llm, model="stub-model", key_env="NDVM_TEST_KEY",
                            max_calls=2)
    res = ndvm.search("damped", proposer=llm, budget=None)
    assert res.stopped == "exhausted"
    assert len(_StubLLM.requests) == 2
    req = _StubLLM.requests[0]
    assert req["path"] == "/v1/chat/completions" and req["auth"] == "Bearer sk-test-123"
    assert req["body"]["model"] == "stub-model"
    prompt = req["body"]["messages"][-1]["content"]
    assert "loop" in prompt and "Grammar" in prompt and "x" in prompt
    second = _StubLLM.requests[1]["body"]["messages"][-1]["content"]
    assert res.records[0]["model"] in second  # the front is fed back (the calibrated model)
    srcs = [r["proposed"] for r in res.records]
    assert srcs == ["(* a (* (exp (* b x)) (cos (* c x))))", "(* a (sin (* b x)))",
                    "(+ a (* b (undefined-thing x)))"]
    assert [r["status"] for r in res.records] == ["ok", "ok", "invalid"]
    assert res.first_good["id"] == 0


def test_extract_programs_from_prose():
    text = "1. (+ a x) and 2. (* a (sin x)) ; also (- a"
    assert extract_programs(text) == ["(+ a x)", "(* a (sin x))"]


def test_calibrate_runs_a_batch_in_one_parallel_call_and_captures_errors(monkeypatch):
    x = np.linspace(0, 1, 10)
    progs = [ndvm.parse("(* a x)"), ndvm.parse("(* a (car x))")]
    serial = _calibrate.calibrate(progs, {"x": x}, 2 * x, optimizer="adam", steps=20)
    assert _calibrate.succeeded(serial[0]) and isinstance(serial[1], _calibrate.CalibrationError)
    assert serial[1].kind == "EvalError"
    calls = []

    class Captured:
        def __init__(self, e):
            self.error = e

    class Begun:  # what ndvm.parallel.FitSetup.begin returns: the batch's results at finish
        def __init__(self, out):
            self.out = out

        def drain(self, limit=None):
            return 0

        def finish(self, lent=0, meanwhile=None):
            return self.out

    class FakeSetup:
        def __init__(self, data=None, target=None, workers=None, **options):
            self.data, self.target, self.options = data, target, options

        def begin(self, programs, per_candidate=None):
            calls.append(len(programs))
            out = []
            for p in programs:
                try:
                    out.append(ndvm.fit(p, data=self.data, target=self.target, **self.options))
                except ndvm.SchemeError as e:
                    out.append(Captured(e))
            return Begun(out)

    monkeypatch.setattr(_calibrate, "FitSetup", FakeSetup)
    par = _calibrate.calibrate(progs, {"x": x}, 2 * x, optimizer="adam", steps=20)
    assert calls == [2]
    assert par[0].params == serial[0].params and par[1].kind == "EvalError"


def test_nile_local_level_matches_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    res = ndvm.search("nile", proposer="replay", budget=None)
    best = res.best
    q, r = best["params"]["q"], best["params"]["r"]
    # Durbin & Koopman's published estimates (exact diffuse likelihood)
    assert abs(r - 15099) / 15099 < 2e-3 and abs(q - 1469.1) / 1469.1 < 2e-3
    mod = sm.tsa.UnobservedComponents(NILE, "local level")
    fit = mod.fit(disp=0)
    s_r, s_q = fit.params
    assert abs(r - s_r) / s_r < 0.01 and abs(q - s_q) / s_q < 0.01
    # our optimum is at least as likely as statsmodels' under statsmodels' own likelihood
    assert mod.loglike([r, q]) >= fit.llf - 1e-6
    assert abs(best["heldout_error"] + fit.llf) < 0.05


def test_kalman_task_finds_the_likelihood_maximum():
    res = ndvm.search("kalman", proposer="replay", budget=None)
    p = res.best["params"]
    assert 0.02 < p["q"] < 0.12 and 0.05 < p["r"] < 0.2  # truth 0.05, 0.1; T = 80
    task = get_task("kalman")
    prog = ndvm.parse(task.seeds[0])
    ev = ndvm.Evaluator()
    g = ev.evaluate(prog, params=p, consts=task.consts, grad=True).grad
    assert abs(g["q"][0] * p["q"]) < 1e-4 and abs(g["r"][0] * p["r"]) < 1e-4
    # a stationary point by gradients that do not come from the optimizer's own reverse sweep:
    # the eager torch baseline's autograd, and central differences of the likelihood's values
    split = pytest.importorskip("ndvm.baselines").SplitEvaluator()
    torch_grad = split.evaluate(prog, params=p, consts=task.consts, grad=True).grad
    nll = lambda **kw: ev.evaluate(prog, params={**p, **kw}, consts=task.consts).item()  # noqa: E731
    f0 = nll()
    for k in p:
        assert abs(torch_grad[k][0] * p[k]) < 1e-4, (k, torch_grad)
        h = 1e-6 * p[k]
        fd = (nll(**{k: p[k] + h}) - nll(**{k: p[k] - h})) / (2 * h)
        assert abs(fd * p[k]) < 1e-4, (k, fd)
        # and a minimum of the negative log likelihood: 0.1% either way costs likelihood
        assert nll(**{k: p[k] * 1.001}) > f0 and nll(**{k: p[k] * 0.999}) > f0, k


@pytest.mark.parametrize("name, task", [("cosearch_candidates.jsonl", "damped"),
                                        ("cosearch_rec_candidates.jsonl", "recurrence")])
def test_replay_of_the_published_candidates_finds_a_good_fit(name, task):
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(DATA_MISSING.format(path=path))
    res = ndvm.search(task, proposer="replay", candidates=[str(path)], budget=None,
                      stop_on_success=True)
    assert res.first_good is not None and res.first_good["r2"] > 0.9


def test_search_is_exported_without_hiding_the_package():
    import ndvm.cosearch

    assert callable(ndvm.search) and ndvm.search is ndvm.cosearch.search
    assert os.path.basename(ndvm.cosearch.__file__) == "__init__.py"


@pytest.mark.parametrize("workers", [0, -1, 1.5, "two", True])
def test_workers_must_be_a_whole_number_of_threads(workers, tmp_path):
    with pytest.raises(ValueError, match="workers must be a whole number of threads"):
        ndvm.search("damped", max_candidates=20, workers=workers, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # (refused before anything was written)


def test_the_progress_line_shows_a_best_held_out_error_that_never_gets_worse(monkeypatch):
    # (it showed the population's leader, ranked by the worse of its training and held-out
    # errors, whose held-out error could rise from one line to the next)
    from ndvm.cosearch import loop

    shown, plain = [], loop._status

    def status(n, rate, best, *rest):
        shown.append(best["heldout_error"])
        return plain(n, rate, best, *rest)

    monkeypatch.setattr(loop, "_status", status)  # (what every round's line would show)
    res = ndvm.search("damped", seed=0, max_candidates=600, budget=None)
    assert len(shown) > 30 and all(b <= a for a, b in zip(shown, shown[1:]))
    assert shown[-1] == min(r["heldout_error"] for r in res.records if r["status"] == "ok")


def test_batch_must_be_positive():
    with pytest.raises(ValueError, match="batch must be at least 1"):
        ndvm.search("damped", max_candidates=4, batch=0)


def test_search_calibration_stays_adam_when_a_task_names_no_optimizer():
    """ndvm.fit's default for least squares is LM; the co-search keeps its own protocol (Adam)
    for a task whose fit options leave the optimizer out, and honours one that names it."""
    from ndvm.cosearch.score import Scorer
    from ndvm.cosearch.tasks import SEARCH_OPTIMIZER, Task

    x = np.linspace(0.0, 1.0, 10)
    task = Task("t", {"x": x}, 2.0 * x, np.arange(8, 10), fit={"steps": 5, "starts": 2})
    assert SEARCH_OPTIMIZER == "adam" and get_task("damped").fit["optimizer"] == "adam"
    assert Scorer(task).fit.optimizer == "adam"
    assert Scorer(task, fit_options={"optimizer": "lm"}).fit.optimizer == "lm"


def test_candidates_are_calibrated_on_a_seeded_subset_of_large_data():
    from ndvm.cosearch.task import Task
    """Task.fit_points: the search calibrates candidates on at most that many training points
    (a subset seeded by the data's size), all of them when there are fewer or when it is None;
    the selection still refits the chosen model on every point."""
    x = np.linspace(0.0, 3.0, 5000)
    task = Task.from_arrays("big", {"x": x}, 2.3 * x + 1.1, heldout=0.3, seed=0,
                            fit={"optimizer": "lm", "steps": 10, "starts": 2})
    inputs, target = task.split("fit")
    assert target.size == task.fit_points == 2000
    assert set(task.fit_rows) <= set(task.train) and np.all(np.diff(task.fit_rows) > 0)
    np.testing.assert_array_equal(task.fit_rows, task.fit_rows)  # seeded
    np.testing.assert_array_equal(inputs["x"], x[task.fit_rows])
    whole = Task.from_arrays("big", {"x": x}, 2.0 * x + 1.0, heldout=0.3, fit_points=None)
    assert whole.split("fit")[1].size == whole.train.size == 3500
    small = Task.from_arrays("small", {"x": x[:100]}, x[:100], heldout=0.3)
    np.testing.assert_array_equal(small.fit_rows, small.train)
    for bad in (0, -3, 2.5, "all"):
        with pytest.raises(ValueError, match="fit_points"):
            Task.from_arrays("t", {"x": x}, x, fit_points=bad)
    from ndvm.cosearch import score
    seen = []
    real = score.setup  # (the calibrations' data, set up once per search)

    def spy(inputs, target, **kw):
        seen.append(target.size)
        return real(inputs, target, **kw)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(score, "setup", spy)
        res = ndvm.search(task, proposer=ndvm.cosearch.Replay(sources=["(+ a (* b x))"]), budget=None,
                          max_candidates=1, workers=1)
    assert seen and set(seen) == {2000}
    assert res.best["params"]["b"] == pytest.approx(2.3, rel=1e-9)
    assert "refitted on all 5000 points" in res.best["selection"]["explanation"]


def test_task_data_of_the_wrong_shape_or_kind_and_a_float_count_are_refused():
    # (a 2-column input was flattened into 200 "points"; complex data lost its imaginary part
    # with only numpy's ComplexWarning; heldout=1.0 was taken for one point held out)
    from ndvm.cosearch.task import Task

    x = np.linspace(0.0, 1.0, 100)
    with pytest.raises(ValueError, match=r"input 'x' has shape \(100, 2\): one value a point"):
        Task.from_arrays("t", {"x": np.c_[x, x]}, 2 * x)
    with pytest.raises(ValueError, match="input 'x' is complex"):
        Task.from_arrays("t", {"x": x + 0j}, 2 * x)
    with pytest.raises(ValueError, match="the target is complex"):
        Task.from_arrays("t", {"x": x}, 2 * x + 1j)
    with pytest.raises(ValueError, match=r"data input 'x' is complex"):
        ndvm.fit("(* a x)", data={"x": x + 1j}, target=2 * x)
    with pytest.raises(ValueError, match=r"heldout is the share .* an int from 1 to 99; got 1.0"):
        Task.from_arrays("t", {"x": x}, 2 * x, heldout=1.0)
    assert Task.from_arrays("t", {"x": x[:, None]}, 2 * x, heldout=1).heldout.size == 1
    r = ndvm.search(Task.from_arrays("t", {"x": x}, 2 * x), max_candidates=50)
    with pytest.raises(IndexError, match="an index into the front .* not a record id; got 99"):
        r.sympy(99)
