"""The evaluation after a fit (``ndvm.fit.EvaluateAfter``, fit_many's and begin_fits' ``after=``):
its native reductions equal numpy's on the same values bit for bit (random programs, NaN, inf,
poles, any lane count, both clients, threads, an executor, processes), and the co-search scores a
candidate from them exactly as from its own evaluation (same records, same off-domain messages)."""
import pickle
import random
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

import ndvm
from ndvm.cosearch import rounds
from ndvm.cosearch.score import Scorer
from ndvm.cosearch.tasks import get_task
from ndvm.fit import EvaluateAfter
from ndvm.parallel import fit_outcome

from conftest import CLIENTS

X = np.linspace(0.1, 6.0, 60)
Y = np.exp(-0.3 * X) * np.cos(2 * X) + 0.02 * np.random.default_rng(0).standard_normal(60)
FIT = dict(data={"x": X}, target=Y, optimizer="lm", steps=20, starts=3, seed=0)

# hand-picked: poles, domain edges, overflow, a program without the input, a constant
EDGES = [
    "(/ a (- x b))",          # a pole when b falls inside the points
    "(log (- x a))",          # NaN left of a
    "(sqrt (- a x))",         # NaN right of a
    "(exp (* a x x x))",      # inf far out
    "(* a (cos (* b x)))",
    "(+ a b)",                # no input: one value for every point
    "(* a (tan (* b x)))",
    "(/ (* a x) (- (* x x) b))",
]


