"""``ndvm.fit_many`` and ``ndvm.evaluate_many``: many independent candidates at once.

By default candidates run on one persistent pool of worker threads (the native calls release the
GIL; each thread owns its Machine through the Evaluator's thread-local); any
``concurrent.futures.Executor`` (Dask's ``client.get_executor()`` included) gets them in chunks.
Both go through ``ndvm.schedule.Scheduler`` (the one scheduler: submit, wait, cancel, lend, a lost
worker's chunk run again); this module decides what a piece of work is.
Fits go a chunk at a time: the shared options are checked once, when the call is made (one
``ndvm.FitOptions``, replaced per candidate that has options of its own), the data and target once
per process (``ndvm.fit.FitPlan``), each program is checked and bound and staged in the thread's
``FitBatch``, and the whole chunk is calibrated in one native call without the GIL, so a worker
holds the GIL only to stage a chunk and to read it back. ``begin_fits`` (the co-search's door) stages a whole batch once in one shared
``FitBatch`` that every thread lent to it (the caller's, the proposer's, the pool's) runs natively,
claiming one fit at a time without the GIL. On an executor, chunks grow with the measured rate so
that a task's fixed cost stays a small part of its work.
Invariants: results come back in input order; a failing candidate yields a ``CandidateError``,
never an exception; a candidate's result depends only on its program and options (it is bit for bit
what ``ndvm.fit`` or ``Evaluator.evaluate`` gives), never on the worker, the chunking, the order or
its position in the batch.
"""
import gc
import itertools
import math
import os
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Mapping

import numpy as np

from ndvm._core import FitBatch, Program, after_numbers, parse
from ndvm._core._core import add_items
from ndvm.evaluator import Evaluator
from ndvm.fit import EvaluateAfter, FitPlan, FitResult, _program, checked_data
from ndvm.fit_options import OPTION_NAMES, FitOptions
from ndvm.schedule import (Scheduler, check_workers, died_each_time, executor_workers,
                           lost_worker, shutdown)

__all__ = ["EXECUTOR_CHUNK_SIZE", "EXECUTOR_TASK_SIZE", "TASKS_PER_WORKER", "CandidateError",
           "evaluate_many", "executor_chunk", "executor_round", "fit_many", "shutdown"]

# Chunks sent to an executor (the one place their size is decided; the co-search's rounds on an
# executor follow from it, executor_round). A Dask task costs ~2.3 ms (threads) to ~2.6 ms
# (processes) of scheduling on a 2-worker LocalCluster on this machine (bench/parallel_scaling.py
# --dask), against ~0.05 ms of CPU for one Adam fit of the paper's protocol (50 steps, 44
# points, one start), ~0.5 ms for a co-search fit (eight starts) and more for LM; candidates
# differ in cost by orders of magnitude, and a lost worker's tasks are re-run, so each worker
# should also get several. Default: the first chunks have executor_chunk candidates
# (TASKS_PER_WORKER chunks per worker, at most EXECUTOR_CHUNK_SIZE each); then, from the rate the
# finished tasks report, as many as take EXECUTOR_TASK_SECONDS (~40x a task's cost: under 3%),
# at most an even share of what is left per worker; TASKS_IN_FLIGHT tasks per worker are queued
# at a time (one runs while the next waits). A caller that can choose its batch (the co-search)
# hands over executor_round(executor) candidates a call, EXECUTOR_TASK_SIZE in its first tasks.
EXECUTOR_CHUNK_SIZE = 256
TASKS_PER_WORKER = 4
EXECUTOR_TASK_SIZE = 128
# (executor_round: EXECUTOR_TASK_SIZE candidates for each of TASKS_PER_WORKER tasks a worker)
EXECUTOR_BATCH = TASKS_PER_WORKER * EXECUTOR_TASK_SIZE
EXECUTOR_TASK_SECONDS = 0.1
TASKS_IN_FLIGHT = 2
# Candidates a pool worker claims at a time (at most; TASKS_PER_WORKER claims per worker at
# least): one claim is one native call, so the GIL changes hands once per claim, not per fit.
# The GIL-held share of a claim (staging and reading back) falls with its size: ~36 us a fit
# at 16, ~32 us at 32, against ~170-210 us of native Adam fit (CPU time, 247 candidates).
POOL_CHUNK_SIZE = 32
_POLL_SECONDS = 0.1  # how often the caller wakes to update progress and notice Ctrl-C
# seconds a Dask cluster may have no worker while work waits for one before the caller is told
NO_WORKER_NOTICE = 30.0

# what a candidate's own options (per_candidate) cannot change: how the candidates are evaluated
_SHARED_ONLY = frozenset({"client", "dtype", "evaluator", "options"})
_PER_CANDIDATE = OPTION_NAMES - _SHARED_ONLY  # (what it can)
_EVALUATED = "evaluated"  # an item's extra in place of options: FitSetup.begin's ``evaluated``


