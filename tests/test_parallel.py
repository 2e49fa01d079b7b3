"""ndvm.fit_many / ndvm.evaluate_many: input order, bit-identical results for any worker count,
chunking or executor, per-candidate error capture, Dask, stress and Ctrl-C cancellation."""
import json
import pickle
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

import ndvm
from ndvm import parallel, schedule
from ndvm._core import FitBatch
from ndvm.fit import FitOptions, FitPlan, _initial_values

from conftest import CLIENTS, shared_json

X = np.linspace(0.1, 6.0, 64)[:44]
Y = (np.exp(-0.3 * X) * np.cos(2 * X)
     + 0.02 * np.random.default_rng(0).standard_normal(64)[:44])
FIT = dict(data={"x": X}, target=Y, optimizer="adam", steps=30, lr=0.05)

GOOD = [
    "(* a (* (exp (- 0 (* b x))) (cos (* c x))))",
    "(* a (sin (+ (* b x) c)))",
    "(+ c (* a (exp (- 0.0 (* b x)))))",
    "(/ (* a x) (+ b x))",
    "(define (f u) (* a (exp (* b u)))) (f x)",
    "(loop ((i 0) (acc 0)) (if (< i 8) (recur (+ i 1) (+ acc (* a (cos (* b x))))) acc))",
    "(let ((d (- x b))) (* a (exp (- 0 (* d d)))))",
    "(if (< x 3) (* a x) (* b x))",
]
# (source, kind, line, col) of each bad candidate
BAD = [
    ("(* a (+ b x)", "ReadError", 1, 1),
    ("(* a\n  (car 1.5))", "EvalError", 2, 3),
    ("(let ((y)) (* a y x))", "FormError", 1, 7),
    ("(* a (-1.0 x))", "EvalError", 1, 6),
]
LIMIT = "(define (spin k) (loop ((i 0)) (recur (+ i k)))) (* a (spin x))"


def _key(r):
    """Everything a result holds, as bytes and exact floats, for bit-for-bit comparison."""
    if isinstance(r, ndvm.CandidateError):
        return ("error", r.index, r.name, r.kind, str(r.error))
    if isinstance(r, ndvm.FitResult):
        return ("fit", r.names, tuple(r.params.items()), r.loss, r.history.tobytes(),
                r.all_losses.tobytes(), r.converged.tobytes(), r.n_evals)
    jac = None if r.grad is None else {k: v.tobytes() for k, v in r.jacobian().items()}
    return ("value", r.value.tobytes(), jac)