def _random_program(rng, depth=3):
    """A random expression of x, a and b (unary and binary operations, some partial)."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice(["x", "a", "b", "x", f"{rng.uniform(-2, 2):.3g}"])
    if rng.random() < 0.4:
        op = rng.choice(["sin", "cos", "exp", "log", "sqrt", "tanh", "abs", "square"])
        return f"({op} {_random_program(rng, depth - 1)})"
    op = rng.choice(["+", "-", "*", "/", "pow"])
    return f"({op} {_random_program(rng, depth - 1)} {_random_program(rng, depth - 1)})"


def _programs(n, seed=1):
    rng = random.Random(seed)
    out = list(EDGES)
    while len(out) < n:
        p = _random_program(rng)
        if {"a", "b"} & set(ndvm.parse(p).free_names):  # (something to fit)
            out.append(p)
    return out


def _after(M, seed=2):
    """EvaluateAfter at M points (wider than the data, so poles and domain edges show) with
    three segments: a scalar reference, an array reference, and an empty or short tail."""
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-1.0, 8.0, M)
    a, b = M // 3, (2 * M) // 3
    ref = rng.normal(size=M)
    return EvaluateAfter({"x": pts}, [(0, a, float(Y.mean())), (a, b, ref[a:b]), (b, M, ref[b:])])


def _numpy_stats(prog, params, after, client):
    """The same numbers from an Evaluator.evaluate and numpy; or None when it raises."""
    ev = ndvm.Evaluator(client=client)
    try:
        v = ev.evaluate(prog, params=params, data=after.points).value[0]
    except Exception:  # noqa: BLE001 - the native evaluation must have failed too
        return None
    v = np.broadcast_to(v, (after.size,))
    out = []
    with np.errstate(all="ignore"):
        for start, stop, ref in after.segments:
            d = v[start:stop] - ref
            most = float(np.max(np.abs(d))) if stop > start else -np.inf
            out.append((np.count_nonzero(~np.isfinite(v[start:stop])), most,
                        float(np.sum(d * d))))
    return np.array(out, dtype=np.float64)


def _same(got, want):
    """Bit for bit, NaN equal to NaN."""
    return got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


def _check(results, progs, after, client):
    n_ok = 0
    for p, r in zip(progs, results):
        assert isinstance(r, ndvm.FitResult), r
        status, stats = EvaluateAfter.read(r)
        want = _numpy_stats(p, r.params, after, client)
        if want is None:
            assert status == "failed", p
            continue
        assert status == "ok", (p, status)
        assert _same(stats, want), (p, stats, want)
        n_ok += 1
    return n_ok


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("M", [1, 7, 8, 129, 300, 1001])
def test_native_reductions_equal_numpy_bit_for_bit(client, M):
    progs = _programs(24)
    after = _after(M)
    got = ndvm.fit_many(progs, workers=1, client=client, after=after, **FIT)
    assert _check(got, progs, after, client) >= len(progs) // 2
    nonfinite = [EvaluateAfter.read(r)[1] for r in got]
    if M > 100:  # (the edge programs do leave the domain somewhere on the wide points)
        assert any(s is not None and s[:, 0].sum() > 0 for s in nonfinite)


def test_the_means_are_numpys_means():
    """sum / n of a segment is np.mean of its squared errors, bit for bit (pairwise order)."""
    after = _after(1000)
    r = ndvm.fit_many(["(* a (cos (* b x)))"], workers=1, after=after, **FIT)[0]
    v = ndvm.Evaluator().evaluate("(* a (cos (* b x)))", params=r.params,
                                  data=after.points).value[0]
    _, stats = EvaluateAfter.read(r)
    for (start, stop, ref), s in zip(after.segments, stats):
        assert s[2] / (stop - start) == np.mean((v[start:stop] - ref) ** 2)


def test_a_segments_reference_number_is_the_same_as_a_float_an_array_or_numpys():
    """A segment's reference given as one number reads the same whether it is a float, a numpy
    float64 or a 0-d array (FitSpec tells a number natively for a float or an ndarray, by
    np.ndim for anything else)."""
    after = _after(90)
    (a, b, c), rest = after.segments[0], after.segments[1:]
    got = []
    for ref in (c, np.float64(c), np.array(c)):
        each = EvaluateAfter(after.points, [(a, b, ref), *rest])
        got.append(EvaluateAfter.read(ndvm.fit_many(["(* a (cos (* b x)))"], workers=1,
                                                    after=each, **FIT)[0]))
    assert got[0][0] == "ok"
    for status, stats in got[1:]:
        assert status == "ok" and np.array_equal(stats, got[0][1])


def test_threads_begin_fits_executor_and_processes_give_the_same_numbers():
    progs = _programs(30, seed=5)
    after = _after(257)
    want = [r.after.tobytes() for r in ndvm.fit_many(progs, workers=1, after=after, **FIT)]
    assert [r.after.tobytes() for r in ndvm.fit_many(progs, workers=2, chunk_size=3,
                                                     after=after, **FIT)] == want
    begun = ndvm.parallel.begin_fits(progs, workers=2, after=after, **FIT)
    begun.drain(5)
    assert [r.after.tobytes() for r in begun.finish()] == want
    with ProcessPoolExecutor(2) as ex:
        got = ndvm.fit_many(progs, executor=ex, chunk_size=7, after=after, **FIT)
    assert [r.after.tobytes() for r in got] == want
    again = pickle.loads(pickle.dumps(got))
    assert [r.after.tobytes() for r in again] == want
    assert pickle.loads(pickle.dumps(after)).segments[1][2].tobytes() == \
        after.segments[1][2].tobytes()


@pytest.mark.parametrize("with_after", [True, False])
def test_a_batch_read_as_outcomes_is_fit_outcome_of_each_fit_result(with_after):
    """Begun.finish(outcomes=True) (a batch read back in one native call, no FitResult made)
    gives what fit_outcome gives of each FitResult of the same fits: the same params (values
    and key order), the same after numbers bit for bit (an evaluation that raised: "failed"),
    and a failed fit's CandidateError, the same text; on an executor too."""
    progs = _programs(30, seed=9) + ["(if (< x 7) (* a x) (car 1.5))", "(* a (car x))",
                                     "(+ a b c)"]
    after = _after(129) if with_after else None
    want = ndvm.fit_many(progs, workers=1, after=after, **FIT)
    assert sum(not isinstance(r, ndvm.FitResult) for r in want) == 1  # ((car x) fails)

    def same(got):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if not isinstance(w, ndvm.FitResult):
                assert type(g) is type(w) and repr(g) == repr(w)
                continue
            params, (status, numbers) = fit_outcome(w)
            assert list(g[0].items()) == list(params.items())
            # (the last but two raises after its fit)
            assert g[1][0] == status == (None if not with_after else
                                         "failed" if w is want[-3] else "ok")
            assert repr(g[1][1]) == repr(numbers)
            if status == "ok":
                assert np.array_equal(np.reshape(numbers, (-1, 3)), EvaluateAfter.read(w)[1],
                                      equal_nan=True)

    for workers in (1, 2):
        same(ndvm.parallel.begin_fits(progs, workers=workers, after=after,
                                      **FIT).finish(outcomes=True))
    with ProcessPoolExecutor(2) as ex:
        same(ndvm.parallel.begin_fits(progs, executor=ex, after=after,
                                      **FIT).finish(outcomes=True))