class CandidateError:
    """A candidate that failed: ``index`` in the input, program ``name`` and ``source``, the
    ``error`` raised (an ndvm.SchemeError for bad programs) and its formatted ``traceback``."""

    __slots__ = ("error", "index", "name", "source", "traceback")

    def __init__(self, index, name, source, error, traceback=None):
        self.index = index
        self.name = name
        self.source = source
        self.error = error
        self.traceback = traceback

    @property
    def program(self):
        """The program's name (its source when it has none)."""
        return self.name if self.name is not None else self.source

    @property
    def kind(self):
        """The error's kind ("ReadError", "EvalError", ...) or its exception type's name."""
        return getattr(self.error, "kind", type(self.error).__name__)

    def __getstate__(self):
        return (self.index, self.name, self.source, self.error, self.traceback)

    def __setstate__(self, state):
        self.index, self.name, self.source, self.error, self.traceback = state

    def __repr__(self):
        # a SchemeError's text already names its kind ("file:1:6: EvalError: ..."); others do not
        text = str(self.error).splitlines()[0] if str(self.error) else ""
        if not hasattr(self.error, "kind"):
            text = f"{self.kind}: {text}" if text else self.kind
        return f"CandidateError({self.index}, {self.name!r}, {text})"


class NotRun(TimeoutError):
    """The error of a candidate that no worker of the executor had run by the caller's deadline
    (``FitSetup.begin``'s): its workers gone, or none ever joined (a Dask cluster)."""


class _Job:
    """What every candidate of one call shares: the kind of run, the evaluator and the options
    (for fits: {"fit": FitOptions, "data": ..., "target": ...}, and the FitPlan of them, built
    once per process: a job unpickled in an
    executor's worker process reuses the plan of the same call's earlier tasks there, found by
    the job's ``token``)."""

    __slots__ = ("_ev", "_plan", "config", "kind", "options", "token")

    def __init__(self, kind, config, options):
        self.kind = kind
        self.config = config
        self.options = options
        self.token = _TOKEN_PREFIX + next(_TOKENS).to_bytes(8, "little")
        self._plan = self._ev = None

    def __getstate__(self):
        return (self.kind, self.config, self.options, self.token)

    def __dask_tokenize__(self):
        # (Dask names a task by hashing its arguments: the token is the job's identity)
        return self.token

    def __setstate__(self, state):
        self.kind, self.config, self.options, self.token = state
        self._plan = self._ev = None

    def evaluator(self):
        """This process's Evaluator for the job's config (``_evaluator``'s), found once a job
        (the shared Evaluators are never dropped): a FitSetup's job begins a batch a round,
        whose look-up of it (its limits made a dict, sorted into a key) cost more than the
        batch's own Python."""
        ev = self._ev
        if ev is None:
            ev = self._ev = _evaluator(self.config)
        return ev

    @classmethod
    def shared(cls, job):
        """This process's copy of ``job`` (an unpickled one): the first of its call to arrive,
        with its plan (a few recent calls' jobs are kept)."""
        with _JOBS_LOCK:
            first = _JOBS.get(job.token)
            if first is None:
                first = _JOBS[job.token] = job
                while len(_JOBS) > _JOBS_KEPT:
                    del _JOBS[next(iter(_JOBS))]
        return first

    def plan(self, ev, extra=None):
        """The FitPlan of the options (with a candidate's ``extra`` ones) on ``ev``; raises what
        ndvm.fit would raise for them. The shared plan is built once (threads may race to build
        it: the plans are equal)."""
        o = self.options
        if extra:
            return FitPlan(o["fit"].replace(**extra), o["data"], o["target"], ev, o["after"])
        plan = self._plan
        if plan is None:
            try:
                plan = FitPlan(o["fit"], o["data"], o["target"], ev, o["after"])
            except Exception as e:  # noqa: BLE001 - raised again for every candidate
                plan = e
            self._plan = plan
        if isinstance(plan, Exception):
            return FitPlan(o["fit"], o["data"], o["target"], ev, o["after"])  # raises it anew
        return plan


def _evaluator_config(evaluator, client, dtype, compat):
    if evaluator is not None:
        return (evaluator.client.name, evaluator.dtype, evaluator.compat,
                tuple(sorted(evaluator.limits.items())))
    Evaluator(client, dtype, compat)  # validate here, once, rather than in every candidate
    return (client, dtype, compat, ())


# A job's token: this process's random prefix and a count (os.urandom for every call released
# the GIL, and getting it back cost the caller up to a switch interval while other threads ran)
_TOKEN_PREFIX = os.urandom(8)
_TOKENS = itertools.count()


def _new_token_prefix():  # (a forked child names its jobs apart from its parent's)
    global _TOKEN_PREFIX
    _TOKEN_PREFIX = os.urandom(8)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_token_prefix)
_JOBS = {}  # token -> this process's copy of a job an executor sent (see _Job.shared)
_JOBS_KEPT = 8
_JOBS_LOCK = threading.Lock()


def _evaluator(config):
    """This process's Evaluator for ``config``; its thread-local machines stay warm across calls."""
    client, dtype, compat, limits = config
    return Evaluator.shared(client, dtype, compat, **dict(limits))


def _describe(program, index):
    if isinstance(program, Program):
        return program.name, program.source
    if isinstance(program, str):
        return f"<candidate {index}>", program
    return f"<candidate {index}>", None


def _named(item):
    """(index, name, source) of an (index, program, extra) item."""
    index, program, _ = item
    return (index, *_describe(program, index))


def _failed(index, name, source, e):
    """The CandidateError of exception ``e`` (being handled: its traceback is formatted, and
    dropped from ``e``: its frames hold the chunk's results, this error among them, a reference
    cycle only the garbage collector could free)."""
    tb = None if getattr(e, "kind", None) else traceback.format_exc()
    return CandidateError(index, name, source, e.with_traceback(None), tb)


