"""A round's records made natively (``round_records``, ``round_validated``, _Rounds.prepare): the
same records, in the same order with the same fields, the same seen set and the same programs
queued as the Python loop they replace (kept here as the reference), for proposers that simplify
and proposers with canonical entries, duplicates, invalid sources, too many parameters and a
resumed run's mismatch."""
import itertools
import math

import numpy as np
import pytest

from ndvm._core._core import (
    Scoring,
    Seen,
    first_line,
    round_fits,
    round_fitted,
    round_kept,
    round_scored,
    round_validated,
    row_blocks,
)
from ndvm.cosearch import rounds
from ndvm.cosearch.rounds import SearchState, _Rounds
from ndvm.cosearch.score import CANDIDATE, Scorer
from ndvm.cosearch.sexpr import size, skeleton, to_source, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.task import r_squared
from ndvm.cosearch.tasks import get_task


class _Proposer:
    """A proposer's attributes prepare reads (no proposing)."""

    def __init__(self, name="fixed", canonical=False, made=None):
        self.name, self.canonical = name, canonical
        if made is not None:
            self.made = made


def _reference(task, prop, scorer, simplifier, seen, recorded, next_id, id_step, srcs):
    """The records of ``srcs`` as _Rounds.prepare's Python loop made and validated them before
    the native one: (records, the valid ones, their models, the next id)."""
    records, todo, models = [], [], []
    made = getattr(prop, "made", None) or {}
    simplify = task.objective == "mse" and not getattr(prop, "canonical", False)
    blank = {"id": None, "proposer": getattr(prop, "name", "custom"), "proposed": None,
             "model": None, "status": "invalid", "params": None, "train_error": math.inf,
             "heldout_error": math.inf, "r2": None, "size": None, "skeleton": None,
             "error": None}
    for src in srcs:
        rid = next_id
        rec = blank.copy()
        rec["id"], rec["proposed"], rec["params"] = rid, src, {}
        next_id += id_step
        records.append(rec)
        old = recorded.get(rid) if recorded else None
        if old is not None and old["proposed"] != src:
            raise rounds.ResumeMismatch(f"candidate {rid}")
        if not seen.add_new(src):
            rec["status"] = "duplicate"
            continue
        try:
            canon = made.get(src)
            tree = (to_tree(src, CANDIDATE) if canon is None else canon[0] if simplify
                    else None)
            if simplify:
                try:
                    tree = simplifier.canonicalize(tree)
                except TooManyParameters:
                    raise
                except Exception:  # noqa: BLE001
                    pass
            model = to_source(tree) if canon is None else src
            rec["model"] = model
            if model != src and not seen.add_new(model):
                rec["status"] = "duplicate"
                continue
            rec["size"] = size(tree) if canon is None else canon[2]
            rec["skeleton"] = skeleton(tree, task.params) if canon is None else canon[3]
        except Exception as e:  # noqa: BLE001
            rec["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
            continue
        todo.append(rec)
        models.append(model)
    slots = []
    for rec, got in zip(todo, scorer.validate_round(models)):
        if isinstance(got, Exception):
            rec["error"] = str(got).splitlines()[0] if str(got) else type(got).__name__
        else:
            slots.append(rec)
    return records, slots, [r["model"] for r in slots], next_id


# sources of every kind: new, met again, simplified to a model met before, unreadable, of more
# parameters than the task names, with a name the task does not allow (found when validated)
_SOURCES = ["(* a x)", "(* a x)", "(* x a)", "(+ a (* b x))", "(* a (sin (* b x)))", "(+ a",
            "(* (+ a b) x)", "(+ a b c d e f g h i j k l m n o p q r s t u v w)", "(* a zz)",
            ")", "(+ (* a x) (* b x))", "(exp (* a x))", "(* 2.5 (cos (* b x)))", "(+ a (* b x))",
            "", "(* a (sin x) (cos x))"]


def _rounds(prop, task=None, first_id=0, id_step=1, recorded=None):
    task = task or get_task("damped")
    state = SearchState(task=task, grammar=None)
    return _Rounds(task, prop, state, Scorer(task), 0.0, 16, None, recorded=recorded,
                   first_id=first_id, id_step=id_step)


def _check_same(run, srcs, seen_before=()):
    """prepare's batch of ``srcs`` on ``run`` is the reference's records, with the same seen
    set after it and its valid records' programs those of their models."""
    ref_seen = run.__dict__.setdefault("reference_seen", Seen())  # (kept over its rounds)
    for s in seen_before:
        run.state.seen.add(s)
        ref_seen.add(s)
    first = run.next_id
    want, want_todo, want_models, want_next = _reference(
        run.task, run.prop, run.scorer, run.simplifier, ref_seen, run.recorded, first, run.id_step, srcs)
    b = run.prepare(srcs)
    assert b.records == want
    assert [list(r) for r in b.records] == [list(r) for r in want]  # (field order)
    assert run.next_id == want_next
    assert b.slots == want_todo and [r["id"] for r in b.slots] == [r["id"] for r in want_todo]
    assert [prog.source for prog, _ in b.items] == want_models
    for s in {*srcs, *want_models}:
        assert (s in run.state.seen) == (s in ref_seen), s
    assert len(run.state.seen) == len(ref_seen)
    return b


def test_a_simplifying_proposers_records_are_the_python_loops():
    b = _check_same(_rounds(_Proposer()), _SOURCES, seen_before=["(* a (exp x))"])
    status = {r["proposed"]: r["status"] for r in b.records}
    assert status["(* x a)"] == "duplicate" and status["(+ a"] == "invalid"
    assert any(r["status"] == "invalid" and r["error"] for r in b.records)


def test_a_rounds_blank_record_is_made_once_a_proposer_name_and_never_written():
    """prepare copies one blank record a proposer name (rounds._blank), kept over rounds and
    proposers of that name and never written; the records of several rounds and of a proposer
    renamed between them are the reference's (its blank made anew each round), and a name that
    is not a str gets a blank of its own each time."""
    run = _rounds(_Proposer(name="kept-blank"))
    blank = rounds._blank("kept-blank")
    before = dict(blank)
    _check_same(run, _SOURCES[:8])
    _check_same(run, _SOURCES[8:])
    run.prop.name = "renamed"
    b = _check_same(run, ["(* a (cos x))", "(+ a (* b (cos x)))"])
    assert {r["proposer"] for r in b.records} == {"renamed"}
    assert rounds._blank("kept-blank") is blank and blank == before
    assert list(blank) == ["id", "proposer", "proposed", "model", "status", "params",
                           "train_error", "heldout_error", "r2", "size", "skeleton", "error"]
    odd = rounds._blank(["odd"])
    assert odd["proposer"] == ["odd"] and rounds._blank(["odd"]) is not odd
    run.prop.name = ("a", "tuple")  # (hashable, but not a str: not kept either)
    b = _check_same(run, ["(* a (tan x))"])
    assert b.records[0]["proposer"] == ("a", "tuple")


def test_ids_count_from_the_first_by_the_step_over_rounds():
    run = _rounds(_Proposer(), first_id=3, id_step=4)
    _check_same(run, _SOURCES[:7])
    b = _check_same(run, _SOURCES[7:])
    assert [r["id"] for r in b.records] == [3 + 4 * k for k in range(7, len(_SOURCES))]


def test_a_likelihood_tasks_sources_are_not_simplified():
    _check_same(_rounds(_Proposer(), task=get_task("kalman")),
                ["(+ q r)", "(+ r q)", "(* q 1)", "(+ q", "(+ q r)"])


def test_a_canonical_proposers_entries_give_the_model_its_size_and_skeleton():
    task = get_task("damped")
    s = Simplifier(task.params)
    made = {}
    for src in ["(* a x)", "(+ a (* b x))", "(* a (sin (* b x)))"]:
        tree = s.canonicalize(to_tree(src))
        made[to_source(tree)] = (tree, to_source(tree), size(tree), skeleton(tree, task.params))
    # (an entry's fields are taken as they are: a size the tree does not have shows it)
    made["(* a x)"] = (made["(* a x)"][0], "(* a x)", 99, "sk")
    srcs = [*made, "(* x a)", "(* a x)", "(+ a", *_SOURCES]
    for canonical in (True, False):  # (not canonical: the entry's tree simplified again)
        b = _check_same(_rounds(_Proposer(canonical=canonical, made=made), task=task), srcs)
        assert b.records[0]["size"] == 99 and b.records[0]["skeleton"] == "sk"


def test_bred_childrens_lazy_entries_give_the_model_their_size_and_skeleton():
    """A Mutate proposer's entries for the children it bred (its ``made``: lazy _Made entries,
    whose size and skeleton round_records reads directly) give each record the size and
    skeleton their [2] and [3] give (the reference's reading), with or without simplifying."""
    from ndvm.cosearch import Grammar
    from ndvm.cosearch import islands as isl

    task = get_task("damped")
    g = task.grammar or Grammar(inputs=tuple(task.inputs), params=tuple(task.params),
                                loop=task.loops)
    island, _ = isl.run_epoch(isl.Island(task, 0, 1, seed=3, grammar=g, batch=16), 96, [])
    made = dict(island.rounds.prop.made)
    lazy = [src for src, e in made.items() if type(e).__name__ == "_Made"]
    assert len(lazy) >= 4
    for canonical in (True, False):
        b = _check_same(_rounds(_Proposer(canonical=canonical, made=made), task=task),
                        [*made, "(* a x)", "(+ a"])
        by_src = {r["proposed"]: r for r in b.records}
        for src in lazy:
            if by_src[src]["status"] != "duplicate" and canonical:
                assert (by_src[src]["size"], by_src[src]["skeleton"]) == (made[src][2],
                                                                          made[src][3])


def test_a_canonical_entrys_tree_with_too_many_parameters_is_invalid_when_simplified():
    task = get_task("damped")
    made = {"(* a x)": (to_tree("(* a x)"), "(* a x)", 3, "(* P x)")}

    def too_many(tree):
        raise TooManyParameters("the model needs 5 parameters\n(more)")

    for canonical in (True, False):
        run = _rounds(_Proposer(canonical=canonical, made=made), task=task)
        run.simplifier.canonicalize = too_many
        b = _check_same(run, ["(* a x)", "(* b x)"])
        if canonical:  # (a canonical proposer's sources are not simplified)
            assert [r["error"] for r in b.records] == [None, None] and len(b.slots) == 2
        else:  # (simplified, the entry's tree too: the error is the record's)
            assert [r["status"] for r in b.records] == ["invalid", "invalid"]
            assert all(r["error"] == "the model needs 5 parameters" for r in b.records)


def test_a_resumed_round_that_proposes_otherwise_raises_resume_mismatch():
    recorded = {0: {"proposed": "(* a x)"}, 1: {"proposed": "(+ a (* b x))"}}
    run = _rounds(_Proposer(), recorded=recorded)
    with pytest.raises(rounds.ResumeMismatch,
                       match=r"^cannot resume: candidate 1 was '\(\+ a \(\* b x\)\)' in the "
                             r"earlier session and is '\(exp x\)' now \(resume needs the same"):
        run.prepare(["(* a x)", "(exp x)"])
    run = _rounds(_Proposer(), recorded=recorded)
    b = _check_same(run, ["(* a x)", "(+ a (* b x))", "(exp x)"])
    assert not b.replayed
    run = _rounds(_Proposer(), recorded=recorded)
    assert run.prepare(["(* a x)", "(+ a (* b x))"]).replayed


def test_round_validated_keeps_the_valid_and_gives_the_others_their_errors_first_line():
    todo = [{"id": k, "error": None} for k in range(5)]
    got = [("p0", ()), ValueError("bad\nmore"), ("p2", ("a",)), KeyError(), ("p4", ())]
    items, slots = round_validated(todo, got[:4])  # (the shorter of the two, as zip)
    assert items == [("p0", ()), ("p2", ("a",))] and [r["id"] for r in slots] == [0, 2]
    assert todo[1]["error"] == "bad" and todo[3]["error"] == "KeyError"
    assert todo[4]["error"] is None


def test_first_line_is_the_messages_first_line_or_the_types_name():
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(ValueError()) == "ValueError"
    assert first_line(KeyError("k")) == "'k'"
    assert rounds._first_line is first_line


def _scored_reference(items, slots, fitted, after, assess, fit_seconds, stamp, good):
    """_Rounds.finish's first loop as it was in Python: the first good record."""
    first = None
    for (prog, _), rec, p, aft in zip(items, slots, fitted, after):
        rec["fit_seconds"] = fit_seconds
        rec["time"] = stamp
        if not isinstance(p, dict):
            rec["status"] = "failed"
            rec["error"] = str(p).splitlines()[0] if str(p) else type(p).__name__
            continue
        why, scores = assess(prog, p, aft)
        rec["params"] = p
        if why is not None:
            rec["status"] = "failed"
            rec["error"] = why
        else:
            rec["status"] = "ok"
            rec["train_error"], rec["heldout_error"], rec["r2"] = scores
            if first is None and good is not None and good(rec):
                first = rec
    return first


def _round_to_score():
    """A round's items, records, fits and evaluations after them, of every outcome."""
    fitted = [{"a": 1.0}, RuntimeError("no\nmore"), {"a": 2.0}, {"a": 3.0}, ValueError(),
              {"a": 4.0}, {"a": 5.0}]
    items = [(f"p{k}", ("a",)) for k in range(len(fitted))]
    slots = [{"id": k, "status": "invalid", "params": {}, "error": None}
             for k in range(len(fitted))]
    return items, slots, fitted, [f"after{k}" for k in range(len(fitted))]


_SCORING = Scoring(1.0, 10, 5, 2.0)  # (none of _round_to_score's afters is "ok")


def _assess(prog, p, after):
    a = p["a"]
    if a == 2.0:
        return "off the data's domain", None
    return None, (a, a + 0.5 if a != 4.0 else math.inf, 1.0 - 1.0 / a)


def test_round_scored_scores_each_record_as_the_python_loop_did():
    for good in (None, lambda r: r["r2"] > 0.6, lambda r: False):
        items, slots, fitted, after = _round_to_score()
        want_slots = [dict(r) for r in slots]
        want = _scored_reference(items, want_slots, fitted, after, _assess, 0.25, 1.5, good)
        got = round_scored(items, slots, fitted, after, _SCORING, _assess, 0.25, 1.5, good)
        assert slots == want_slots and [list(r) for r in slots] == [list(r) for r in want_slots]
        assert (got is None and want is None) or got["id"] == want["id"]
    assert got is None and round_scored(items[:2], slots, fitted, after, _SCORING, _assess, 0, 0,
                                         None) \
        is None


def test_round_kept_stamps_replays_and_keeps_the_ok_finite_records():
    items, slots, fitted, after = _round_to_score()
    round_scored(items, slots, fitted, after, _SCORING, _assess, 0.25, 1.5, None)
    extra = {"id": 9, "status": "ok", "heldout_error": float("nan")}
    records = [*slots, extra, {"id": 10, "status": "duplicate"}]
    seen = []

    def replayed(old, rec):
        seen.append((old["id"], rec["id"]))
        rec["time"] = old["time"]

    ok = round_kept(records, 7.0, {3: {"id": 3, "time": 0.5}, 10: {"id": 10, "time": 0.75}},
                    replayed)
    assert [r["id"] for r in ok] == [0, 3, 6]  # (5's held-out error is not finite, 9's NaN)
    assert seen == [(3, 3), (10, 10)]
    assert [r["time"] for r in records] == [1.5, 1.5, 1.5, 0.5, 1.5, 1.5, 1.5, 7.0, 0.75]
    assert round_kept(records, 8.0, {}, None) == ok  # (nothing recorded: none replayed)


def _off_reference(bad, most, spread):
    """Scorer._off as it was in Python."""
    if bad:
        return "not finite between the data points (a pole or a domain edge)"
    if most > 10.0 * spread:
        return "a pole between the data points (value beyond 10x the target's spread)"
    return None


def _r_squared_reference(mse, var):
    """ndvm.cosearch.task.r_squared as it was in Python."""
    if not math.isfinite(mse):
        return -math.inf
    if var > 0:
        return 1.0 - mse / var
    return 1.0 if mse == 0 else 0.0


def _errors_reference(train_sse, held_sse, n, m, held_var):
    """Scorer._errors as it was in Python."""
    tr = float(train_sse) / n if n else math.nan
    ho = float(held_sse) / m if m else math.nan
    tr = tr if math.isfinite(tr) else math.inf
    ho = ho if math.isfinite(ho) else math.inf
    return tr, ho, _r_squared_reference(ho, held_var)


_SUMS = [0.0, 1.0, 3.7, 1e-300, 1e300, 1.7976931348623157e308, math.inf, -math.inf, math.nan,
         -2.5, 0.1 + 0.2]


def test_r_squared_keeps_the_python_rule_bit_for_bit():
    """task.r_squared (native, the rule Scoring.errors and the selection call) gives what the
    Python function gave, bit for bit and as a float, on finite, huge, tiny, infinite and NaN
    errors against positive, zero, negative and NaN variances, Python or numpy numbers alike."""
    for mse in _SUMS:
        for var in (0.5, 3.0, 1e-300, 1e300, 0.0, -0.0, -1.0, math.inf, math.nan):
            want = _r_squared_reference(mse, var)
            for a, b in ((mse, var), (np.float64(mse), np.float64(var))):
                got = r_squared(a, b)
                assert type(got) is float
                assert repr(got) == repr(float(want)), (mse, var)
                assert math.copysign(1, got) == math.copysign(1, want)
    assert r_squared(1, 2) == 0.5  # (ints read as floats)


def test_scoring_keeps_the_python_rules_bit_for_bit():
    """Scoring.off and Scoring.errors (Scorer._off's and _errors' rules, native) give what the
    Python code gave, bit for bit, on finite, huge, tiny, infinite and NaN sums, no points, a
    constant target (variance 0) and a pole just past 10x the spread; the Scorer's own methods
    are theirs."""
    for spread in (1.0, 0.3, math.nan):
        s = Scoring(spread, 7, 3, 0.5)
        for bad in (0, 1, 3, 0.0, 2.0, math.nan):
            for most in (0.0, 10.0 * spread, math.nextafter(10.0 * spread, math.inf), math.inf,
                         math.nan):
                assert s.off(bad, most) == _off_reference(bad, most, spread)
    for n, m in ((7, 3), (0, 3), (7, 0), (0, 0), (1, 1)):
        for var in (0.5, 0.0, 3.0):
            s = Scoring(1.0, n, m, var)
            for tr in _SUMS:
                for ho in _SUMS:
                    got, want = s.errors(tr, ho), _errors_reference(tr, ho, n, m, var)
                    assert repr(got) == repr(want)
                    assert [math.copysign(1, x) for x in got] == \
                        [math.copysign(1, x) for x in want]
    scorer = Scorer(get_task("damped"), workers=1)
    assert scorer._errors(2.0, 3.0) == scorer.scoring.errors(2.0, 3.0)
    assert scorer._off(0, 1e9) == scorer.scoring.off(0, 1e9) is not None


def test_scoring_assesses_from_the_numbers_when_ok_else_evaluates():
    """Scoring.assess: an "ok" evaluation after the fit scored from its numbers (off-domain
    first, then the errors); anything else (None, "failed", a status of None) handed to
    ``evaluate`` with the program, params and what was given; the Scorer's assess is it."""
    s = Scoring(2.0, 4, 2, 1.5)
    calls = []

    def evaluate(prog, params, after):
        calls.append((prog, params, after))
        return "evaluated", None

    p = {"a": 1.0}
    for bad, most in ((0.0, 1.0), (1.0, 1.0), (math.nan, 1.0), (0.0, 25.0), (0.0, math.nan)):
        for tr, ho in ((4.0, 2.0), (math.inf, 1.0), (math.nan, math.nan), (0.0, 0.0)):
            stats = (bad, most, 9.0, 0.0, 8.0, tr, 0.0, 7.0, ho)
            why = _off_reference(bad, most, 2.0)
            want = (why, None) if why else (None, _errors_reference(tr, ho, 4, 2, 1.5))
            assert repr(s.assess("prog", p, ("ok", stats), evaluate)) == repr(want)
    assert calls == []
    for after in (None, ("failed", None), (None, None)):
        assert s.assess("prog", p, after, evaluate) == ("evaluated", None)
    assert calls == [("prog", p, None), ("prog", p, ("failed", None)), ("prog", p, (None, None))]
    for stats in ((0.0, 1.0), tuple(range(10))):  # (not the nine numbers of three segments)
        with pytest.raises(ValueError) as got:
            s.assess("prog", p, ("ok", stats), evaluate)
        with pytest.raises(ValueError) as want:
            bad, most, _, _, _, tr, _, _, ho = stats
        assert str(got.value) == str(want.value)
    scorer = Scorer(get_task("damped"), workers=1)
    stats = (0.0, 0.5, 0.0, 0.0, 1.0, 2.0, 0.0, 1.0, 3.0)
    assert scorer.assess(None, p, ("ok", stats)) == \
        (None, _errors_reference(2.0, 3.0, *scorer.counts, scorer.held_var))


def test_round_scored_scores_ok_numbers_natively_and_hands_the_rest_to_evaluate():
    """round_scored with "ok" evaluations after the fits among others: the same records as the
    Python loop calling Scorer.assess's rule on each (from the numbers, or evaluated)."""
    s = Scoring(1.0, 10, 5, 2.0)
    fitted = [{"a": 1.0}, {"a": 2.0}, RuntimeError("x"), {"a": 3.0}, {}, {"a": 4.0}]
    after = [("ok", (0.0, 1.0, 0, 0, 0, 5.0, 0, 0, 2.5)), None,
             ("ok", (0.0, 1.0, 0, 0, 0, 5.0, 0, 0, 2.5)), ("ok", (1.0, 1.0, 0, 0, 0, 5.0, 0, 0, 2.5)),
             ("ok", (0.0, 0.5, 0, 0, 0, 0.0, 0, 0, 0.0)), ("failed", None)]
    items = [(f"p{k}", ("a",)) for k in range(len(fitted))]

    def slots():
        return [{"id": k, "status": "invalid", "params": {}, "error": None}
                for k in range(len(fitted))]

    def evaluate(prog, p, aft):
        return (None, (1.0, 2.0, 0.0)) if p["a"] == 2.0 else ("off", None)

    def assess(prog, p, aft):
        return s.assess(prog, p, aft, evaluate)

    for good in (None, lambda r: r["r2"] < 0.9, lambda r: False):
        want_slots, got_slots = slots(), slots()
        want = _scored_reference(items, want_slots, fitted, after, assess, 0.5, 2.0, good)
        got = round_scored(items, got_slots, fitted, after, s, evaluate, 0.5, 2.0, good)
        assert repr(got_slots) == repr(want_slots)
        assert (got is None and want is None) or got["id"] == want["id"]
    assert [r["status"] for r in got_slots] == ["ok", "ok", "failed", "failed", "ok", "failed"]


def _fits_reference(items, evaluated):
    """_Calibration.__init__'s loop as it was in Python, with its names and their count."""
    todo, bare, progs, bare_progs = [], [], [], []
    for i, (prog, ps) in enumerate(items):
        if ps:
            todo.append(i)
            progs.append(prog)
        elif evaluated:
            bare.append(i)
            bare_progs.append(prog)
    names = [items[i][1] for i in todo]
    return todo, bare, progs, bare_progs, names, sum(len(ns) for ns in names)


def _fitted_reference(items, todo, bare, got, outcome):
    """_Calibration.finish's loops as they were in Python."""
    out = [None if ps else {} for _, ps in items]
    after = [None] * len(items)
    for i, r in zip(todo, got):
        out[i], after[i] = outcome(r)
    for i, r in zip(bare, got[len(todo):]):
        after[i] = outcome(r)[1]
    return out, after


def test_round_fits_and_round_fitted_sort_out_a_round_as_the_python_loops_did():
    """round_fits (the items with and without params) and round_fitted (their fits' params and
    evaluations after them, a failed fit's error made by ``outcome``) give what the Python
    loops gave: with and without evaluated programs, none of either, results missing at the
    end, and the same ``{}`` never shared between two items."""
    def outcome(r):
        return r if type(r) is tuple else (r, None)

    ps = [("a",), (), ("a", "b"), (), ("c",), ("a", "b", "c"), ()]
    items = [(f"p{k}", names) for k, names in enumerate(ps)]
    for part in (items, items[:1], [items[1]], []):
        for evaluated in (True, False):
            assert round_fits(part, evaluated) == _fits_reference(part, evaluated)
            todo, bare = round_fits(part, evaluated)[:2]
            results = [({"a": float(k)}, ("ok", (k,))) for k in range(len(todo))] + \
                [({}, ("failed", None)) for _ in bare]
            if todo:
                results[0] = ValueError("no fit")
            for got in (results, results[:len(todo)], results[:max(0, len(todo) - 1)]):
                out, after = round_fitted(part, todo, bare, got, outcome)
                assert (out, after) == _fitted_reference(part, todo, bare, got, outcome)
                empty = [id(o) for o in out if o == {}]
                assert len(set(empty)) == len(empty)
    with pytest.raises(ValueError):  # (an item not a (program, params) pair)
        round_fits([("p",)], True)


def test_row_blocks_are_the_slices_of_each_names_rows():
    """row_blocks (a round's starts, _Calibration.__init__) gives each names' rows as the
    slices ``rows[a:b]`` did: the same names object, shape, strides, values, flags and base;
    rows not a C-contiguous 2-D float64 array, or not one a name, raise ValueError."""
    flags = ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED")
    for names in ([("a",)], [("a",), ("a", "b"), ("c",)], [("a", "b", "c")] * 4):
        for s in (1, 3, 16):
            k = sum(len(ns) for ns in names)
            rows = 0.0 + np.arange(1.0, s + 1) * np.random.default_rng(k).standard_normal((k, s))
            ends = itertools.accumulate(len(ns) for ns in names)
            want = [(ns, rows[e - len(ns):e]) for ns, e in zip(names, ends)]
            got = row_blocks(names, rows)
            assert len(got) == len(want)
            for (a, x), (b, y) in zip(got, want):
                assert a is b and x.shape == y.shape and x.strides == y.strides
                assert x.tobytes() == y.tobytes() and x.base is y.base
                assert [x.flags[f] for f in flags] == [y.flags[f] for f in flags]
    assert row_blocks([], np.zeros((0, 3))) == []
    for names, rows in (([("a",)], np.zeros((2, 3))), ([("a", "b")], np.zeros((1, 3))),
                        ([("a",)], np.zeros((1, 3), dtype=np.float32)),
                        ([("a",)], np.zeros(3)), ([("a", "b")], np.zeros((3, 2)).T)):
        with pytest.raises(ValueError):
            row_blocks(names, rows)