def test_an_evaluation_that_raises_after_the_fit_is_marked_failed_and_the_fit_stands():
    prog = "(if (< x 7) (* a x) (car 1.5))"  # fine on the data, an error beyond x = 7
    r = ndvm.fit_many([prog], workers=1, after=_after(64), **FIT)[0]
    assert isinstance(r, ndvm.FitResult) and np.isfinite(r.loss)
    assert EvaluateAfter.read(r) == ("failed", None)
    plain = ndvm.fit_many([prog], workers=1, **FIT)[0]
    assert plain.after is None and EvaluateAfter.read(plain) == (None, None)
    assert plain.params == r.params


def test_bad_evaluate_after_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="differ in size"):
        EvaluateAfter({"x": [1.0, 2.0], "y": [1.0]}, [])
    with pytest.raises(ValueError, match="not within"):
        EvaluateAfter({"x": [1.0, 2.0]}, [(0, 3, 0.0)])
    with pytest.raises(ValueError, match="reference values"):
        EvaluateAfter({"x": [1.0, 2.0]}, [(0, 2, [1.0])])
    with pytest.raises(TypeError, match="EvaluateAfter"):
        ndvm.fit_many(["(* a x)"], after={"x": X}, **FIT)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("task_name", ["damped", "recurrence"])
def test_the_scorer_assesses_from_the_native_numbers_as_from_its_own_evaluation(client,
                                                                                task_name):
    """assess(prog, params, after) == assess(prog, params): every record field, and the
    off-domain messages (poles, non-finite values, an evaluation that fails between the data
    points) word for word."""
    task = get_task(task_name)
    scorer = Scorer(task, client=client, workers=1)
    assert scorer.after is not None
    # an error at one probe point between the data points (none of the data in its window)
    data = np.sort(np.concatenate([scorer.train[0]["x"], scorer.held[0]["x"]]))
    probe = scorer.dense["x"]
    gap = max(range(len(probe)), key=lambda i: np.min(np.abs(data - probe[i])))
    lo, hi = float(probe[gap]) - 1e-9, float(probe[gap]) + 1e-9
    assert not np.any((data > lo) & (data < hi))
    progs = _programs(40, seed=7) + [
        "(/ a (- x b))", "(log (- x a))", "(* a (/ 1 (- x 3.0001)))",
        f"(if (and (> x {lo!r}) (< x {hi!r})) (car 1.5) (* a x))", "(* a (exp (* b x x x)))"]
    rng = np.random.default_rng(3)
    items, params = [], []
    for src in progs:
        prog = ndvm.parse(src)
        names = tuple(n for n in prog.free_names if n in task.params)
        items.append(prog)
        params.append({n: float(rng.normal(0, 1)) for n in names})
    fits = ndvm.fit_many(items, data=scorer.train[0], target=scorer.train[1],
                         options=scorer.fit, after=scorer.after, workers=1,
                         per_candidate=[{"init": {n: np.full(scorer.fit.starts, v)
                                                  for n, v in p.items()}} for p in params])
    messages = set()
    for prog, r in zip(items, fits):
        if not isinstance(r, ndvm.FitResult):
            continue
        p = dict(r.params)
        native = scorer.assess(prog, p, fit_outcome(r)[1])
        plain = scorer.assess(prog, p)
        assert repr(native) == repr(plain), (prog.source, native, plain)
        if native[0]:
            messages.add(native[0].split(":")[0])
    assert "not finite between the data points (a pole or a domain edge)" in messages
    assert "fails between the data points" in messages


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("executor", [False, True])
def test_programs_without_parameters_are_evaluated_in_the_batch_and_score_as_in_python(
        client, executor):
    """A round's programs without parameters are evaluated in the batch's native call
    (FitSetup.begin's ``evaluated``: no fit, the evaluation after it alone) and assess from
    those numbers exactly as from its own evaluation: the same scores, the same off-domain and
    failure messages word for word; on an executor too."""
    task = get_task("damped")
    scorer = Scorer(task, client=client, workers=1)
    rng = random.Random(4)
    srcs = ["(* x 2.0)", "(sin x)", "3.5", "(+ 1.0 2.0)", "(/ 1 (- x 3.0))", "(log (- x 1))",
            "(car x)", "(exp (* x x x))", "(if (> x 5.9) (car x) x)"]
    while len(srcs) < 60:
        src = _random_program(rng)
        if not {"a", "b"} & set(ndvm.parse(src).free_names):
            srcs.append(src)
    progs = [ndvm.parse(src) for src in srcs]
    if executor:
        with ProcessPoolExecutor(2) as ex:
            setup = ndvm.parallel.FitSetup(scorer.train[0], scorer.train[1], executor=ex,
                                           options=scorer.fit, after=scorer.after)
            got = setup.begin([], evaluated=progs).finish(outcomes=True)
    else:
        got = scorer.fitting().begin([], evaluated=progs).finish(outcomes=True)
    assert len(got) == len(progs)
    n_ok = 0
    for src, prog, r in zip(srcs, progs, got):
        params, after = r
        assert params == {}
        n_ok += after[0] == "ok"
        native = scorer.assess(prog, params, after)
        assert repr(native) == repr(scorer.assess(prog, {})), src
    assert n_ok >= len(progs) // 2