def _run_one(job, ev, index, program, extra):
    """One candidate evaluated: its Result, or a CandidateError for anything it raises."""
    name, source = _describe(program, index)
    try:
        if isinstance(program, str):
            program = parse(program, name=name)
        params = job.options["params"] if extra is None else extra
        return ev.evaluate(program, params=params, data=job.options["data"],
                           consts=job.options["consts"], grad=job.options["grad"])
    except Exception as e:  # noqa: BLE001 - a bad candidate must never stop the batch
        return _failed(index, name, source, e)


_LOCAL = threading.local()


def _stage(job, ev, items, batch, results):
    """Check, bind and stage each (index, program, extra) item in ``batch``; a candidate that
    fails here becomes a CandidateError in ``results``. Returns [(position, plan, staged)]."""
    staged = []
    try:  # the plan of the shared options (a candidate with options of its own has its own)
        shared = job.plan(ev)
    except Exception:  # noqa: BLE001 - raised again for every candidate that uses it
        shared = None
    starts = shared is not None and shared.init_alone
    pos = 0
    while pos < len(items):
        if shared is not None:  # (in one native call, the candidates whose free names the
            # plan has staged before: a search's are mostly; the others one at a time)
            pos = shared.stage_ready(batch, items, pos, staged, starts)
            if pos == len(items):
                break
        here, (index, program, extra) = pos, items[pos]
        pos += 1
        try:
            if type(program) is not Program:
                program = _program(program, _describe(program, index)[0])
            if type(extra) is str:  # (_EVALUATED: FitSetup.begin's ``evaluated``)
                plan = job.plan(ev) if shared is None else shared
                staged.append((here, plan, plan.stage_evaluation(batch, program)))
                continue
            if type(extra) is tuple:  # (FitSetup.begin's ``starts``: an init of stacked rows)
                if starts:
                    staged.append((here, shared, shared.stage(batch, program, starts=extra)))
                    continue
                extra = {"init": dict(zip(*extra))}
            init = None
            if extra is None and shared is not None:
                plan = shared
            elif shared is not None and shared.takes_init(extra):  # (no plan of its own)
                plan, init = shared, extra["init"]
            else:
                plan = job.plan(ev, extra)
            staged.append((here, plan, plan.stage(batch, program, init)))
        except Exception as e:  # noqa: BLE001 - a bad candidate must never stop the batch
            results[here] = _failed(*_named(items[here]), e)
    return staged


def _read(items, staged, batch, results, outcomes=False):
    """The results of the staged candidates once ``batch`` has run (a failed fit: its
    CandidateError); with ``outcomes``, ``fit_outcome``'s pair in place of each FitResult, read
    for the whole batch in one call (``FitBatch.outcomes``)."""
    if outcomes:
        staged = batch.outcomes(staged, results)  # (the failed fits left: their errors below)
    for pos, plan, st in staged:
        try:
            results[pos] = plan.result(st, batch)
        except Exception as e:  # noqa: BLE001 - its native fit failed
            results[pos] = _failed(*_named(items[pos]), e)
    return results


def _fit_chunk(job, ev, items):
    """Fit a chunk of (index, program, extra) items: each one checked, bound and staged in this
    thread's FitBatch, all calibrated in one native call, then read back; a candidate that fails
    (at any stage) becomes a CandidateError in its place and the others are unaffected."""
    results = [None] * len(items)
    batch = getattr(_LOCAL, "batch", None)
    if batch is None:
        batch = _LOCAL.batch = FitBatch()
    batch.reset()
    try:
        staged = _stage(job, ev, items, batch, results)
        ev.calibrate(batch)
        return _read(items, staged, batch, results)
    finally:
        batch.reset()  # (drops the references to the chunk's programs and inputs)


def _run_items(job, ev, items):
    """Run a list of (index, program, extra) items on ``ev``: results in order."""
    if job.kind == "fit":
        return _fit_chunk(job, ev, items)
    return [_run_one(job, ev, *item) for item in items]


class _Chunk:
    """The candidates of one executor task: a list of (index, program, extra) items, and
    ``(job token, first index)``, the name Dask gives the task (it would otherwise hash every
    item, pickling each program and parsing it again to check the pickle)."""

    __slots__ = ("items", "key")

    def __init__(self, items, key):
        self.items = items
        self.key = key

    def __reduce__(self):
        return (_Chunk, (self.items, self.key))

    def __dask_tokenize__(self):
        return self.key


def executor_chunk(n, executor):
    """Candidates per task when ``n`` go to ``executor`` (see EXECUTOR_CHUNK_SIZE)."""
    return _chunk(n, executor_workers(executor))


def _chunk(n, workers):
    """Candidates per task when ``n`` go to an executor of ``workers`` workers."""
    return min(EXECUTOR_CHUNK_SIZE, math.ceil(n / (TASKS_PER_WORKER * workers)))


def executor_round(executor):
    """Candidates a caller that chooses its batch size should hand ``fit_many`` per call on
    ``executor``: EXECUTOR_BATCH a worker thread."""
    return EXECUTOR_BATCH * executor_workers(executor)


def _run_chunk(job, chunk):
    """Run a _Chunk of candidates; the task an executor receives. The results come back as one
    _Packed with the seconds they took; fits packed (``_pack``): the chunk's native outputs once
    and a (k, meta) per candidate."""
    t = time.perf_counter()
    job = _Job.shared(job)
    out = _run_items(job, job.evaluator(), chunk.items)
    seconds = time.perf_counter() - t
    return _pack(out, seconds) if job.kind == "fit" else _Packed(out, seconds)