def _mixed():
    """Good and bad candidates interleaved, as Programs and source strings."""
    out = []
    for i, src in enumerate(GOOD * 3):
        out.append(ndvm.parse(src, name=f"good{i}.scm") if i % 2 else src)
        if i % 6 == 5:
            out.append(BAD[(i // 6) % len(BAD)][0])
    return out


def _serial(programs, run):
    """The reference: a plain loop calling ``run(index, program)``, errors captured alike."""
    out = []
    for i, p in enumerate(programs):
        name = p.name if isinstance(p, ndvm.Program) else f"<candidate {i}>"
        try:
            out.append(run(i, p if isinstance(p, ndvm.Program) else ndvm.parse(p, name=name)))
        except ndvm.SchemeError as e:
            out.append(ndvm.CandidateError(i, name, None, e))
    return [_key(r) for r in out]


def _serial_fit(programs, **opts):
    """A plain loop of ndvm.fit with the same options (and fit_many's default for data a
    program does not use: ignored)."""
    opts.setdefault("unused_data", "ignore")
    return _serial(programs, lambda i, p: ndvm.fit(p, **opts))


def test_fit_many_is_bit_identical_for_any_workers_and_chunking():
    progs = _mixed()
    expected = _serial_fit(progs, **FIT)
    runs = {f"workers={w}": dict(workers=w) for w in (1, 2, 4)}
    runs["chunked"] = dict(workers=2, chunk_size=5)
    with ThreadPoolExecutor(3) as ex:
        runs["executor"] = dict(executor=ex, chunk_size=4)
        for label, how in runs.items():
            got = [_key(r) for r in ndvm.fit_many(progs, **how, **FIT)]
            assert got == expected, label


def _bits(values):
    """Floats as their bytes (so that NaN equals NaN and -0.0 differs from 0.0)."""
    return np.asarray(list(values), dtype=np.float64).tobytes()


def _fit_key(r):
    """Everything a FitResult holds (or a CandidateError's position, kind and message), as bytes
    where it is numbers: for bit-for-bit comparison of a batch with single fits."""
    if isinstance(r, ndvm.CandidateError):
        return ("error", r.index, r.name, r.kind, str(r.error))
    arrays = [r.all_losses, r.history, r.converged, r.status, r.stop_info[0],
              *r.all_params.values()]
    if r.all_covariance is not None:
        arrays += [r.all_covariance, r.all_stderr, r.covariance]
    return ("fit", r.names, _bits(r.params.values()), _bits([r.loss]), r.n_evals, r.message,
            r.optimizer, r.best_start, r.success,
            None if r.stderr is None else (tuple(r.stderr), _bits(r.stderr.values())),
            [(a.dtype.str, a.shape, a.tobytes()) for a in arrays])


def _single_fits(programs, per=None, **opts):
    """The reference: ndvm.fit one program at a time (with its ``per`` options), errors of any
    kind captured alike."""
    out = []
    for i, p in enumerate(programs):
        name = f"<candidate {i}>"
        extra = per[i] if per else {}
        try:
            out.append(ndvm.fit(ndvm.parse(p, name=name), unused_data="ignore",
                                **dict(opts, **(extra or {}))))
        except Exception as e:  # noqa: BLE001 - compared with fit_many's CandidateError
            out.append(ndvm.CandidateError(i, name, p, e))
    return [_fit_key(r) for r in out]


# bad candidates of every stage: unreadable, malformed, no parameter (ValueError while staging),
# failing in the native fit (EvalError), over the step limit (LimitError), a parameter only in
# a branch the data never takes (a zero Jacobian column)
BATCH_BAD = [b[0] for b in BAD] + ["(* 2 x)", LIMIT, "(if (< x -100) a (* b x))"]


def _with_bad(programs, every):
    """``programs`` with BATCH_BAD candidates inserted every ``every`` places (mid-chunk)."""
    out = list(programs)
    for k, bad in enumerate(BATCH_BAD):
        out.insert(min(len(out), 3 + k * every), bad)
    return out


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("optimizer, opts", [("lm", {}), ("adam", dict(steps=40, starts=2,
                                                                      uncertainty=True))])
def test_the_batch_call_equals_single_fits_bit_for_bit(client, optimizer, opts):
    """fit_many stages a chunk of candidates in one FitBatch and fits it in one native call: every
    result equals ndvm.fit's on that program alone, in full (params, loss, status, message,
    evaluations, covariance and stderr), and a bad candidate in the middle of a chunk is a
    CandidateError at its index that leaves its neighbours unchanged."""
    rows = shared_json("cosearch_candidates.jsonl")
    progs = _with_bad([r["src"] for r in rows], every=29)
    opts = dict(opts, data={"x": X}, target=Y, optimizer=optimizer, client=client)
    ev = ndvm.Evaluator(client, max_steps=200_000)
    expected = _single_fits(progs, evaluator=ev, **opts)
    kinds = {k[3] for k in expected if k[0] == "error"}
    assert kinds == {"ReadError", "EvalError", "FormError", "ValueError", "LimitError"}
    assert sum(k[0] == "fit" for k in expected) >= len(rows) - 3  # (one candidate is itself bad)
    del opts["client"]
    for how in (dict(workers=1), dict(workers=2, chunk_size=16),
                dict(workers=2, chunk_size=5)):
        got = ndvm.fit_many(progs, evaluator=ev, **how, **opts)
        assert [_fit_key(r) for r in got] == expected, how


def test_begun_fits_run_on_lent_threads_and_equal_single_fits_bit_for_bit():
    """begin_fits (the co-search's door): the calling thread and any thread that lends itself
    (drain) run the candidates, claims shrinking towards the end; the results equal ndvm.fit's
    one program at a time, bit for bit, whoever ran them, and a thread that lends itself after
    everything was claimed returns at once."""
    progs = _with_bad(GOOD * 3, every=7)
    opts = dict(data={"x": X}, target=Y, optimizer="lm",
                evaluator=ndvm.Evaluator("dmci", max_steps=200_000))
    expected = _single_fits(progs, **opts)
    for workers, lenders in ((1, 0), (2, 1), (3, 2), (4, 1)):
        begun = parallel.begin_fits(progs, workers=workers, **opts)
        ran = []

        def lend(begun=begun, ran=ran):
            ran.append(threading.get_ident())
            begun.drain()

        threads = [threading.Thread(target=lend) for _ in range(lenders)]
        for t in threads:
            t.start()
        got = begun.finish(lent=lenders)
        for t in threads:
            t.join()
        assert [_fit_key(r) for r in got] == expected, (workers, lenders)
        assert begun.drain() == 0  # (nothing left: returns at once)
    begun = parallel.begin_fits(progs, workers=2, **opts)  # one fit at a time, then cancelled
    assert begun.drain(1) == 1 and begun.drain(2) == 2
    begun.cancel()
    assert begun.drain() == 0
    with pytest.raises(ValueError, match="workers must be a whole number of threads, at least 1"):
        parallel.begin_fits(progs, workers=0, **opts)
    with pytest.raises(TypeError, match="unknown fit option"):
        parallel.begin_fits(progs, workers=1, stepz=3, **opts)


def test_begun_fits_ask_no_pool_without_helpers_and_find_their_evaluator_once(monkeypatch):
    """A begun batch that no worker thread helps (workers=1, or every other thread lent
    already) is run on the calling thread without asking the thread pool's scheduler for
    anything, and its Evaluator is looked up once, when it is begun (not again for each thread
    that drains it): the same results as ndvm.fit's, bit for bit."""
    progs = GOOD * 2
    opts = {"data": {"x": X}, "target": Y, "optimizer": "lm"}
    expected = _single_fits(progs, **opts)
    looked = []
    find = parallel._evaluator
    monkeypatch.setattr(parallel, "_evaluator", lambda config: looked.append(1) or find(config))

    def no_pool(*args, **kwargs):
        raise AssertionError("a batch without helpers asked for the thread pool")

    monkeypatch.setattr(parallel.Scheduler, "threads", no_pool)
    for workers, lent in ((1, 0), (2, 1)):
        looked.clear()
        begun = parallel.begin_fits(progs, workers=workers, **opts)
        if lent:
            lender = threading.Thread(target=begun.drain)
            lender.start()
        got = begun.finish(lent=lent)
        if lent:
            lender.join()
        assert [_fit_key(r) for r in got] == expected, (workers, lent)
        assert begun.drain() == 0 and len(looked) == 1


def test_a_setups_batches_share_one_evaluator_look_up_and_reuse_a_finished_ones_buffers(
        monkeypatch):
    """A FitSetup's Begun find its Evaluator once for the setup (not once a batch), and a
    finished Begun hands its FitBatch, reset, to the setup's next one: the next batch's fits
    are ndvm.fit's bit for bit, the first batch's results (FitResults, read from their own
    arrays) unchanged once the batch that ran them ran again; a finished Begun's late drain()
    and cancel() touch nothing; a pickled setup carries no batch."""
    opts = {"data": {"x": X}, "target": Y, "optimizer": "lm"}
    expected = _single_fits(GOOD, **opts)
    looked = []
    find = parallel._evaluator
    monkeypatch.setattr(parallel, "_evaluator", lambda config: looked.append(1) or find(config))
    setup = parallel.FitSetup(workers=1, **opts)
    first = setup.begin(GOOD)
    batch = first._batch
    got = first.finish()
    kept = [_fit_key(r) for r in got]
    assert kept == expected and setup._spare == [batch] and batch.size == 0
    assert first.drain() == 0
    second = setup.begin(GOOD[::-1])
    assert second._batch is batch and setup._spare == []
    first.cancel()  # (the batch it had is the second's now: not reset by it)
    assert batch.size == len(GOOD)
    assert [_fit_key(r) for r in second.finish()] == expected[::-1]
    assert [_fit_key(r) for r in got] == kept and len(looked) == 1
    again = pickle.loads(pickle.dumps(setup))
    assert again._spare == [] and [_fit_key(r) for r in again.begin(GOOD).finish()] == expected


def test_a_plan_decides_once_whether_a_candidates_init_may_stand_in_for_its_own():
    """FitPlan.init_alone (what takes_init asks of the plan, decided when it is made): options
    without init, bounds or positive names and with a number as seed; takes_init is then true
    of an extra that is an init alone."""
    ev = ndvm.Evaluator("dmci")
    data = {"x": X}
    plain = _plan(ev, data, Y)
    assert plain.init_alone and plain.takes_init({"init": {"a": 1.0}})
    assert not plain.takes_init({"init": {"a": 1.0}, "steps": 3})
    for options in ({"init": {"a": 1.0}}, {"bounds": {"a": (0.0, 2.0)}},
                    {"positive": ("a",)}, {"seed": None}):
        plan = _plan(ev, data, Y, **options)
        assert not plan.init_alone and not plan.takes_init({"init": {"a": 1.0}}), options


def test_the_best_start_is_the_first_of_least_finite_loss():
    """FitBatch.fit_result picks the best start natively: the first start of least finite loss
    (a tie goes to the earlier start, a non-finite start never wins, none finite gives start 0),
    and params, loss, covariance and stderr are that start's, as numpy's rule gives."""
    x = np.linspace(0.1, 2.0, 10)
    y = np.sqrt(2.0 * x)
    for init, best in (([-1.0, 3.0, 3.0, 0.5], 1), ([3.0, -1.0], 0), ([-1.0, -2.0], 0),
                       ([-1.0, -2.0, 1.5], 2)):
        for many in (False, True):
            opts = dict(data={"x": x}, target=y, init={"a": init}, starts=len(init),
                        optimizer="adam", steps=5, uncertainty=True)
            r = (ndvm.fit_many(["(sqrt (* a x))"], **opts)[0] if many
                 else ndvm.fit("(sqrt (* a x))", **opts))
            losses = r.all_losses
            assert best == int(np.argmin(np.where(np.isfinite(losses), losses, np.inf)))
            assert r.best_start == best
            assert _bits([r.loss]) == _bits([losses[best]])
            assert _bits(r.params.values()) == _bits([r.all_params["a"][best]])
            assert r.covariance.tobytes() == r.all_covariance[best].tobytes()
            assert _bits(r.stderr.values()) == _bits(r.all_stderr[best])
            assert type(r.loss) is float and type(r.params["a"]) is float


def test_a_failing_candidate_mid_chunk_leaves_the_others_alone():
    """Without the reference data: the same check on hand-written candidates, one chunk of all
    of them, with per-candidate options (each its own plan) in the middle."""
    progs = _with_bad(GOOD * 3, every=4)
    ev = ndvm.Evaluator(max_steps=20_000)
    for optimizer in ("lm", "adam"):
        opts = dict(FIT, optimizer=optimizer, evaluator=ev)
        expected = _single_fits(progs, **opts)
        got = ndvm.fit_many(progs, workers=1, chunk_size=len(progs), **opts)
        assert [_fit_key(r) for r in got] == expected
        per = [{"seed": i % 3, "starts": 1 + i % 2} if i % 3 else None for i in range(len(progs))]
        got = ndvm.fit_many(progs, workers=2, chunk_size=7, per_candidate=per, **opts)
        assert [_fit_key(r) for r in got] == _single_fits(progs, per, **opts)


def _plan(ev, data=None, target=None, **options):
    """The FitPlan ndvm.fit makes of these arguments, on ``ev``."""
    return FitPlan(FitOptions.of(**options), data, target, ev)


def test_a_fit_batch_is_reused_and_its_results_outlive_it():
    """A FitBatch runs once per reset(); the results it gave stay valid (they own the batch's
    arrays) after the batch is reset and run again with other fits."""
    ev = ndvm.Evaluator()
    plan = _plan(ev, **FIT)
    batch = FitBatch()
    first = [plan.stage(batch, ndvm.parse(src)) for src in GOOD[:3]]
    ev.calibrate(batch)
    results = [plan.result(st, batch) for st in first]
    keys = [_fit_key(r) for r in results]
    with pytest.raises(RuntimeError, match="reset"):
        plan.stage(batch, ndvm.parse(GOOD[0]))
    with pytest.raises(RuntimeError, match="reset"):
        ev.calibrate(batch)
    batch.reset()
    with pytest.raises(IndexError):
        batch.result(0)
    again = [plan.stage(batch, ndvm.parse(src)) for src in GOOD[3:6]]
    ev.calibrate(batch)
    assert [_fit_key(r) for r in results] == keys
    assert [_fit_key(plan.result(st, batch)) for st in again] == [
        _fit_key(ndvm.fit(src, **FIT)) for src in GOOD[3:6]]
    assert keys == [_fit_key(ndvm.fit(src, **FIT)) for src in GOOD[:3]]


def test_a_fit_batch_reuses_its_buffers_only_once_no_result_of_the_run_before_is_alive():
    """A reset FitBatch runs again in the buffers of its last run (no allocation a round) when
    nothing refers to them any more; while a result of that run is alive, its next run takes
    new ones, and the live result keeps its numbers."""
    import weakref

    ev = ndvm.Evaluator()
    plan = _plan(ev, **FIT)
    batch = FitBatch()

    def run(srcs):
        batch.reset()
        staged = [plan.stage(batch, ndvm.parse(src)) for src in srcs]
        ev.calibrate(batch)
        return staged

    staged = run(GOOD[:3])
    losses = batch.result(1)[1]
    kept = losses.copy()
    first = weakref.ref(losses.base)
    staged = run(GOOD[3:6])  # (``losses`` alive: new buffers)
    assert batch.result(1)[1].base is not first()
    assert np.array_equal(losses, kept)
    second = weakref.ref(batch.result(1)[1].base)
    del losses
    staged = run(GOOD[:3])  # (nothing of the last run alive: its buffers again)
    assert batch.result(1)[1].base is second()
    assert [_fit_key(plan.result(st, batch)) for st in staged] == [
        _fit_key(ndvm.fit(src, **FIT)) for src in GOOD[:3]]
    assert np.array_equal(batch.result(1)[1], kept)


def test_a_fit_batch_says_without_waiting_whether_its_fits_have_ended_and_its_drains_left():
    ev = ndvm.Evaluator()
    plan = _plan(ev, **FIT)
    batch = FitBatch()
    assert batch.finished() and batch.quiet()  # (not open: nothing to wait for)
    for src in GOOD[:3]:
        plan.stage(batch, ndvm.parse(src))
    batch.open()
    assert not batch.finished() and batch.quiet()
    assert ev.drain(batch, 2) == 2 and not batch.finished()
    assert ev.drain(batch) == 1 and batch.finished() and batch.quiet()
    batch.close()
    assert batch.finished()


def test_a_drain_with_a_stop_sign_runs_until_it_is_set_and_not_after():
    # (a search's proposer thread is lent to the next batch until the calling thread sets its
    # Stop: looked at natively before each claim)
    from ndvm._core import Stop

    ev = ndvm.Evaluator()
    plan = _plan(ev, **FIT)
    batch = FitBatch()
    staged = [plan.stage(batch, ndvm.parse(src)) for src in GOOD[:4]]
    batch.open()
    stop = Stop()
    assert not stop.is_set()
    assert ev.drain(batch, 1, stop) == 1  # (not set: as without one)
    stop.set()
    assert stop.is_set() and ev.drain(batch, None, stop) == 0 and not batch.finished()
    assert ev.drain(batch) == 3 and batch.finished()
    batch.close()
    assert [_fit_key(plan.result(st, batch)) for st in staged] == [
        _fit_key(ndvm.fit(src, **FIT)) for src in GOOD[:4]]


def test_a_batch_handed_back_unreset_is_reset_when_the_next_begun_takes_it():
    # (a finished Begun whose batch a lent thread has not left yet hands it on unreset: reset()
    # would wait for that thread. The setup's next Begun resets it, and its fits are then
    # ndvm.fit's all the same)
    opts = {"data": {"x": X}, "target": Y, "optimizer": "lm"}
    setup = parallel.FitSetup(workers=1, **opts)
    ev = ndvm.Evaluator()
    plan = _plan(ev, **FIT)
    batch = FitBatch()
    for src in GOOD[:3]:
        plan.stage(batch, ndvm.parse(src))
    batch.open()
    ev.drain(batch)
    batch.close()
    setup._spare.append(batch)  # (as Begun.finish leaves it when not quiet)
    assert batch.size == 3
    second = setup.begin(GOOD[::-1])
    assert second._batch is batch and batch.size == len(GOOD)
    assert [_fit_key(r) for r in second.finish()] == _single_fits(GOOD, **opts)[::-1]


def test_a_shared_fit_batch_runs_on_several_threads_and_equals_a_run():
    """An opened FitBatch is drained by several threads at once (each on its own machine,
    claiming one fit at a time without the GIL); after close() its results are bit for bit those
    of run() on one thread. Results cannot be read while it is open; a drain after close does
    nothing; reset() of an open batch waits for the fits already claimed, and no other runs."""
    ev = ndvm.Evaluator(max_steps=200_000)
    plan = _plan(ev, **FIT)
    progs = [ndvm.parse(src) for src in GOOD * 4]
    batch = FitBatch()
    staged = [plan.stage(batch, p) for p in progs]
    ev.calibrate(batch)
    expected = [_fit_key(plan.result(st, batch)) for st in staged]
    for threads in (1, 2, 3):
        batch.reset()
        staged = [plan.stage(batch, p) for p in progs]
        batch.open()
        with pytest.raises(RuntimeError, match="close"):
            batch.result(0)
        lent = [threading.Thread(target=ev.drain, args=(batch,)) for _ in range(threads - 1)]
        for t in lent:
            t.start()
        ev.drain(batch)
        batch.close()
        for t in lent:
            t.join()
        assert [_fit_key(plan.result(st, batch)) for st in staged] == expected, threads
        ev.drain(batch)  # (closed: nothing happens)
    batch.reset()
    staged = [plan.stage(batch, p) for p in progs[:3]]
    batch.open()
    helper = threading.Thread(target=ev.drain, args=(batch,))
    helper.start()
    batch.reset()  # (waits for whatever the helper claimed)
    helper.join()
    with pytest.raises(RuntimeError, match="not open"):
        batch.close()
    staged = [plan.stage(batch, p) for p in progs[:3]]
    batch.open()
    batch.reset()  # nobody drains it: nothing runs, nothing waits
    assert batch.size == 0
    # drain(limit): at most that many fits run on this call; how many it ran comes back
    staged = [plan.stage(batch, p) for p in progs]
    batch.open()
    assert ev.drain(batch, 1) == 1 and ev.drain(batch, 3) == 3
    assert ev.drain(batch, 0) == 0
    assert ev.drain(batch) == len(progs) - 4 and ev.drain(batch, 1) == 0
    batch.close()
    assert [_fit_key(plan.result(st, batch)) for st in staged] == expected
    assert ev.drain(batch, 1) == 0  # (closed)


def test_a_reused_shared_batch_is_safe_from_late_lenders():
    """Threads lent to a shared batch may start late, after its owner has drained, closed, reset
    and restaged it: a reset waits until no thread is inside a drain, so a late one drains the
    new round (or nothing) and every round's results are right."""
    ev = ndvm.Evaluator()
    opts = dict(FIT, steps=8)
    plan = _plan(ev, **opts)
    progs = [ndvm.parse(src) for src in GOOD[:4]] * 2
    expected = [_fit_key(ndvm.fit(p, **opts)) for p in progs]
    batch = FitBatch()
    lenders = []
    for round_ in range(40):
        batch.reset()
        staged = [plan.stage(batch, p) for p in progs]
        batch.open()
        lenders += [threading.Thread(target=ev.drain, args=(batch,)) for _ in range(2)]
        for t in lenders[-2:]:
            t.start()
        if round_ % 3:
            ev.drain(batch)
        else:  # (the lenders do it all)
            for t in lenders[-2:]:
                t.join()
            ev.drain(batch)
        batch.close()
        assert [_fit_key(plan.result(st, batch)) for st in staged] == expected, round_
    for t in lenders:
        t.join()


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts the tasks it is given."""

    def __init__(self, workers):
        super().__init__(workers)
        self.tasks = 0
        self.sizes = []  # candidates in each task, in submission order

    def submit(self, fn, *args, **kwargs):
        self.tasks += 1
        if len(args) == 2 and hasattr(args[1], "items"):
            self.sizes.append(len(args[1].items))
        return super().submit(fn, *args, **kwargs)


def test_executor_default_chunks_start_small_and_grow_with_the_measured_rate(monkeypatch):
    """Default executor chunks: the first TASKS_IN_FLIGHT per worker have executor_chunk
    candidates (4 tasks per worker's worth: ceil(104 / 12) = 9); the later ones as many as the
    finished tasks' rate says fill EXECUTOR_TASK_SECONDS, at most an even share per worker of
    what is left. A chunk_size given is kept. The results never depend on the chunking."""
    from ndvm import parallel

    progs = GOOD * 13  # 104 candidates
    params = {"a": 1.0, "b": 0.5, "c": 2.0}
    expected = [_key(r) for r in ndvm.evaluate_many(progs, params=params, data={"x": X},
                                                    workers=1)]
    for seconds, sizes in ((1e-9, [9] * 11 + [5]),  # (a tiny target: no growth past 9)
                           # (cheap ones: an even share of what is left per worker)
                           (10.0, [9] * 6 + [17, 11, 9, 9, 4])):
        monkeypatch.setattr(parallel, "EXECUTOR_TASK_SECONDS", seconds)
        with CountingExecutor(3) as ex:
            got = ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex)
        assert sorted(ex.sizes[:6]) == sizes[:6] and sum(ex.sizes) == 104
        assert ex.sizes[6:] == sizes[6:], ex.sizes
        assert [_key(r) for r in got] == expected
    with CountingExecutor(3) as ex:
        got = ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex, chunk_size=5)
    assert ex.sizes == [5] * 20 + [4] and [_key(r) for r in got] == expected
    # a second call of the same kind on the same executor starts at the size the first grew to
    # (the co-search's rounds are one call each); another kind, or another executor, does not
    monkeypatch.setattr(parallel, "EXECUTOR_TASK_SECONDS", 10.0)
    with CountingExecutor(3) as ex:
        ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex)
        ex.sizes.clear()
        got = ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex)
        assert ex.sizes == [35, 23, 16, 10, 9, 9, 2] and [_key(r) for r in got] == expected
        ex.sizes.clear()
        ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex, grad=True)
        assert ex.sizes[:6] == [9] * 6
    with CountingExecutor(3) as ex:
        ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex)
        assert ex.sizes[:6] == [9] * 6


def test_fit_many_multi_start_and_per_candidate_options():
    progs = GOOD[:4]
    per = [{"init": {"a": 1.0, "b": 0.3}}, None, {"seed": 7}, {"steps": 5}]
    got = ndvm.fit_many(progs, starts=3, per_candidate=per, workers=2, **FIT)
    for i, (p, extra) in enumerate(zip(progs, per)):
        opts = dict(FIT, starts=3, **(extra or {}))
        assert _key(got[i]) == _key(ndvm.fit(p, **opts))
    assert got[3].history.shape == (5, 3)
    # seed=None draws fresh entropy once per call: shared by the batch, whatever the workers
    twice = ndvm.fit_many([GOOD[0], GOOD[0]], seed=None, workers=2, **FIT)
    assert _key(twice[0]) == _key(twice[1])
    with pytest.raises(TypeError, match="per_candidate cannot set"):
        ndvm.fit_many(progs, per_candidate=[{"client": "bytecode"}] * 4, **FIT)
    with pytest.raises(ValueError, match="3 entries for 4 candidates"):
        ndvm.fit_many(progs, per_candidate=per[:3], **FIT)


def test_evaluate_many_is_bit_identical_and_matches_evaluate():
    progs = _mixed()
    params = {"a": [1.0, -0.5], "b": 0.3, "c": 2.0}
    ev = ndvm.Evaluator()
    expected = _serial(progs, lambda i, p: ev.evaluate(p, params=params, data={"x": X}, grad=True))
    for how in (dict(workers=1), dict(workers=2), dict(workers=4, chunk_size=3)):
        got = ndvm.evaluate_many(progs, params=params, data={"x": X}, grad=True, **how)
        assert [_key(r) for r in got] == expected, how


def test_evaluate_many_per_candidate_params():
    progs = ["(* a x)", "(+ a b)", "(* b b)"]
    params = [{"a": 2.0}, {"a": 1.0, "b": [1.0, 2.0]}, {"b": 3.0}]
    got = ndvm.evaluate_many(progs, params=params, data={"x": [1.0, 2.0]}, grad=True)
    assert got[0].value.tolist() == [[2.0, 4.0]]
    assert got[1].value.tolist() == [[2.0, 2.0], [3.0, 3.0]]
    assert got[2].grad == {"b": pytest.approx([12.0])}


def test_errors_are_captured_per_candidate_with_name_and_position():
    progs = [GOOD[0]] + [b[0] for b in BAD] + [GOOD[1], LIMIT, "(* a q x)"]
    ev = ndvm.Evaluator(max_steps=20_000)
    per = [None] * 7 + [{"params": ["a"]}]  # q is then neither fitted nor given
    got = ndvm.fit_many(progs, per_candidate=per, evaluator=ev, workers=2, **FIT)
    assert isinstance(got[0], ndvm.FitResult)
    for i, (src, kind, line, col) in enumerate(BAD, start=1):
        err = got[i]
        assert isinstance(err, ndvm.CandidateError)
        assert (err.index, err.name, err.source, err.kind) == (i, f"<candidate {i}>", src, kind)
        assert isinstance(err.error, ndvm.SchemeError)
        assert (err.error.line, err.error.col) == (line, col)
        assert err.error.file == f"<candidate {i}>"
    assert isinstance(got[5], ndvm.FitResult)
    assert got[6].kind == "LimitError" and "step" in str(got[6].error)
    assert got[7].kind == "UnboundError" and got[7].error.form == "q"
    assert (got[7].error.line, got[7].error.col) == (1, 6)
    # a named Program reports its own name; a non-program is captured too, with a traceback
    named = ndvm.parse("(+ a (car 1.0))", name="models/bad.scm")
    got = ndvm.fit_many([named, 42], **FIT)
    assert got[0].program == "models/bad.scm" and got[0].error.file == "models/bad.scm"
    assert got[1].kind == "TypeError" and got[1].source is None and "TypeError" in got[1].traceback


def test_evaluate_many_captures_unbound_inputs():
    got = ndvm.evaluate_many(["(* a x)", "(* a y)"], params={"a": 1.0}, data={"x": 2.0})
    assert got[0].item() == 2.0
    assert got[1].kind == "UnboundError" and got[1].error.form == "y"
    assert (got[1].error.line, got[1].error.col) == (1, 6)


def test_results_options_and_errors_pickle():
    fit_res, err = ndvm.fit_many([GOOD[0], BAD[1][0]], **FIT)
    value = ndvm.evaluate_many([GOOD[0]], params={"a": 1, "b": 2, "c": 3}, data={"x": X},
                               grad=True)[0]
    for r in (fit_res, err, value):
        assert _key(pickle.loads(pickle.dumps(r))) == _key(r)
    assert pickle.loads(pickle.dumps(err)).error.line == 2
    job, _ = parallel._fit_job([], FIT["data"], FIT["target"], None,
                               {k: v for k, v in FIT.items() if k not in ("data", "target")})
    assert pickle.loads(pickle.dumps(job)).options["fit"].adam_steps == FIT["steps"]


def test_arguments_are_checked_before_any_work():
    with pytest.raises(TypeError, match="unknown fit option"):
        ndvm.fit_many(GOOD, stepz=3, **FIT)
    with pytest.raises(ValueError, match="unknown optimizer"):
        ndvm.fit_many(GOOD, optimizer="sgd", data={"x": X}, target=Y)
    with pytest.raises(ValueError, match="needs a target"):
        ndvm.fit_many(GOOD, data={"x": X})
    with pytest.raises(ValueError, match="workers"):
        ndvm.fit_many(GOOD, workers=0, **FIT)
    with pytest.raises(ValueError, match="chunk_size"):
        ndvm.evaluate_many(GOOD, chunk_size=0, params={"a": 1.0}, data={"x": X})
    with pytest.raises(ValueError, match="dtype"):
        ndvm.evaluate_many(GOOD, dtype="float16")
    assert ndvm.fit_many([], **FIT) == [] and ndvm.evaluate_many(iter(())) == []


def test_the_pool_persists_across_calls():
    ndvm.evaluate_many(GOOD, params={"a": 1.0, "b": 1.0, "c": 1.0}, data={"x": X}, workers=2)
    pool = schedule._POOL
    ndvm.fit_many(GOOD, workers=2, **FIT)
    assert schedule._POOL is pool
    workers = [t for t in threading.enumerate() if t.name.startswith("ndvm-worker")]
    assert 1 <= len(workers) <= schedule._POOL_SIZE


def test_progress_bar(capsys):
    pytest.importorskip("tqdm")
    ndvm.fit_many(GOOD, progress=True, **FIT)
    err = capsys.readouterr().err
    assert "fit_many" in err and "cand/s" in err and f"{len(GOOD)}/{len(GOOD)}" in err


def test_dask_local_cluster_threads_and_processes():
    distributed = pytest.importorskip("distributed")
    progs = _mixed()
    expected = _serial_fit(progs, **FIT)
    params = {"a": 1.0, "b": 0.3, "c": 2.0}
    expected_values = [_key(r) for r in ndvm.evaluate_many(progs, params=params,
                                                           data={"x": X}, workers=1)]
    for processes in (False, True):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=processes,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            ex = client.get_executor()
            got = ndvm.fit_many(progs, executor=ex, chunk_size=6, **FIT)
            assert [_key(r) for r in got] == expected, processes
            got = ndvm.evaluate_many(progs, params=params, data={"x": X}, executor=ex)  # 8 tasks
            assert [_key(r) for r in got] == expected_values, processes


def test_stress_thousands_of_tiny_candidates_and_a_few_slow_ones():
    slow = "(* a (loop ((i 0) (s 0)) (if (< i 20000) (recur (+ i 1) (+ s (sin (* i x)))) s)))"
    progs = [f"(+ (* a x) {k / 7:.6g})" for k in range(3000)]
    for pos in (5, 1500, 2999):
        progs[pos] = slow
    progs[700] = "(* a (car x))"
    params = {"a": [1.0, 2.0]}
    data = {"x": X[:8]}
    serial = ndvm.evaluate_many(progs, params=params, data=data, grad=True, workers=1)
    parallel_ = ndvm.evaluate_many(progs, params=params, data=data, grad=True, workers=2)
    assert [_key(r) for r in parallel_] == [_key(r) for r in serial]
    assert parallel_[700].kind == "EvalError" and parallel_[700].index == 700
    assert parallel_[42].value.tolist() == [list(X[:8] + 42 / 7), list(2 * X[:8] + 42 / 7)]
    tiny_fit = dict(data={"x": X}, target=Y, optimizer="adam", steps=3)
    fits = ndvm.fit_many(progs[:1000], workers=2, chunk_size=7, **tiny_fit)
    assert [_key(r) for r in fits] == _serial_fit(progs[:1000], **tiny_fit)


def test_concurrent_callers_share_programs_without_races():
    progs = [ndvm.parse(s, name=f"shared{i}") for i, s in enumerate(GOOD * 4)]
    progs.insert(9, ndvm.parse("(* a (car b))", name="bad"))
    params = {"a": [0.5, 1.5], "b": 0.2, "c": 1.0}
    want_fit = [_key(r) for r in ndvm.fit_many(progs, workers=1, **FIT)]
    want_eval = [_key(r) for r in ndvm.evaluate_many(progs, params=params, data={"x": X},
                                                     grad=True, workers=1)]
    mismatches = []

    def hammer(k):
        for rep in range(4):
            if (k + rep) % 2:
                got = ndvm.fit_many(progs, workers=2, chunk_size=1 + rep, **FIT)
                ok = [_key(r) for r in got] == want_fit
            else:
                got = ndvm.evaluate_many(progs, params=params, data={"x": X}, grad=True,
                                         workers=2)
                ok = [_key(r) for r in got] == want_eval
            if not ok:
                mismatches.append((k, rep))

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert mismatches == []


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="SIGINT is delivered to the main thread")
def test_ctrl_c_cancels_pending_work_and_leaves_no_threads(monkeypatch):
    slow = "(* a (loop ((i 0) (s 0)) (if (< i 100000) (recur (+ i 1) (+ s (sin x))) s)))"
    ran = []
    run_one = parallel._run_one
    monkeypatch.setattr(parallel, "_run_one", lambda *a: ran.append(a[2]) or run_one(*a))
    started = threading.Event()

    def interrupt():
        started.wait()
        time.sleep(0.3)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    # Python's own Ctrl-C handler, even when pytest was started with SIGINT ignored (a
    # background job of a non-interactive shell is): otherwise the signal would do nothing
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    killer = threading.Thread(target=interrupt)
    killer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            started.set()
            ndvm.evaluate_many([slow] * 5000, params={"a": 1.0}, data={"x": 0.5}, workers=2)
    finally:
        killer.join()
        signal.signal(signal.SIGINT, previous)
    ran_at_interrupt = len(ran)
    assert 0 < ran_at_interrupt < 5000
    parallel.shutdown()  # joins the pool's threads
    assert len(ran) == ran_at_interrupt  # nothing ran after the call returned
    assert not [t for t in threading.enumerate() if t.name.startswith("ndvm-worker")]
    again = ndvm.evaluate_many([slow] * 2, params={"a": 1.0}, data={"x": 0.5}, workers=2)
    assert _key(again[0]) == _key(again[1])


def _process_cluster(distributed, n_workers=2):
    return distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                    dashboard_address=None)


def test_a_worker_killed_mid_run_loses_and_repeats_nothing():
    """A Dask worker process killed while it holds chunks: the scheduler re-runs them on the
    other worker (or the restarted one); every candidate comes back once, in order, identical to
    a local run."""
    import os

    distributed = pytest.importorskip("distributed")
    # slow enough (a 2000-step loop per lane, 30 Adam steps: ~0.1 s a fit) that the kill
    # lands mid-run
    slow = ("(* a (loop ((i 0) (s 0)) (if (< i 2000) (recur (+ i 1) (+ s (* 0.0005 "
            "(cos (* b x))))) s)))")
    progs = [slow] * 16 + GOOD
    opts = dict(FIT, steps=30)
    expected = [_key(r) for r in ndvm.fit_many(progs, workers=1, **opts)]
    with _process_cluster(distributed) as cluster, distributed.Client(cluster) as client:
        pids = client.run(os.getpid)
        done = []
        runner = threading.Thread(target=lambda: done.append(ndvm.fit_many(
            progs, executor=client.get_executor(), chunk_size=2, **opts)))
        runner.start()
        deadline = time.monotonic() + 60
        while not any(ts.state == "processing" for ts in
                      client.cluster.scheduler.tasks.values()) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)  # the first chunks are running
        assert not done, "the run ended before the kill: the candidates need to be slower"
        victim = next(iter(pids.values()))
        os.kill(victim, signal.SIGKILL)
        runner.join(timeout=300)
        assert not runner.is_alive() and done, "fit_many did not finish after a worker died"
        assert victim not in client.run(os.getpid).values()  # the worker really died
    got = done[0]
    assert len(got) == len(progs)
    assert [_key(r) for r in got] == expected


def test_search_on_a_dask_cluster_equals_a_local_search():
    distributed = pytest.importorskip("distributed")
    # (the same rounds: with an executor the default round is larger, EXECUTOR_BATCH per thread)
    local = ndvm.search("damped", max_candidates=48, seed=3, workers=1, batch=16)
    with _process_cluster(distributed) as cluster, distributed.Client(cluster) as client:
        remote = ndvm.search("damped", max_candidates=48, seed=3, batch=16,
                             executor=client.get_executor())

    def fields(res):
        return [(r["proposed"], r["status"], r["params"], r["heldout_error"]) for r in res.records]
    assert fields(remote) == fields(local)
    assert remote.best["model"] == local.best["model"]


def test_lazy_fit_results_equal_eager_ones_and_pickle_as_before():
    """A natively built FitResult reads its fields on first access; each equals the field of a
    FitResult built eagerly from the same values, a field set before it is read wins, the
    class's defaults are unchanged, and it pickles (and copies) to the plain __dict__ an eager
    result has, byte for byte."""
    import copy
    import dataclasses

    names = [f.name for f in dataclasses.fields(ndvm.FitResult)]
    for opts in (dict(FIT, starts=3), dict(FIT, optimizer="lm", steps=20, starts=2),
                 dict(FIT, optimizer="lbfgs", steps=20, bounds={"a": (-1.0, 2.0)})):
        for r in ndvm.fit_many(GOOD[:4], workers=1, **opts) + [ndvm.fit(GOOD[0], **opts)]:
            assert set(r.__dict__) == {"_lazy"}  # nothing built yet
            key = _fit_key(r)  # reads every field
            eager = ndvm.FitResult(**{n: getattr(r, n) for n in names})
            assert "_lazy" not in eager.__dict__
            assert _fit_key(eager) == key and repr(eager) == repr(r)
            fresh = ndvm.fit_many([r_src for r_src in GOOD[:1]], workers=1, **opts)[0]
            assert pickle.dumps(fresh) == pickle.dumps(ndvm.FitResult(
                **{n: getattr(fresh, n) for n in names}))  # lazy pickles as eager
            back = pickle.loads(pickle.dumps(r))
            assert "_lazy" not in back.__dict__ and _fit_key(back) == key
            assert _fit_key(copy.copy(r)) == key and _fit_key(copy.deepcopy(r)) == key
    r = ndvm.fit_many([GOOD[0]], **FIT)[0]
    r.loss = -1.0  # set before it was read: the set value stays
    assert r.loss == -1.0 and r.params == ndvm.fit(GOOD[0], **FIT).params
    assert ndvm.FitResult.status is None and ndvm.FitResult.optimizer == "lm"
    with pytest.raises(AttributeError):
        ndvm.FitResult.params  # noqa: B018 - a field without a default, as before


def test_executor_chunks_come_back_packed_and_equal_local_fits_bit_for_bit():
    """An executor's fit task returns one packed object (the chunk's native outputs once): it
    pickles to far less than the results it stands for, and unpacks to lazy FitResults equal
    to a local run's bit for bit, errors in place; a job unpickled again in a worker process
    is the first copy of it there (its plan is built once), and a task's Dask name is its token
    (no program is pickled to name it)."""
    progs = _with_bad(GOOD * 3, every=4)
    for opts in (FIT, dict(FIT, optimizer="lm", steps=20, starts=2),
                 dict(FIT, optimizer="lbfgs", steps=20, bounds={"a": (-1.0, 2.0)})):
        expected = [_fit_key(r) for r in ndvm.fit_many(progs, workers=1, **opts)]
        sent = []

        class Pickling(ThreadPoolExecutor):
            def submit(self, fn, *args):  # a round trip through pickle, as to a process
                args = pickle.loads(pickle.dumps(args))
                sent.append(args)
                return super().submit(lambda: pickle.loads(pickle.dumps(fn(*args))))

        with Pickling(2) as ex:
            got = ndvm.fit_many(progs, executor=ex, chunk_size=9, **opts)
        assert [_fit_key(r) for r in got] == expected
        assert all("_lazy" in r.__dict__ for r in got if isinstance(r, ndvm.FitResult))
        job, chunk = sent[0]
        packed = parallel._run_chunk(job, chunk)
        assert isinstance(packed, parallel._Packed)
        plain = parallel._unpack(packed)
        assert len(pickle.dumps(packed)) < len(pickle.dumps(plain))
        assert parallel._Job.shared(pickle.loads(pickle.dumps(job))) is parallel._Job.shared(job)
    dask = pytest.importorskip("dask")
    assert dask.base.tokenize(chunk) == dask.base.tokenize(parallel._Chunk([], chunk.key))


def test_the_garbage_collector_is_paused_during_a_batch_and_restored_after():
    """fit_many pauses Python's cyclic collector while it runs (its collections ran under the
    GIL while the workers waited) and restores it as it found it: after a normal call, after a
    call that raises, and left off when the caller had turned it off."""
    import gc
    from ndvm import parallel

    seen = []
    plain = parallel._run_pool

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return plain(*args, **kwargs)

    x = np.linspace(0.1, 1.0, 8)
    was = gc.isenabled()
    try:
        gc.enable()
        parallel._run_pool = spy
        ndvm.fit_many(["(* a x)"], data={"x": x}, target=2 * x, workers=1)
        assert seen == [False] and gc.isenabled()
        with pytest.raises(ValueError):
            ndvm.fit_many(["(* a x)"], data={"x": x}, target=2 * x, workers=0)
        assert gc.isenabled()
        gc.disable()
        ndvm.fit_many(["(* a x)"], data={"x": x}, target=2 * x, workers=1)
        assert not gc.isenabled()
    finally:
        parallel._run_pool = plain
        (gc.enable if was else gc.disable)()


def test_a_candidates_own_init_is_staged_on_the_shared_plan_and_fits_as_a_plan_of_its_own():
    """per_candidate {"init": ...} alone (the co-search's draws) is staged with the shared plan
    (no FitPlan per candidate): the fits equal ndvm.fit with that init bit for bit, a bad init
    is the same error, and options it cannot take alone (bounds) still get a plan each."""
    progs = GOOD[:6]
    rng = np.random.default_rng(4)
    opts = dict(FIT, optimizer="lm", steps=20, starts=3, seed=1)
    inits = []
    for p in progs:
        names = [n for n in ndvm.parse(p).free_names if n != "x"]
        inits.append({n: rng.normal(0, 1, 3) for n in names[:-1]})  # (the last one drawn)
    inits[2] = {"nope": 1.0}
    inits[3] = {"a": np.ones(5)}
    calls = []
    real = FitPlan.__init__

    def counting(self, *a, **k):
        calls.append(1)
        real(self, *a, **k)

    try:
        FitPlan.__init__ = counting
        got = ndvm.fit_many(progs, workers=1, per_candidate=[{"init": i} for i in inits], **opts)
    finally:
        FitPlan.__init__ = real
    assert len(calls) == 1
    for p, i, r in zip(progs, inits, got):
        try:
            want = ndvm.fit(p, init=i, **opts)
        except ValueError as e:
            assert isinstance(r, ndvm.CandidateError) and str(r.error) == str(e)
            continue
        assert _fit_key(r) == _fit_key(want)
    bounded = dict(opts, bounds={"a": (-5.0, 5.0)})
    got = ndvm.fit_many(progs[:2], workers=1, per_candidate=[{"init": i} for i in inits[:2]],
                        **bounded)
    for p, i, r in zip(progs[:2], inits[:2], got):
        assert _fit_key(r) == _fit_key(ndvm.fit(p, init=i, **bounded))


def test_a_search_on_a_dask_cluster_without_workers_ends_after_its_budget_and_says_so(
        monkeypatch, tmp_path):
    """A Dask cluster with no worker holds its work until one joins, maybe never: a search of
    one population on it used to wait for good (its first round's calibrations never came
    back). It now waits LATE seconds past its time budget, then gives the round's calibrations
    up: their candidates are recorded failed, each saying why, and a warning says so."""
    from ndvm.cosearch import rounds

    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(rounds, "LATE", 0.5)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as \
            cluster, distributed.Client(cluster) as client:
        began = time.monotonic()
        res = ndvm.search("damped", executor=client.get_executor(), budget="1s",
                          out=tmp_path / "run")
        took = time.monotonic() - began
    assert res.stopped == "budget" and took < 30  # (never hangs; ~1.5 s here)
    failed = [r for r in res.records if (r["error"] or "").startswith(
        "not run: no worker of the executor had run it by the deadline")]
    assert failed and all(r["status"] == "failed" for r in failed)
    # (nothing was calibrated: the models without parameters need no calibration, and are
    # scored all the same)
    assert all(not r["params"] for r in res.records)
    lost = [w for w in res.warnings if "were not calibrated" in w]
    assert lost == [(f"{len(failed)} candidate(s) of a round were not calibrated: the executor "
                     f"had not run them 0.5 s after the time budget ended (its workers gone, or "
                     f"none ever joined: a Dask cluster without workers?); they are recorded "
                     f"failed")]
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    assert len(lines) == len(res.records)  # (written as any other round)


def test_fits_that_no_executor_worker_runs_by_the_deadline_are_given_up():
    """``FitSetup.begin(deadline=)``: what the executor has not run by then comes back as a
    CandidateError of NotRun, in its place; what it ran comes back as it is."""

    class Stalls(ThreadPoolExecutor):  # (runs its first task; the later ones never start)
        ran = 0

        def submit(self, fn, *args, **kw):
            self.ran += 1
            return super().submit(fn, *args) if self.ran == 1 else Future()

    progs = GOOD[:4]
    with Stalls(1) as ex:
        begun = parallel.FitSetup(workers=1, executor=ex, **FIT).begin(
            progs, deadline=time.perf_counter() + 0.5)
        got = begun.finish()
    assert len(got) == len(progs)
    ran = [r for r in got if not isinstance(r, parallel.CandidateError)]
    lost = [r for r in got if isinstance(r, parallel.CandidateError)]
    assert ran and lost and len(ran) + len(lost) == len(progs)
    assert all(isinstance(r.error, parallel.NotRun) for r in lost)
    assert [_key(r) for r in ran] == [_key(r) for r in ndvm.fit_many(progs[:len(ran)], **FIT)]


def test_a_dask_cluster_without_workers_is_told_while_its_work_waits(monkeypatch):
    """Work on a Dask cluster that has no worker waits until one joins (Dask's way), and the
    caller is told so once (a warning) instead of waiting in silence."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(parallel, "NO_WORKER_NOTICE", 0.3)
    monkeypatch.setattr(schedule, "GROW", 0.0)
    with distributed.LocalCluster(n_workers=0, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        joins = threading.Timer(2.0, cluster.scale, (1,))
        joins.start()
        try:
            with pytest.warns(UserWarning, match="the Dask cluster has had no worker for 0.3 s"):
                got = ndvm.fit_many(GOOD[:2], executor=client.get_executor(), **FIT)
        finally:
            joins.join()
    assert [_key(r) for r in got] == [_key(r) for r in ndvm.fit_many(GOOD[:2], **FIT)]


def test_a_search_whose_cluster_cannot_be_asked_for_its_workers_ends_with_what_came_back(
        tmp_path):
    """A search of one population asks its Dask cluster for its worker threads every round.
    When the scheduler had stopped, that question raised the client's ConnectionResetError,
    which ended the search without its summary and which the CLI reported as a file it could
    not write. It is now ExecutorLost, and the search ends with what came back."""
    from fake_executors import LosesItsScheduler

    with pytest.raises(schedule.ExecutorLost, match=r"lost the Dask cluster at "
                       r"tcp://10\.0\.0\.9:8786: it could not be asked for its workers "
                       r"\(ConnectionResetError: \[Errno 104\] Connection reset by peer\)"):
        schedule.cluster_threads(LosesItsScheduler(0))
    res = ndvm.search("damped", executor=LosesItsScheduler(8), budget="60s",
                      out=tmp_path / "run")
    assert res.stopped == "executor lost" and res.records
    assert any("could not be asked for its workers" in w for w in res.warnings)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    assert summary["stopped"] == "executor lost" and summary["candidates"] == len(lines)


@pytest.mark.parametrize("islands", [1, 2])
def test_a_search_whose_dask_scheduler_stops_ends_with_what_came_back(islands, tmp_path):
    """A Dask cluster closed mid-search (its scheduler gone: the client cancels every future it
    holds) ended the search with a bare CancelledError and the CLI with its traceback, no
    summary. The search now ends with what came back (``stopped="executor lost"``), a warning
    that names the cluster, and a run folder whose summary and lines agree."""
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    address = cluster.scheduler_address
    closing = threading.Timer(3.0, cluster.close)
    closing.start()
    try:
        res = ndvm.search("damped", executor=client.get_executor(), budget="60s",
                          islands=islands, migration_every=64, out=tmp_path / "run")
    finally:
        closing.join()
        client.close()
    assert res.stopped == "executor lost" and res.records
    lost = [w for w in res.warnings if w.startswith(f"lost the Dask cluster at {address}: it ")]
    assert len(lost) == 1 and "the search stopped there, with what had come back" in lost[0]
    assert "ndvm search --resume" in lost[0]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    lines = (tmp_path / "run" / "candidates.jsonl").read_text().splitlines()
    assert summary["stopped"] == "executor lost" and summary["candidates"] == len(lines)
    assert len(lines) == len(res.records)
    ids = [r["id"] for r in res.records]
    assert len(ids) == len(set(ids))


def test_fit_many_refuses_one_program_and_checks_the_shared_data_once():
    # one source text was read as its characters (7 candidates, 6 of them errors); a target of
    # the wrong length or with a NaN became the same CandidateError for every candidate, so
    # that min() over the FitResults found none
    x = np.arange(64.0)
    with pytest.raises(TypeError, match="fit_many takes a list of programs .* got one source "
                       "text: pass \\[program\\], or call ndvm.fit for one"):
        ndvm.fit_many("(* a x)", data={"x": x}, target=2 * x)
    with pytest.raises(TypeError, match="got one Program: .*Evaluator.evaluate for one"):
        ndvm.evaluate_many(ndvm.parse("(* a x)"), params={"a": 1.0}, data={"x": x})
    for target, match in ((2 * x[:5], "data input 'x' has 64 points but target has 5"),
                          (np.where(x == 3, np.nan, 2 * x),
                           r"target has a non-finite value \(nan\) at index 3"),
                          (np.array([]), "target is empty")):
        with pytest.raises(ValueError, match=match):
            ndvm.fit_many(["(* a x)", "(+ a x)"], data={"x": x}, target=target)
    with pytest.raises(ValueError, match="data input 'x' is not numbers"):
        ndvm.fit_many(["(* a x)"], data={"x": ["a"] * 64}, target=2 * x)
    got = ndvm.fit_many(["(* a x)"], data={"x": x}, target=np.where(x == 3, np.nan, 2 * x),
                        nan_policy="omit")  # (asked for: those points dropped, as ndvm.fit)
    assert got[0].params["a"] == pytest.approx(2.0)


def test_fit_many_checks_an_inputs_values_only_where_a_program_reads_it():
    # (one data dict serves many programs: a NaN in an input is the error of those that read it)
    x = np.arange(64.0)
    z = np.where(x == 5, np.nan, x)
    got = ndvm.fit_many(["(* a x)", "(* a z)"], data={"x": x, "z": z}, target=2 * x)
    assert got[0].params["a"] == pytest.approx(2.0)
    assert isinstance(got[1], ndvm.CandidateError) and "data input 'z'" in str(got[1].error)


def test_inputs_checked_once_for_programs_of_other_free_names_drop_their_own_points():
    # (a plan keeps each set of inputs' checked data for the programs of other names and orders
    # that read the same inputs: with nan_policy="omit" each set drops its own points)
    rng = np.random.default_rng(4)
    x, z = rng.uniform(1, 2, 40), rng.uniform(1, 2, 40)
    y = 2 * x + 3 * z
    x[3], z[5], y[7] = np.nan, np.nan, np.nan
    progs = ["(* a x)", "(+ (* b z) (* a x))", "(* a z)", "(+ (* a x) (* b z))", "(* x a)",
             "(* b x)"]
    got = ndvm.fit_many(progs, data={"x": x, "z": z}, target=y, nan_policy="omit", workers=1)
    for prog, r in zip(progs, got):
        alone = ndvm.fit(prog, data={"x": x, "z": z}, target=y, nan_policy="omit",
                         unused_data="ignore")
        assert r.params == alone.params and r.loss == alone.loss, prog
    assert max(got[1].loss, got[3].loss) < 1e-20  # (both inputs: rows 3, 5 and 7 dropped)
    with pytest.raises(ValueError, match="data input 'z' has a non-finite value"):
        ndvm.fit("(* a z)", data={"x": x, "z": z}, target=np.where(np.isnan(y), 0, y))


def test_each_input_is_checked_once_for_every_set_of_inputs_that_reads_it(monkeypatch):
    # (nan_policy="raise": a set of inputs each of which has passed with other sets is made of
    # their checked arrays, with no check reading every point again; a set with an input not
    # yet checked is checked whole, and its error is the one ndvm.fit gives)
    fit_module = sys.modules["ndvm.fit"]  # (ndvm.fit is the function)

    calls = []
    checked_data = fit_module.checked_data
    monkeypatch.setattr(fit_module, "checked_data",
                        lambda data, *a, **k: calls.append(tuple(data)) or checked_data(
                            data, *a, **k))
    rng = np.random.default_rng(5)
    x, z = rng.uniform(1, 2, 40), rng.uniform(1, 2, 40)
    w = np.where(np.arange(40) == 6, np.inf, x)
    y = 2 * x + 3 * z
    progs = ["(* a x)", "(* b z)", "(+ (* a x) (* b z))", "(+ (* b z) (* a x))", "(* a w)"]
    got = ndvm.fit_many(progs, data={"x": x, "z": z, "w": w}, target=y, workers=1)
    assert calls == [("x",), ("z",), ("w",)]
    for prog, r in zip(progs[:4], got):
        alone = ndvm.fit(prog, data={"x": x, "z": z}, target=y, unused_data="ignore")
        assert r.params == alone.params and r.loss == alone.loss, prog
    assert isinstance(got[4], ndvm.CandidateError)
    assert "data input 'w' has a non-finite value (inf) at index 6" in str(got[4].error)


def test_per_candidate_start_rows_are_the_starts_and_a_non_finite_one_is_named():
    # (the co-search gives each candidate a float64 row of starts a parameter: stacked at once;
    # a NaN among them is refused naming it, as a start given any other way)
    x = np.linspace(0, 1, 30)
    rows = {"a": np.array([0.5, 1.5, -1.0]), "b": np.array([2.0, 0.1, 0.2])}
    setup = ndvm.parallel.FitSetup({"x": x}, 2 * x + 1, workers=1, starts=3, optimizer="lm")
    as_rows = setup.begin(["(+ (* a x) b)"], per_candidate=[{"init": rows}]).finish()[0]
    as_lists = setup.begin(["(+ (* a x) b)"], per_candidate=[
        {"init": {k: list(v) for k, v in rows.items()}}]).finish()[0]
    assert as_rows.all_params.keys() == as_lists.all_params.keys() == rows.keys()
    assert all(np.array_equal(as_rows.all_params[k], as_lists.all_params[k]) for k in rows)
    assert np.array_equal(as_rows.all_losses, as_lists.all_losses)
    assert np.array_equal(_initial_values(("b", "a"), 3, rows, None, 0),
                          np.stack([rows["b"], rows["a"]]))
    bad = {"a": rows["a"], "b": np.array([2.0, np.nan, 0.2])}
    got = setup.begin(["(+ (* a x) b)"], per_candidate=[{"init": bad}]).finish()[0]
    assert isinstance(got, ndvm.CandidateError)
    assert "init['b'] has a non-finite value (nan) at index 1" in str(got.error)


def test_starts_given_stacked_are_the_fits_of_their_init_rows():
    """FitSetup.begin(starts=[(names, [P, S] values)]) fits what per_candidate's init of the
    same rows fits, bit for bit: staged as they are when the names are the fitted ones in order,
    else (another order, a name not fitted, the options' own init) taken as that init, with its
    errors; on an executor too."""
    x = np.linspace(0, 1, 30)
    data, y = {"x": x}, 2 * x + 1
    block = np.array([[0.5, 1.5, -1.0], [2.0, 0.1, 0.2], [0.3, -0.2, 0.9], [1.0, 1.0, 1.0]])
    progs = ["(+ (* a x) b)", "(+ (* a x) b)", "(* a x)", "(+ (* a x) b)"]
    starts = [(("a", "b"), block[0:2]), (("b", "a"), block[0:2]), (("a",), block[2:3]),
              (("a", "c"), block[2:4])]
    per = [{"init": dict(zip(*st))} for st in starts]

    def same(got, want):
        for g, w in zip(got, want, strict=True):
            if isinstance(w, ndvm.CandidateError):
                assert repr(g) == repr(w)
                continue
            assert g.all_params.keys() == w.all_params.keys()
            assert all(np.array_equal(g.all_params[k], w.all_params[k]) for k in w.all_params)
            assert np.array_equal(g.all_losses, w.all_losses) and g.params == w.params

    for options in ({}, {"init": {"a": 0.1}}):
        setup = ndvm.parallel.FitSetup(data, y, workers=1, starts=3, optimizer="lm", **options)
        want = setup.begin(progs, per_candidate=per).finish()
        assert isinstance(want[3], ndvm.CandidateError)  # (c is not fitted)
        same(setup.begin(progs, starts=starts).finish(), want)
        with ThreadPoolExecutor(2) as ex:
            on = ndvm.parallel.FitSetup(data, y, executor=ex, starts=3, optimizer="lm",
                                        **options)
            same(on.begin(progs, starts=starts).finish(), want)
    with pytest.raises(ValueError, match="in place of per_candidate"):
        setup.begin(progs, per_candidate=per, starts=starts)


def test_a_batch_of_programs_staged_in_one_native_call_fits_as_each_staged_alone():
    """FitPlan.stage_ready stages, in one call, the programs whose free names the plan has
    staged before (with the plan's starts or stacked rows of theirs), and leaves the others,
    in order, to FitPlan.stage: a new set of free names, a source text, rows under other names.
    Each fit is the one a fresh setup makes of it."""
    x = np.linspace(0, 1, 30)
    data, y = {"x": x}, 2 * x + 1
    block = np.array([[0.5, 1.5, -1.0], [2.0, 0.1, 0.2], [0.3, -0.2, 0.9]])
    p = [ndvm.parse(s) for s in ("(+ (* a x) b)", "(* a (sin x))", "(+ a (* b x))", "(* a x)",
                                 "(* a (cos x))", "(- (* a x) b)")]
    progs = [p[0], p[1], p[2], "(* b x)", p[3], p[4], p[5], p[0]]
    starts = [(("a", "b"), block[0:2]), (("a",), block[2:3]), (("b", "a"), block[0:2]),
              (("b",), block[1:2]), (("a",), block[0:1]), (("a",), block[1:2]),
              (("a", "b"), block[1:3]), (("a", "b"), block[0:2])]

    def outcome(r):
        if isinstance(r, ndvm.CandidateError):
            return repr(r)
        return r.params, r.loss, {k: v.tolist() for k, v in r.all_params.items()}

    for given in ({}, {"starts": starts}):
        setup = ndvm.parallel.FitSetup(data, y, workers=1, starts=3, optimizer="lm")
        first = setup.begin(progs, **given).finish()  # (every set of free names new: one
        plan = setup.job.plan(ndvm.parallel._evaluator(setup.job.config))  # at a time)
        assert set(plan._ready) == {q.free_names for q in p} | {("b", "x")}
        staged = []
        batch = ndvm.parallel.FitBatch()
        items = setup.begin(progs, **given)._items
        # (it stops at the source text; with starts, at the rows under other names)
        assert plan.stage_ready(batch, items, 0, staged, bool(given)) == (2 if given else 3)
        assert [st[0] for st in staged] == list(range(2 if given else 3))
        again = setup.begin(progs, **given).finish()
        fresh = [ndvm.parallel.FitSetup(data, y, workers=1, starts=3, optimizer="lm").begin(
            [prog], **({"starts": [st]} if given else {})).finish()[0]
            for prog, st in zip(progs, starts)]
        assert [outcome(r) for r in again] == [outcome(r) for r in first] == [
            outcome(r) for r in fresh]


def test_a_reused_batch_staged_again_with_other_free_names_fits_as_fresh_ones():
    """A setup's FitBatch, reset and staged again round after round, has each staged request
    copied over the slot's last one (its bindings' and parameters' vectors grown or shrunk in
    place), and add_ready looks a run of programs of the same free names up once: rounds of
    programs of one to four free names in runs and alternating, the same program many times,
    fit (and read as outcomes) as a fresh setup fits each on its own."""
    x = np.linspace(0.1, 1, 30)
    data, y = {"x": x, "z": x * x}, 2 * x + 1
    srcs = ["(+ (* a x) b)", "(* a z)", "(+ (* a x) (* b z) c)", "(* a x)", "(+ a (* b x))"]
    progs = [ndvm.parse(s) for s in srcs]

    def setup():
        return ndvm.parallel.FitSetup(data, y, workers=1, starts=2, optimizer="lm")

    def outcome(r):
        return r.params, r.loss, {k: v.tolist() for k, v in r.all_params.items()}

    fresh = [outcome(setup().begin([p]).finish()[0]) for p in progs]
    fresh_pairs = [setup().begin([p]).finish(outcomes=True)[0] for p in progs]
    one = setup()
    for order in ([0, 1, 2, 3, 4], [2, 2, 0, 0, 1, 3], [3, 1, 3, 1, 2], [1, 0, 2, 4, 3, 0, 2],
                  [2], [4, 4, 4, 4, 4, 4, 4, 4]):
        got = one.begin([progs[i] for i in order]).finish()
        assert [outcome(r) for r in got] == [fresh[i] for i in order]
        pairs = one.begin([progs[i] for i in order]).finish(outcomes=True)
        assert pairs == [fresh_pairs[i] for i in order]


def test_a_worker_count_or_a_reduction_of_the_wrong_kind_is_refused():
    # (workers=1.5 ran on one thread; reduce="bogus" was a KeyError)
    x = np.ones(3)
    for workers in (1.5, True, "2"):
        with pytest.raises(ValueError, match="workers must be a whole number"):
            ndvm.fit_many(["(* a x)"], data={"x": x}, target=x, workers=workers)
    assert len(ndvm.fit_many(["(* a x)"], data={"x": x}, target=x, workers=np.int64(2))) == 1
    e = ndvm.Evaluator()
    p = ndvm.parse("(* a x)")
    with pytest.raises(ValueError, match='reduce is "lane", "start" or None'):
        e.run(p, e.bind(p, {"a": 1.0}, {"x": [1.0]}), grad=True, reduce="bogus")


def test_fit_many_takes_a_dataframe_and_refuses_pandas_rows_out_of_order():
    # (the row-alignment check was ndvm.fit's alone: fit_many fitted a shuffled Series by
    # position)
    pd = pytest.importorskip("pandas")
    x = np.linspace(1.0, 5.0, 50)
    df = pd.DataFrame({"x": x, "y": 2.0 * x})
    (r,) = ndvm.fit_many(["(* a x)"], data=df[["x"]], target=df.y, workers=1)
    assert r.params["a"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="different indexes"):
        ndvm.fit_many(["(* a x)"], data={"x": df.x}, target=df.y.sample(frac=1, random_state=0),
                      workers=1)


def test_add_items_numbers_programs_as_the_list_comprehensions_did():
    """add_items (fit_many's items of a round's programs, FitSetup.begin) gives the items the
    list comprehensions it replaces gave: a list's, a tuple's or a generator's programs, each
    with its start made a tuple, with None, or with the evaluation's mark numbered after the
    items before; a shorter list of extras ends them as zip did; an extra that is not iterable
    raises tuple()'s TypeError."""
    from ndvm._core._core import add_items

    progs = ["p0", "p1", "p2"]
    starts = [(("a",), 1.0), [("b",), 2.0], (("c",), 3.0)]
    want = [(i, p, tuple(st)) for i, (p, st) in enumerate(zip(progs, starts))]
    for ps, xs in ((progs, starts), (tuple(progs), starts), (progs, iter(starts)),
                   (iter(progs), tuple(starts))):
        got = add_items([], ps, xs, pairs=True)
        assert got == want and [type(x) for _, _, x in got] == [tuple] * 3
    assert add_items([], progs, starts, pairs=True)[0][2] is starts[0]  # (a tuple as it is)
    assert add_items([], progs, starts) == [(i, p, st) for i, (p, st) in
                                            enumerate(zip(progs, starts))]
    assert add_items([], progs) == [(i, p, None) for i, p in enumerate(progs)]
    items = [(0, "x", None)]
    assert add_items(items, iter(progs), "evaluated") is items
    assert items == [(0, "x", None)] + [(1 + j, p, "evaluated") for j, p in enumerate(progs)]
    assert add_items([], progs, starts[:2], pairs=True) == want[:2]
    assert add_items([], progs[:1], starts, pairs=True) == want[:1]
    assert add_items([], [], starts, pairs=True) == []
    with pytest.raises(TypeError, match="object is not iterable"):
        add_items([], progs, [1, 2, 3], pairs=True)
    with pytest.raises(TypeError, match="object is not iterable"):
        add_items([], iter(progs), (1, 2, 3), pairs=True)