def test_a_rounds_evaluations_alone_of_free_names_met_before_are_staged_in_one_native_call(
        monkeypatch):
    """Programs without parameters whose free names the plan has staged an evaluation of before
    are staged by FitBatch.add_ready with the fitted ones (FitPlan.stage_evaluation is not
    called for them again): the same outcomes as when each was staged on its own, in order."""
    from ndvm.fit import FitPlan

    task = get_task("damped")
    scorer = Scorer(task, workers=1)
    fitted = [ndvm.parse(src) for src in ("(* a x)", "(+ a (* b x))", "(* a (sin x))")]
    bare = [ndvm.parse(src) for src in ("(* x 2.0)", "3.5", "(sin x)", "(/ 1 (- x 3.0))")]
    first = scorer.fitting().begin(fitted, evaluated=bare).finish(outcomes=True)
    alone = []
    staged = FitPlan.stage_evaluation

    def counted(plan, batch, prog):
        alone.append(prog.source)
        return staged(plan, batch, prog)

    monkeypatch.setattr(FitPlan, "stage_evaluation", counted)
    again = scorer.fitting().begin(fitted, evaluated=bare).finish(outcomes=True)
    assert alone == []  # (x and no free names: both staged before)
    assert repr(again) == repr(first)
    new = [ndvm.parse("(cos x)"), ndvm.parse("(* 2.0 (cos x))")]
    scorer.fitting().begin(fitted, evaluated=new).finish(outcomes=True)
    assert alone == []  # (free names met before: the spec is the one staged for them)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_search_scored_natively_keeps_every_record_of_one_scored_in_python(monkeypatch,
                                                                             workers):
    """The same search with the native numbers ignored (every candidate evaluated again on the
    proposer thread, as before): the same records, front and chosen model."""
    def run():
        res = ndvm.search("damped", max_candidates=300, seed=3, workers=workers, refits=1)
        recs = [{k: v for k, v in r.items() if k not in ("time", "fit_seconds")}
                for r in res.records]
        return repr(recs), [r["model"] for r in res.front], res.best["model"]

    seen = []
    scored = rounds.round_scored

    def read(items, slots, fitted, after, *rest):
        seen.extend((a is not None and a[0] == "ok", not ps) for (_, ps), a in zip(items, after))
        return scored(items, slots, fitted, after, *rest)

    monkeypatch.setattr(rounds, "round_scored", read)
    native = run()
    assert sum(ok for ok, _ in seen) > 200  # (the native numbers were there to read)
    assert (True, True) in seen  # (programs without parameters' too)
    monkeypatch.setattr(rounds, "round_scored", lambda items, slots, fitted, after, *rest:
                        scored(items, slots, fitted, [None] * len(after), *rest))
    monkeypatch.setattr(Scorer, "assess", Scorer._assess_now)  # (the refits' too)
    assert run() == native