class _Packed:
    """A chunk's results for the trip back from an executor, one object (Dask pickles the
    items of a returned list one by one, so shared parts would be pickled again for each), and
    the ``seconds`` the task worked (what the next chunks' size follows from)."""

    __slots__ = ("items", "seconds")

    def __init__(self, items, seconds=0.0):
        self.items = items
        self.seconds = seconds

    def __reduce__(self):
        return (_Packed, (self.items, self.seconds))


def _pack(results, seconds=0.0):
    """A chunk's results packed: each lazy FitResult as its ``(outputs, k, meta)`` (the chunk
    shares one FitOutputs and its plans' metas, which pickle once: two buffers and a table for
    the chunk, instead of a dozen arrays per candidate); anything else (a CandidateError) as
    itself."""
    packed = []
    for r in results:
        lazy = r.__dict__.get("_lazy") if type(r) is FitResult else None
        packed.append(r if lazy is None else (lazy.outputs, lazy.k, lazy.meta))
    return _Packed(packed, seconds)


def _unpack(packed):
    """The results ``_pack`` packed: lazy FitResults over the unpickled outputs."""
    return [item[0].fit_result(item[1], FitResult, item[2]) if type(item) is tuple else item
            for item in packed.items]


class _Progress:
    """A tqdm bar (candidates/s) when asked for and available; otherwise nothing."""

    def __init__(self, enabled, total, desc):
        self.bar = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                warnings.warn("progress=True needs tqdm (pip install 'ndvm[progress]')",
                              stacklevel=4)
            else:
                self.bar = tqdm(total=total, desc=desc, unit="cand", smoothing=0.1)
        self.shown = 0

    def to(self, done):
        if self.bar is not None and done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self):
        if self.bar is not None:
            self.bar.close()