def test_a_model_that_raises_at_a_data_point_but_not_between_them_is_unusable_not_a_crash():
    """Found reviewing the native scoring: when the joint evaluation raised but the probe
    points alone did not, ``score`` evaluated the data again and its error escaped ``assess``
    (and with it the whole search)."""
    from ndvm.cosearch.task import Task
    x = np.array([0.1, 0.37, 0.5, 0.9, 1.3, 1.7, 2.2, 2.5, 2.9, 3.0])
    task = Task("t", {"x": x}, 2.0 * x, np.arange(8, 10), fit={"steps": 5, "starts": 2})
    scorer = Scorer(task, workers=1)
    prog = ndvm.parse("(if (= x 0.37) (car x) (* a x))")
    why, score = scorer.assess(prog, {"a": 2.0})
    assert score is None and why.startswith("fails at the data points: ") and "car" in why
    res = ndvm.search(task, proposer=ndvm.cosearch.Replay(sources=[
        "(if (= x 0.37) (car x) (* a x))", "(* a x)"]), budget=None, max_candidates=2,
        workers=1)
    assert [r["status"] for r in res.records][1] == "ok"
    assert res.records[0]["status"] != "ok" and "car" in str(res.records[0])


def test_the_probe_runs_on_the_first_training_points_and_a_later_failure_fails_the_fit():
    """Validation's probe evaluation runs on the first _PROBE_ROWS training points (it finds a
    program that cannot run; its cost no longer grows with the data): a program that cannot run
    anywhere is invalid, one that raises only on a later point fails its calibration and is
    recorded failed with the error, never ok."""
    from ndvm.cosearch import score
    from ndvm.cosearch.task import Task
    x = np.linspace(0.0, 1.0, 400)
    task = Task("t", {"x": x}, 2.0 * x, np.arange(380, 400), fit={"steps": 5, "starts": 2})
    scorer = Scorer(task, workers=1)
    assert next(iter(scorer.probe_points.values())).size == score._PROBE_ROWS
    late = "(if (> x 0.8) (car x) (* a x))"  # (raises on the training points beyond x = 0.8)
    scorer.validate(late)
    with pytest.raises(ndvm.SchemeError, match="car"):
        scorer.validate("(* a (car x))")
    res = ndvm.search(task, proposer=ndvm.cosearch.Replay(sources=[late, "(* a (car x))",
                                                                   "(* a x)"]),
                      budget=None, max_candidates=3, workers=1)
    assert [r["status"] for r in res.records] == ["failed", "invalid", "ok"]
    assert "car" in res.records[0]["error"] and "car" in res.records[1]["error"]


def test_the_probe_binds_once_for_each_order_of_free_names_and_still_checks_every_program():
    """Validation binds the probe's inputs once for each order of free names (they depend on
    the names alone) and reuses them: a program that cannot run is invalid after others with
    the same names ran, a name the task does not allow is refused each time, and the probe
    raises what ``Evaluator.evaluate`` on the same inputs raises."""
    from ndvm.cosearch import score
    from ndvm.cosearch.task import Task, named_in

    x = np.linspace(0.0, 1.0, 200)
    task = Task("t", {"x": x}, 2.0 * x, np.arange(180, 200), fit={"steps": 5, "starts": 2})
    scorer = Scorer(task, workers=1)
    for src in ["(* a x)", "(+ a x)", "(* a (exp x))"]:
        assert scorer.validate(src)[1] == ("a",)
    assert list(scorer._probes) == [("a", "x")]
    with pytest.raises(ndvm.SchemeError, match="car") as got:
        scorer.validate("(* a (car x))")
    prog = ndvm.parse("(* a (car x))", name="<candidate>")
    with pytest.raises(ndvm.SchemeError) as direct:
        scorer.probe_ev.evaluate(prog, params={"a": 0.5},
                                 data=named_in(scorer.probe_points, prog))
    assert str(got.value) == str(direct.value)
    assert scorer.validate("(* x a)")[1] == ("a",) and len(scorer._probes) == 2
    for _ in range(2):
        with pytest.raises(ValueError, match="not allowed by the task: z"):
            scorer.validate("(* a z)")
    assert score._PROBE_BINDINGS >= 16


# sources that validate, and sources invalid in each way: unreadable, not expanding, a name the
# task does not allow, a probe that raises (a type error, a limit, an unbound global), text that is
# not valid Unicode, none at all
VALIDATED = [
    "(* a x)", "(+ a", ")", "", "(* a z)", "(* a (car x))", "(+ a x)", "(* w (+ a z))",
    "(if (> x 0.8) (car x) (* a x))", "(let ((y 2)) (* y x))", "(define)", "(/ a 0)",
    "(+ 1 #t)", "(lambda (y) y)", "(undefined-thing x)", "(* x a)", "(* a (exp (* b x)))",
    "(let loop ((i 0)) (loop i))", "(* a \ud800)", "(vector-ref x 3)", "(* a x)", "(sqrt -1)",
    "(car (list))", "(* c (cos (* d x)))", "(+ a b c d x)", "(* a x) (* b x)", "#(1 2",
    "(quote)", "(* a (cos x))",
]


def _validated_alone(scorer, src):
    """What validation gives ``src`` as each candidate was validated before rounds were
    validated in one call: parse, the task's names, then ``Evaluator.evaluate`` on the probe's
    inputs; (source, free names, params) or (the exception's type, its message)."""
    from ndvm.cosearch.task import named_in

    task = scorer.task
    try:
        prog = ndvm.parse(src, name="<candidate>")
        bad = [n for n in prog.free_names if n not in task.allowed_names]
        if bad:
            raise ValueError(f"free name(s) not allowed by the task: {', '.join(bad)}")
        params = tuple(n for n in prog.free_names if n in task.params)
        scorer.probe_ev.evaluate(prog, {n: (task.init or {}).get(n, 0.5) for n in params},
                                 named_in(scorer.probe_points, prog),
                                 named_in(task.consts, prog))
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return prog.source, prog.free_names, params


def _outcome(got):
    if isinstance(got, Exception):
        assert got.__traceback__ is None  # (kept in a list: no frames held)
        return type(got), str(got)
    prog, params = got
    return prog.source, prog.free_names, params


@pytest.mark.parametrize("task_name", ["damped", "recurrence", "kalman"])
def test_a_round_validated_in_one_call_equals_each_candidate_validated_alone(task_name):
    """``Scorer.validate_round`` (one native call for a round's sources) gives each source
    what validating it alone gives: its program and parameters, or the same exception (type and
    message) when it is invalid, in any mix and order, and with the probes' bindings kept or
    cleared between rounds; ``validate`` raises it."""
    from ndvm.cosearch import score

    scorer = Scorer(get_task(task_name), workers=1)
    alone = [_validated_alone(scorer, src) for src in VALIDATED]
    assert {type(a[0]) for a in alone} >= {str, type}  # (both kinds are here)
    for order in (VALIDATED, VALIDATED[::-1], VALIDATED[5:] + VALIDATED[:5]):
        got = scorer.validate_round(order)
        assert [_outcome(g) for g in got] == [alone[VALIDATED.index(s)] for s in order]
    assert scorer.validate_round([]) == []
    for src, want in zip(VALIDATED, alone):
        try:
            prog, params = scorer.validate(src)
        except Exception as e:  # noqa: BLE001
            assert (type(e), str(e)) == want
        else:
            assert (prog.source, prog.free_names, params) == want
    fresh = Scorer(get_task(task_name), workers=1)
    fresh._probes.update({("q",) * k: None for k in range(1, score._PROBE_BINDINGS)})
    assert [_outcome(g) for g in fresh.validate_round(VALIDATED)] == alone