class _Claims:
    """The candidates of one pool call, claimed a chunk at a time by the workers: at most
    ``chunk``, and never more than a share of what is left (so that they end their last claims
    together). Iterating gives (start, stop) claims until none is left or ``stop()``; ``done``
    counts the candidates of the claims finished."""

    def __init__(self, n, chunk, share):
        self.n, self.chunk, self.share = n, chunk, share
        self.next = self.done = 0
        self.stopped = False
        self._lock = threading.Lock()

    def claims(self):
        finished = 0
        while not self.stopped:
            with self._lock:
                self.done += finished
                start = self.next
                if start >= self.n:
                    return
                stop = self.next = start + max(1, min(self.chunk,
                                                      -(-(self.n - start) // self.share)))
            yield start, stop
            finished = stop - start

    def stop(self):
        self.stopped = True


def _run_pool(job, items, workers, chunk, progress):
    """Run on the persistent worker threads: ``workers`` of them claim chunks (``_Claims``)."""
    n = len(items)
    results = [None] * n
    claims = _Claims(n, chunk, 2 * workers)

    def drain():
        ev = job.evaluator()
        for start, stop in claims.claims():
            results[start:stop] = _run_items(job, ev, items[start:stop])

    sched = Scheduler.threads(workers)
    handles = [sched.submit(drain) for _ in range(min(workers, math.ceil(n / chunk)))]
    try:
        pending = handles
        while pending:
            done = sched.wait(pending, timeout=_POLL_SECONDS)
            pending = [h for h in pending if h not in done]
            progress.to(claims.done)
    except BaseException:  # Ctrl-C: stop claiming work, let running candidates end, then leave
        claims.stop()
        sched.cancel(handles)
        sched.wait(handles, every=True)
        raise
    sched.raise_failures(handles)  # a worker's own failure (never a candidate's) re-raises here
    if claims.next < n:  # every task was cancelled before it started
        raise RuntimeError("the ndvm worker pool was shut down during the call")
    return results


def _run_executor(executor, job, items, chunk_size, progress, deadline=None):
    """Run on any concurrent.futures.Executor, one task per chunk of candidates, at most
    TASKS_IN_FLIGHT per executor worker at a time: ``chunk_size`` candidates a task when given;
    else the chunks adapt: the first have ``_chunk``'s candidates (or, when this executor ran a
    call of the same kind before, as many as its rate says), the later ones as many as take
    EXECUTOR_TASK_SECONDS at the rate measured so far (never fewer than the first, nor more
    than an even share of what is left per worker), so that a task's fixed cost stays a small
    part of its work whatever a candidate costs. A task
    whose worker died runs again (the scheduler's). ``deadline`` (a ``time.perf_counter()``
    time): the candidates not run by then are given up, each a CandidateError of NotRun. A Dask
    cluster without a worker for NO_WORKER_NOTICE seconds while work waits is told once (a
    warning): Dask holds the work until a worker joins."""
    n = len(items)
    results = [None] * n
    sched = Scheduler.on(executor)
    workers = sched.workers
    adaptive = not chunk_size
    chunk = int(chunk_size or _chunk(n, workers))  # (the cluster's threads as asked just now)
    running = []
    key = _rate_key(job)
    known = _remembered(executor, key) if adaptive else None  # (this executor's last call's)
    state = {"next": 0, "seconds": 0.0, "ran": 0}  # what this call's finished tasks measured

    def submit():
        start = state["next"]
        size = chunk
        per = state["seconds"] / state["ran"] if state["ran"] else known
        if adaptive and per is not None:
            fill = math.ceil(EXECUTOR_TASK_SECONDS / per) if per > 0 else n
            size = max(chunk, min(fill, math.ceil((n - start) / workers)))
        stop = state["next"] = min(n, start + size)
        task = _Chunk(items[start:stop], (job.token, start))
        running.append(sched.submit(_run_chunk, job, task, tag=start))

    waiting = None  # (since when the cluster has had no worker while work waited; -1: told)
    try:
        while state["next"] < n and len(running) < TASKS_IN_FLIGHT * workers:
            submit()
        while running:
            done = sched.wait(running, timeout=_POLL_SECONDS)
            for h in done:
                running.remove(h)
                try:
                    packed = h.result()
                except Exception as e:
                    if not lost_worker(e):
                        raise
                    # (its worker died on every try: its candidates fail, the others go on)
                    error, gone = died_each_time(h, e), h.args[1].items
                    results[h.tag:h.tag + len(gone)] = [CandidateError(*_named(item), error)
                                                        for item in gone]
                    continue
                out = _unpack(packed) if job.kind == "fit" else packed.items
                results[h.tag:h.tag + len(out)] = out
                state["seconds"] += packed.seconds
                state["ran"] += len(out)
            while state["next"] < n and len(running) < TASKS_IN_FLIGHT * workers:
                submit()
            progress.to(state["ran"])
            if running and deadline is not None and time.perf_counter() >= deadline:
                sched.cancel(running)
                return _not_run(items, results)
            waiting = _no_worker_notice(sched, waiting, bool(done))
    except BaseException:
        sched.cancel(running)
        raise
    if adaptive and state["ran"]:
        _remember(executor, key, state["seconds"] / state["ran"])
    return results


def _no_worker_notice(sched, since, progressed):
    """Tell once (a warning) that the Dask cluster of ``sched`` has had no worker for
    NO_WORKER_NOTICE seconds while work waited (``since``: since when, None: it had one or work
    came back, -1: told); the new ``since``."""
    if since == -1.0:
        return since
    if progressed or not sched.workerless():
        return None
    now = time.perf_counter()
    if since is None:
        return now
    if now - since < NO_WORKER_NOTICE:
        return since
    warnings.warn(f"ndvm: the Dask cluster has had no worker for {NO_WORKER_NOTICE:g} s: its "
                  f"work waits until one joins (start dask workers, or stop with Ctrl-C)",
                  stacklevel=2)
    return -1.0


def _not_run(items, results):
    """``results`` with each candidate not yet run a CandidateError of NotRun."""
    for pos, r in enumerate(results):
        if r is None:
            results[pos] = CandidateError(*_named(items[pos]), NotRun(
                "not run: no worker of the executor had run it by the deadline (its workers "
                "gone, or none ever joined)"))
    return results


# The seconds a candidate took in each executor's last call of a kind, so that a caller making
# many similar calls (the co-search's rounds, each one call) starts every call at the task size
# the earlier ones grew to; forgotten with the executor.
_RATES = weakref.WeakKeyDictionary()
_RATES_LOCK = threading.Lock()


def _rate_key(job):
    """What a candidate's cost depends on besides its program: the kind of run and its options."""
    o = job.options
    if job.kind == "fit":
        f = o["fit"]
        return ("fit", job.config, f.solver, f.steps, f.starts, f.loss)
    return (job.kind, job.config, o.get("grad"))


def _remembered(executor, key):
    with _RATES_LOCK:
        try:
            return _RATES.get(executor, {}).get(key)
        except TypeError:  # (an executor that cannot be weakly referenced: nothing kept)
            return None


def _remember(executor, key, seconds):
    with _RATES_LOCK:
        try:
            _RATES.setdefault(executor, {})[key] = seconds
        except TypeError:
            pass


# Python's cyclic garbage collector is paused while a batch runs: a batch allocates a few
# container objects per candidate (its item, its lazy result), each allocation counts towards the
# next collection, and the collections (which walk every tracked object, the batch's growing
# results among them) ran under the GIL while the other workers waited for it: they were half of
# fit_many's time outside the native fits (bench/parallel_scaling.py: 0.16-0.18 of a one-worker
# call of 19,760 candidates, 0.06-0.07 without them). Nested and concurrent calls are counted;
# the last one to end restores the collector as the first found it. Reference counting still
# frees everything acyclic at once; cycles made meanwhile are collected after the call (a
# candidate's failure is kept without its traceback's frames, _failed, so it makes none). The
# co-search pauses it for a whole search (collecting the young generation once it is large:
# collect_young). When the last call ends, what a search's pause left young (its records, trees,
# memo entries: alive, acyclic) joins the oldest generation unwalked (``promote``:
# _promote_young), else the first allocation after it walked every one of them for nothing; a
# pause of fit_many alone leaves the program's generations as they were.
_GC_PAUSES = [0, False, False]  # calls running, whether the collector was enabled before the
# first, whether one of them promotes at the end
_GC_LOCK = threading.Lock()


# The young generation is collected (while the collector is paused) once this many more tracked
# objects were made than freed: the search makes no cycles, a custom proposer's are collected
# in bounded time. Collecting after every batch of 16 candidates instead walked what the batch
# had kept for nothing: 3.7 us a candidate on damped, 0.6% of an island's time, 1.6 us now.
YOUNG_LIMIT = 20_000


def collect_young():
    """Collect the young generation when it holds more than YOUNG_LIMIT objects."""
    if gc.get_count()[0] > YOUNG_LIMIT:
        gc.collect(0)


def _promote_young():
    """Move every tracked object to the oldest generation without walking them (``gc.freeze``
    then ``gc.unfreeze``: each splices lists), unless the program froze objects of its own (then
    nothing moves: unfreezing would hand its frozen objects back to the collector). Cycles among
    them are collected by the next full collection, not the next young one. An island's epoch
    of 256 candidates left ~5,000 objects young, whose collection at its end took ~300-600 us
    (the middle generation's, ~1.5 ms, every eleventh) and freed none."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


class gc_paused:  # (named as the function it was: ``with gc_paused(): ...``)
    """The cyclic collector paused while the block runs (see above); with ``promote`` (a
    search's pause), what is young when the last pause ends joins the oldest generation. (A
    class, not a generator's context manager: a search pauses it once a round, in fit_many's
    ``Begun.finish``, where making a generator and its manager cost more than the pause.)"""

    __slots__ = ("promote",)

    def __init__(self, promote=False):
        self.promote = promote

    def __enter__(self):
        with _GC_LOCK:
            if _GC_PAUSES[0] == 0:
                _GC_PAUSES[1] = gc.isenabled()
                _GC_PAUSES[2] = False
                gc.disable()
            _GC_PAUSES[0] += 1
            _GC_PAUSES[2] = _GC_PAUSES[2] or self.promote

    def __exit__(self, *exc):
        with _GC_LOCK:
            _GC_PAUSES[0] -= 1
            if _GC_PAUSES[0] == 0 and _GC_PAUSES[1]:
                if _GC_PAUSES[2]:
                    _promote_young()
                gc.enable()
        return False


# (fit_many's pause, one object entered by every call: a pause keeps its state in _GC_PAUSES, so
# one instance serves any number of threads and nested calls, and a round makes none)
_PAUSE = gc_paused()


def _run(job, items, workers, executor, chunk_size, progress, desc, deadline=None):
    n = len(items)
    if n == 0:
        return []
    if chunk_size is not None and int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    bar = _Progress(progress, n, desc)
    try:
        with _PAUSE:
            if executor is not None:  # (a chunk size given is kept; the default adapts)
                return _run_executor(executor, job, items, chunk_size, bar,
                                     deadline=deadline)
            workers = check_workers(workers)
            chunk = chunk_size
            if chunk is None:  # a chunk of fits is one native call; evaluations go one at a time
                chunk = 1
                if job.kind == "fit":
                    chunk = min(POOL_CHUNK_SIZE, n // (TASKS_PER_WORKER * workers))
            return _run_pool(job, items, workers, max(1, int(chunk)), bar)
    finally:
        bar.close()


def _per_candidate(value, n, what):
    if value is None or isinstance(value, Mapping):
        return None
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{what} has {len(value)} entries for {n} candidates")
    return value


def fit_many(programs, data=None, target=None, *, workers=None, executor=None, chunk_size=None,
             progress=False, per_candidate=None, options=None, after=None, **fit_options):
    """``ndvm.fit`` each program (an ndvm.Program or source text); results in input order.

    Each result is a FitResult or a CandidateError. workers: threads of the persistent pool
    (default: the cores); executor: any concurrent.futures.Executor instead, sent ``chunk_size``
    candidates per task (default: TASKS_PER_WORKER tasks per executor worker, at most
    EXECUTOR_CHUNK_SIZE candidates each; on the pool, how many candidates a worker claims at a
    time, each claim one native call: default POOL_CHUNK_SIZE, fewer when that would leave a
    worker fewer than TASKS_PER_WORKER claims);
    per_candidate: one dict of fit options per candidate overriding the shared ones (e.g.
    independent random starts: ``{"seed": s} for s in np.random.SeedSequence(0).spawn(n)``);
    progress: a tqdm bar. Every candidate uses the same ``seed`` as ``ndvm.fit`` would, so a
    program's fit does not depend on the batch it is in. ``unused_data`` defaults to "ignore"
    here: the shared ``data`` may hold inputs that some programs do not use; so a program that
    misspells an input (``xx`` for ``x``) is fitted with it as one more parameter, where
    ``ndvm.fit`` refuses: name the parameters (``params=``) to have it refused as unbound
    (a CandidateError of its UnboundError). options: an
    ``ndvm.FitOptions`` the ``fit_options`` given (``ndvm.fit``'s names) are applied to.
    after: an ``ndvm.fit.EvaluateAfter``: each fitted model is also evaluated at its points and
    reduced there in the fit's native call (the result's ``after``).
    """
    job, items = _fit_job(programs, data, target, per_candidate, dict(fit_options, options=options),
                          after)
    return _run(job, items, workers, executor, chunk_size, progress, "fit_many")


def _fit_job(programs, data, target, per_candidate, fit_options, after=None):
    """fit_many's arguments checked: the _Job and the (index, program, extra) items."""
    job = _fit_setup(data, target, fit_options, after)
    return job, _fit_items(programs, per_candidate)


def _fit_setup(data, target, fit_options, after):
    """The _Job of fit_many's shared arguments, checked."""
    evaluator = fit_options.pop("evaluator", None)
    options = FitOptions.of(fit_options.pop("options", None), **fit_options)
    if target is None:
        raise ValueError("fit_many needs a target")
    # (the target and the shared data's sizes checked once, as ndvm.fit checks them: a wrong
    # one is the call's error, not every candidate's; an input's values only where it is read)
    checked_data({} if data is None else data, target, options.nan_policy, inputs_finite=False)
    if options.seed is None:  # fresh entropy, drawn once, so results do not depend on workers
        options = options.replace(seed=np.random.SeedSequence().entropy)
    # one data dict serves many programs, each using some of its inputs: by default an input a
    # program does not use is ignored (ndvm.fit alone reports it as an error)
    if options.unused_data is None:
        options = options.replace(unused_data="ignore")
    config = _evaluator_config(evaluator, options.client, options.dtype, None)
    if after is not None and not isinstance(after, EvaluateAfter):
        raise TypeError(f"after must be an ndvm.fit.EvaluateAfter, got {type(after).__name__}")
    return _Job("fit", config, {"fit": options, "data": data, "target": target, "after": after})


def _program_list(programs, what, one):
    """``programs`` as a list; TypeError for one program (a source text, a Program) given in
    place of the list (a text read as a sequence is its characters, each a candidate)."""
    if isinstance(programs, (str, bytes, Program)):
        kind = "source text" if isinstance(programs, (str, bytes)) else "Program"
        raise TypeError(f"{what} takes a list of programs (source texts or ndvm.Program), got "
                        f"one {kind}: pass [program], or call {one} for one")
    return list(programs)


def _fit_items(programs, per_candidate, starts=None):
    """The (index, program, extra) items of fit_many's programs, per_candidate checked; with
    ``starts`` (FitSetup.begin's, in place of per_candidate), each program's start as its extra."""
    programs = _program_list(programs, "fit_many", "ndvm.fit")
    if starts is not None:
        if per_candidate is not None or len(starts) != len(programs):
            raise ValueError("starts is one (names, values) a program, in place of "
                             "per_candidate")
        return add_items([], programs, starts, pairs=True)
    if per_candidate is None:
        return add_items([], programs)
    extras = _per_candidate(per_candidate, len(programs), "per_candidate")
    for e in extras:
        bad = set(e or ()) - _PER_CANDIDATE
        if bad:
            raise TypeError(f"per_candidate cannot set {sorted(bad)}")
    return [(i, p, e) for i, (p, e) in enumerate(zip(programs, extras))]


class Begun:
    """Fits begun by ``begin_fits``: staged (on the calling thread) in one FitBatch that every
    thread lent to it runs natively, claiming one fit at a time without the GIL; or, with an
    ``executor``, sent to it in chunks by ``finish`` (nothing to lend a thread to)."""

    def __init__(self, job, items, workers, executor=None, deadline=None, spare=None):
        self._job, self._items, self._workers = job, items, workers
        self._executor, self._deadline = executor, deadline
        self._results = [None] * len(items)
        # (``spare``: a FitSetup's batches given back by its finished Begun, reset: their
        # buffers kept, no FitBatch made and freed a round)
        self._spare = spare
        self._batch = _spare_batch(spare) if executor is None else FitBatch()
        self._staged = []
        # (the process's Evaluator for the job: every thread lent to the batch drains it on
        # that Evaluator's machine for the thread)
        self._ev = job.evaluator()
        if executor is None:
            self._batch.reserve(len(items))
            self._staged = _stage(job, self._ev, items, self._batch, self._results)
        self._batch.open()

    def drain(self, limit=None, stop=None):
        """Lend the calling thread: it runs fits until none is left to claim (or ``limit`` are
        run, or ``stop``, an ``ndvm._core.Stop``, is set); how many it ran (none on an
        executor)."""
        return self._ev.drain(self._batch, limit, stop)

    def finished(self):
        """Whether every fit has finished (without waiting); on an executor, True (``finish``
        sends them: there is nothing to wait for before it)."""
        return self._executor is not None or self._batch.finished()

    def cancel(self):
        """No more fits start (the running ones end first); for fits begun but never finished."""
        self._batch.reset()

    def finish(self, lent=0, meanwhile=None, outcomes=False):
        """Run fits on the calling thread (and on workers - 1 - ``lent`` worker threads) until
        every one is done; fit_many's results, in input order. ``meanwhile()``: called once this
        thread has no fit left to claim, while the other threads end their last ones.
        ``outcomes``: each FitResult's ``fit_outcome`` in its place (all a search keeps of a
        fit: read without making the FitResults)."""
        if self._executor is not None:
            if meanwhile is not None:
                meanwhile()
            results = _run(self._job, self._items, None, self._executor, None, False,
                           "fit_many", self._deadline)
            return [fit_outcome(r) if outcomes and isinstance(r, FitResult) else r
                    for r in results]
        with _PAUSE:
            helpers = min(self._workers - 1 - lent, len(self._staged))
            if helpers > 0:
                sched = Scheduler.threads(self._workers)
                handles = sched.lend(self.drain, helpers)
            else:  # (this thread alone, or with threads lent already: no pool's worker
                self.drain()  # is asked, as ``lend`` with no helpers would run it here)
                sched = handles = None
            if meanwhile is not None:
                meanwhile()
            self._batch.close()  # (waits for the fits other threads are still running)
            if handles:
                sched.raise_failures(handles)  # a helper's own failure (never a candidate's)
            out = _read(self._items, self._staged, self._batch, self._results, outcomes)
            if self._spare is not None and len(self._spare) < _SPARE_BATCHES:
                # (read: its results hold their own arrays, not the batch's buffers. A thread
                # lent to it that has not left its drain yet: reset when taken again, not now,
                # where reset() would wait for that thread)
                batch, self._batch = self._batch, _SPENT
                if batch.quiet():
                    batch.reset()
                self._spare.append(batch)
            return out


# A FitSetup keeps at most this many reset FitBatches for its next Begun (a search's setup has
# one batch out at a time, two while the next round's is begun before the last one finished)
_SPARE_BATCHES = 2
# (a finished Begun's batch once its own went back to its setup: never opened, so a late
# drain() runs nothing and cancel() resets nothing another Begun staged)
_SPENT = FitBatch()


def _spare_batch(spare):
    """A FitBatch for a Begun: one of ``spare`` (a FitSetup's, read and closed), reset (once
    more, or for the first time: see Begun.finish), or a new one."""
    if spare:
        try:
            batch = spare.pop()
        except IndexError:  # (another thread's Begun took the last one meanwhile)
            pass
        else:
            batch.reset()
            return batch
    return FitBatch()


def fit_outcome(result):
    """(params, after) of a FitResult: its ``params`` as a new dict, and its evaluation after
    the fit as (status, its numbers as one flat tuple of floats) (``ndvm._core.after_numbers``;
    (None, None) without one): what ``Begun.finish(outcomes=True)`` gives in its place."""
    return dict(result.params), after_numbers(result.after)


class FitSetup:
    """``begin_fits``' shared arguments (all but the programs and per_candidate) checked once for
    many calls: ``begin(programs, per_candidate)`` begins one batch as ``begin_fits`` would. The
    batches share one plan, so the data and target are converted, and each set of free names is
    checked and bound, once for all of them instead of once a batch (the co-search begins a batch
    a round with the same arguments). Picklable (the plan is built again where it is used)."""

    def __init__(self, data=None, target=None, *, workers=None, executor=None, options=None,
                 after=None, **fit_options):
        self.workers = check_workers(workers)
        self.executor = executor
        self.job = _fit_setup(data, target, dict(fit_options, options=options), after)
        self._spare = []  # (the batches of its finished Begun, for the next: _spare_batch)

    def __getstate__(self):  # (its spare batches stay behind: native buffers)
        return {k: v for k, v in vars(self).items() if k != "_spare"}

    def __setstate__(self, state):
        vars(self).update(state)
        self._spare = []

    def begin(self, programs, per_candidate=None, deadline=None, evaluated=(), starts=None):
        """``programs``' fits begun (a ``Begun``). ``deadline`` (a ``time.perf_counter()``
        time; on an executor): the fits it has not run by then are given up, each a
        CandidateError of NotRun (local threads run every fit). ``evaluated``: programs without
        parameters evaluated with the batch as its fitted ones are after their fits
        (``FitPlan.stage_evaluation``: the setup's ``after`` is needed), their results after
        the programs' in the same order. ``starts``: in place of per_candidate, each program's
        init as (its parameters' names, [P, S] finite float64 starting values, a row a name):
        the fits of per_candidate's {"init": dict(zip(names, values))} (``FitPlan.stage``)."""
        items = _fit_items(programs, per_candidate, starts)
        if evaluated:
            add_items(items, evaluated, _EVALUATED)
        return Begun(self.job, items, self.workers, self.executor, deadline, self._spare)


def begin_fits(programs, data=None, target=None, *, workers=None, executor=None,
               per_candidate=None, options=None, after=None, **fit_options):
    """``fit_many``'s candidates, checked and ready but not yet run: for a caller with threads of
    its own to lend (the co-search lends its proposer thread once it has proposed the next
    batch). Any thread may ``drain()`` the returned ``Begun``; ``finish(lent)`` on the calling
    thread runs candidates too and returns the results. ``workers``: the threads in all (the
    caller's, the ``lent`` ones and workers - 1 - lent of the pool's; default: the cores);
    ``executor``, ``after``: fit_many's, the candidates run there when finished. Many calls
    with the same arguments: ``FitSetup``."""
    return FitSetup(data, target, workers=workers, executor=executor, options=options,
                    after=after, **fit_options).begin(programs, per_candidate)


def evaluate_many(programs, params=None, data=None, consts=None, grad=False, *, workers=None,
                  executor=None, chunk_size=None, progress=False, client="dmci",
                  dtype="float64", compat=None, evaluator=None):
    """Evaluate each program (an ndvm.Program or source text); results in input order.

    Each result is an ndvm.Result or a CandidateError. params: one mapping shared by every
    candidate (names a program does not use are ignored) or a sequence of one mapping per
    candidate; data, consts, grad: as for ``Evaluator.evaluate``; workers, executor, chunk_size,
    progress: as for ``fit_many``.
    """
    programs = _program_list(programs, "evaluate_many", "Evaluator.evaluate")
    per = _per_candidate(params, len(programs), "params")
    config = _evaluator_config(evaluator, client, dtype, compat)
    job = _Job("evaluate", config, {"params": None if per is not None else params, "data": data,
                                    "consts": consts, "grad": bool(grad)})
    extras = per if per is not None else [None] * len(programs)
    items = [(i, p, e) for i, (p, e) in enumerate(zip(programs, extras))]
    return _run(job, items, workers, executor, chunk_size, progress, "evaluate_many")