def test_a_round_validated_on_a_compiling_client_keeps_each_programs_compiled_form():
    """With a client that compiles (bytecode), ``validate_round`` gives what validating each
    source alone gives, and a valid program keeps the compiled form its probe ran: the fit's
    ``Program.compiled`` is that one, not compiled again."""
    scorer = Scorer(get_task("damped"), client="bytecode", workers=1)
    client = scorer.probe_ev.client
    assert client.name == "bytecode"
    alone = [_validated_alone(scorer, src) for src in VALIDATED]
    got = scorer.validate_round(VALIDATED)
    assert [_outcome(g) for g in got] == alone
    progs = [g[0] for g in got if not isinstance(g, Exception)]
    assert len(progs) >= 5
    for prog in progs:
        kept = prog._compiled[client.name]
        assert prog.compiled(client) is kept and kept is not None


class _Compiling:
    """dmci's entry with a ``compile`` that counts its calls (it gives dmci's 0); without
    ``fixed``, no fixed_form: the general path of ``validate_each``."""

    name, calls = "dmci", 0

    def __init__(self, client, fixed=False):
        self.entry = client.entry
        if fixed:
            self.fixed_form = 0

    def compile(self, program):
        self.calls += 1
        return 0


def test_a_clients_fixed_form_is_taken_without_a_compile_call_and_validates_the_same():
    """dmci says what ``compile`` gives every program (``fixed_form``, 0): ``validate_each``
    takes it without calling ``compile`` and gives each source what a client without one gives
    (whose ``compile`` runs once a probed program), programs, parameters and exceptions alike,
    and each valid program keeps that form for its fits."""
    from ndvm._core._core import validate_each

    scorer = Scorer(get_task("damped"), workers=1)
    ev = scorer.probe_ev
    assert ev.client.fixed_form == 0 and ev.client.compile(None) == 0
    general = _Compiling(ev.client)

    def each(client):
        return validate_each(VALIDATED, "<candidate>", scorer._probes, scorer._probe_entry,
                             ev._machine(), client, ev.evaluate)

    said = _Compiling(ev.client, fixed=True)
    fixed = each(ev.client)
    assert [_outcome(g) for g in each(said)] == [_outcome(g) for g in fixed]
    assert [_outcome(g) for g in each(general)] == [_outcome(g) for g in fixed]
    assert [_outcome(g) for g in fixed] == [_validated_alone(scorer, s) for s in VALIDATED]
    progs = [g[0] for g in fixed if not isinstance(g, Exception)]
    assert said.calls == 0 and general.calls >= len(progs) >= 5  # (a probe that raised, too)
    for prog in progs:
        assert prog._compiled["dmci"] == 0 and prog.compiled(ev.client) == 0


def test_a_rounds_run_of_the_same_free_names_shares_its_probe_entry_and_a_failed_one_is_asked_again():
    """Consecutive programs of the same free names take one probe entry (looked up once); an
    entry ``miss`` could not make is asked for again by the next program of those names, and
    each source's outcome is its own (a program of other names between them looks its own up)."""
    from ndvm._core._core import validate_each

    scorer = Scorer(get_task("damped"), workers=1)
    ev = scorer.probe_ev
    asked = []

    def miss(prog):
        asked.append(prog.free_names)
        if len(asked) == 1:
            raise RuntimeError("no entry yet")
        return scorer._probe_entry(prog)

    sources = ["(* a x)", "(* a (cos x))", "(+ a x)", "(* a b x)", "(- a x)", "(log (- x a))"]
    got = validate_each(sources, "<candidate>", {}, miss, ev._machine(), ev.client, ev.evaluate)
    assert isinstance(got[0], RuntimeError) and str(got[0]) == "no entry yet"
    assert [_outcome(g) for g in got[1:]] == [_validated_alone(scorer, s) for s in sources[1:]]
    # (the entries are kept in the scorer's dict, not the one given: each change of names asks)
    assert asked == [("a", "x"), ("a", "x"), ("a", "b", "x"), ("a", "x"), ("x", "a")]


def test_a_rounds_invalid_records_say_what_validating_each_alone_raises():
    """A search's invalid candidates, validated a round at a time, are recorded with the first
    line of the message validating each alone gives (its type's name when it has none)."""
    # (with a lone surrogate: the duplicate check digested no such source, and the search
    # raised UnicodeEncodeError)
    sources = list(dict.fromkeys(VALIDATED))
    res = ndvm.search("damped", proposer=ndvm.cosearch.Replay(sources=sources), batch=8,
                      budget=None, workers=1)
    scorer = Scorer(get_task("damped"), workers=1)
    # (those without a model could not be read as a tree: they never reached validation)
    invalid = [r for r in res.records if r["status"] == "invalid" and r["model"] is not None]
    assert len(invalid) >= 10
    assert any("\ud800" in r["proposed"] for r in res.records if r["status"] == "invalid")
    for rec in invalid:
        kind, message = _validated_alone(scorer, rec["model"])
        assert rec["error"] == (message.splitlines()[0] if message else kind.__name__)


def test_a_refit_from_names_in_another_order_or_a_start_not_finite_is_ndvm_fits():
    """A refit's start rows are staged as they are when they are the fitted names in the
    program's order; in another order they are the same fit's init (ndvm.fit from the same
    starts, bit for bit), and a start that is not finite fails as ndvm.fit says."""
    from ndvm.cosearch.score import REFIT_STARTS
    from ndvm.cosearch.select import starts_around

    task = get_task("damped")
    scorer = Scorer(task, client="dmci", workers=1)
    prog = ndvm.parse("(* a (cos (* b x)) (pow c x))")
    names = tuple(n for n in prog.free_names if n in task.params)[::-1]
    start = {n: 0.5 + 0.1 * i for i, n in enumerate(names)}
    p, _ = scorer.refit(prog, names, start, seed=5)
    want = ndvm.fit(prog, data={"x": scorer.train[0]["x"]}, target=scorer.train[1],
                    params=names[::-1], init=starts_around(start, names, REFIT_STARTS, 5),
                    starts=REFIT_STARTS, optimizer="lm", steps=scorer.fit.steps,
                    scaling=scorer.fit.scaling)
    assert p == dict(want.params)
    e, after = scorer.refit(prog, names, dict(start, a=float("nan")), seed=5)
    assert after is None and isinstance(e, ValueError)
    assert "init['a'] has a non-finite value" in str(e)


@pytest.mark.parametrize("task_name", ["damped", "recurrence"])
def test_a_refit_is_ndvm_fit_from_its_starts_and_scores_from_its_native_numbers(task_name):
    """Scorer.refit (one FitSetup for the search, the evaluation after the fit in its native
    call) fits what ndvm.fit by LM from the same REFIT_STARTS starts fits, bit for bit, and its
    record scores from the native numbers as from an evaluation of the fitted params."""
    from ndvm.cosearch.score import REFIT_STARTS
    from ndvm.cosearch.select import starts_around
    from ndvm.cosearch.task import named_in

    task = get_task(task_name)
    scorer = Scorer(task, client="dmci", workers=1)
    for src in ["(* a (cos (* b x)) (pow c x))", "(+ a (* b x))", "(/ a (- x b))"]:
        prog = ndvm.parse(src)
        names = tuple(n for n in prog.free_names if n in task.params)
        start = {n: 0.5 + 0.1 * i for i, n in enumerate(names)}
        p, after = scorer.refit(prog, names, start, seed=11)
        want = ndvm.fit(prog, data=named_in(scorer.train[0], prog), target=scorer.train[1],
                        params=names, init=starts_around(start, names, REFIT_STARTS, 11),
                        starts=REFIT_STARTS, optimizer="lm", steps=scorer.fit.steps,
                        scaling=scorer.fit.scaling,
                        consts=named_in(task.consts, prog) or None)
        assert p == dict(want.params), src
        assert repr(scorer.assess(prog, p, after)) == repr(scorer.assess(prog, p)), src
