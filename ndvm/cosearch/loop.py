"""The co-search loop (``ndvm.search``): rounds of propose -> validate -> calibrate -> score,
pipelined over threads for one population, or islands for several; then the model selection.

One population runs here, its rounds pipelined over threads (``rounds.py`` holds a round's
steps, ``records.py`` the records and the run folder); ``islands > 1`` runs several populations
in worker processes or on an executor (``islands.py``). A resumed run replays its record file
(``resume.py`` checks the folder and reads it back); ``result.py`` holds what a search returns
and the model selection that concludes it.
"""
import inspect
import math
import sys
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np

import ndvm
from ndvm._core import Stop
from ndvm.cosearch import rounds
from ndvm.cosearch.islands import check_islands, island_workers, search_islands
from ndvm.cosearch.proposers import Proposer, Replay, check_options, make_proposer
from ndvm.cosearch.records import (RECORD_FILE, SUMMARY_FILE, ById, Records, RunExistsError,
                                   _good, _lines, _open_run, _spill_folder, holding,
                                   pareto_front, run_schema, uninterrupted)
from ndvm.cosearch.result import SearchResult, conclude
from ndvm.cosearch.resume import (_earlier_session, _replayed_only, _same_settings,
                                  check_run)
from ndvm.cosearch.rounds import (ResumeMismatch, SearchState, _Batch, _fittest, _Rounds,
                                   lost_executor, show_warning)
from ndvm.cosearch.score import Scorer
from ndvm.cosearch.tasks import get_task
from ndvm.fit_options import whole_number
from ndvm.parallel import collect_young, executor_round, gc_paused
from ndvm.schedule import ExecutorLost, Scheduler, check_workers, default_workers

__all__ = ["search", "SearchResult", "pareto_front", "RunExistsError", "ResumeMismatch",
           "RECORD_FILE", "SUMMARY_FILE", "run_schema"]

BATCH = 16  # candidates per round on local threads (on an executor: ndvm.parallel.executor_round)


class _Progress:
    """A live status line on stderr (rewritten in place on a terminal)."""

    def __init__(self, enabled, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.last = 0.0
        self.shown = None
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def update(self, text, force=False, key=None):
        """Show ``text``; ``key`` identifies its content apart from times and rates."""
        now = time.perf_counter()
        if not self.enabled or (not force and now - self.last < (0.25 if self.tty else 5.0)):
            return
        self.last = now
        self.shown = key
        if self.tty:
            self.stream.write("\r" + text[:150].ljust(100))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, text, key=None):
        """The final line (not repeated when the last one shown said the same)."""
        if key is None or key != self.shown:
            self.update(text, force=True, key=key)
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def parse_budget(budget):
    """Seconds from a number or text like "60", "60s", "2m", "1.5h"; ValueError unless > 0."""
    if budget is None:
        return None
    text = str(budget).strip().lower()
    seconds = None
    if isinstance(budget, (int, float)) and not isinstance(budget, bool):
        seconds = float(budget)
    else:
        for suffix, mult in (("ms", 1e-3), ("min", 60.0), ("s", 1.0), ("m", 60.0), ("h", 3600.0),
                             ("", 1.0)):
            if text.endswith(suffix):
                try:
                    seconds = float(text[:len(text) - len(suffix)]) * mult
                except ValueError:
                    continue
                break
    if seconds is None:
        raise ValueError(f"budget must be a time like 60, 60s, 2m or 1h; got {budget!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"budget must be a positive time like 60s or 2m; got {budget!r}")
    return seconds


def search(task="damped", proposer=None, budget=None, max_candidates=None, out=None,
           resume=False, seed=0, batch=None, workers=None, progress=False, stop_on_success=False,
           candidates=None, grammar=None, client="dmci", fit_options=None, force=False,
           executor=None, refits=0, islands=1, migration_every=256, migrants=4,
           simple_constants=True, **proposer_options):
    """Search program structures for ``task``; returns a SearchResult (see its docstring).

    task: a Task or a built-in name (``ndvm search --list``).
    proposer: "mutate", "replay", "llm" or a Proposer object; default the task's first
        (``task.proposers``: mutate for damped/recurrence, replay for kalman/nile). A named
        proposer the task does not list raises ValueError.
    budget: seconds of this session (a number or "60s", "2m"; must be positive); default the
        task's (``task.budget_seconds``). max_candidates: stop once the run has that many
        proposals, earlier sessions' included (a run of n candidates is the first n of a longer
        run of the same seed).
    out: a directory for candidates.jsonl (appended as it runs) and summary.json. A directory
        that already holds a search raises RunExistsError unless ``resume`` or ``force``
        (replace it). ``resume`` continues the run its candidates.jsonl records, even one
        killed mid-write: the search replays it (the same proposals, their recorded outcomes
        checked and reused instead of calibrated again; ResumeMismatch if they differ, e.g.
        another seed) and goes on exactly as the uninterrupted run would have, each candidate
        recorded once. Give the same task, proposer, seed and batch as the first session.
    seed: the proposer's seed. batch: candidates proposed and calibrated per round; default 16,
        or with an ``executor`` ndvm.parallel.EXECUTOR_BATCH per executor worker thread (so that
        each task it receives carries enough work to hide its scheduling cost; see
        ``ndvm.fit_many``).
    workers: the threads the search runs on (default: every core): the calling thread and the
        proposer thread calibrate too, each once it has nothing else to do; 1 runs everything on
        the calling thread, one step after the other (the same candidates, the same results).
        executor: a concurrent.futures.Executor
        that runs the calibrations instead (e.g. a Dask ``Client(...).get_executor()`` for a
        cluster; see ``ndvm.fit_many``); proposing and scoring stay in this process, and the
        result is the same as on local threads. progress: a live status line on stderr.
    stop_on_success: stop at the first good held-out fit. candidates: JSON-lines files (or one
        file) for the replay proposer, the proposer when none is named (another named is an
        error: it would not read them). grammar: a Grammar for mutate (default: the task's
        inputs and params).
    client: the evaluator client. fit_options: options for ndvm.fit overriding the task's
        (optimizer, steps, starts, lr). refits: per round, that many of the population's
        best members not yet refitted are fitted again by LM from REFIT_STARTS (16) starts (their
        fit and wider draws; least-squares tasks), recorded as proposer "refit" (records of
        their own, beside the proposals that max_candidates counts).
        proposer_options: passed to the proposer (llm: base_url,
        model, key_env, temperature, timeout, max_calls).
    islands: populations searched apart (the mutate proposer, each island seeded from ``seed``
        and its index), each passing its ``migrants`` best members to the next (a ring) every
        ``migration_every`` candidates it proposes; ``max_candidates`` is split evenly among
        them. With islands > 1, ``workers`` counts processes (default: one per core; never more
        than islands, and not given with ``executor``): each runs whole epochs of an island,
        proposing and scoring included, so no Python work is shared under one GIL;
        ``executor`` runs the epochs as its tasks (a Dask cluster's). The records (ids
        island + k x islands, ``island`` named) are the same for a seed and a number of islands
        whatever runs them (with a candidate budget; a time budget stops each island at the
        first round boundary after it, the islands fewest epochs along sent first, and the
        warnings say when some never ran, or when epochs out a minute past it were given up:
        their workers gone); a worker that dies costs only a rerun of its epoch. A resumed island
        search replays each island from its start (give the same islands, migration_every,
        migrants, seed and batch; any workers). With one population on 4 or more threads whose own
        proposing thread was the limit, the warnings say so (islands spread that work).

    Ctrl-C (KeyboardInterrupt) ends the search early: the result (``stopped="interrupted"``)
    and summary.json hold everything done so far; so does losing the executor (a Dask
    cluster's scheduler stopped: ``stopped="executor lost"``, and a warning).
    """
    task = get_task(task) if isinstance(task, str) else task
    if batch is None:  # (an island runs its rounds in one process: the local size)
        batch = BATCH if executor is None or islands != 1 else executor_round(executor)
    elif int(batch) < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    if workers is not None:
        check_workers(workers, "threads" if islands == 1 else
                      "worker processes (one island each at a time)")
    budget_s = parse_budget(budget) if budget is not None else task.budget_seconds
    if max_candidates is not None and (not whole_number(max_candidates) or max_candidates <= 0):
        raise ValueError(f"max_candidates must be a positive count; got {max_candidates!r}")
    if not whole_number(seed) or seed < 0:
        raise ValueError(f"seed is a whole number >= 0, got {seed!r}")
    if not isinstance(simple_constants, (bool, np.bool_)):
        raise TypeError(f"simple_constants is True or False, got {simple_constants!r}")
    if not whole_number(refits) or refits < 0:
        raise ValueError(f"refits is a whole number >= 0 (the members refitted a round), got "
                         f"{refits!r}")
    max_candidates = max_candidates if max_candidates is not None else task.budget_candidates
    applicable = check_run(task, proposer, out, resume, force, islands)
    asked = proposer
    if proposer is None:  # (candidates are the replay proposer's: given, they name it)
        replays = candidates is not None and "replay" in applicable
        proposer = "replay" if replays else applicable[0]
    if candidates is not None and proposer != "replay" and not isinstance(proposer, Proposer):
        raise ValueError(f"candidates are read by the replay proposer, not {proposer!r}: name "
                         f"proposer='replay' (--proposer replay), or give no candidates"
                         if asked else f"candidates are read by the replay proposer, which task "
                         f"{task.name} does not use (its proposers: {', '.join(applicable)})")
    check_options(proposer, proposer_options, also=_SEARCH_KEYWORDS)
    g = (grammar or task.search_grammar()).check()
    islands, migration_every, migrants = check_islands(islands, migration_every, migrants)
    settings = {"seed": int(seed), "batch": int(batch), "refits": int(refits),
                "islands": islands, "migration_every": migration_every if islands > 1 else None,
                "migrants": migrants if islands > 1 else None,
                "fit_options": dict(fit_options or {}), "proposer_options": proposer_options,
                "simple_constants": bool(simple_constants)}
    if resume and out is not None:
        _same_settings(Path(out), settings)
    if islands > 1:
        if proposer != "mutate":
            raise ValueError(f"islands run the mutate proposer, not {proposer!r}" if asked else
                             f"islands run the mutate proposer, and task {task.name} does not "
                             f"use it (its proposers: {', '.join(applicable)})")
        return _search_islands(task, islands, seed, g, batch, migration_every, migrants,
                               max_candidates, budget_s, workers, executor, client,
                               fit_options, refits, proposer_options, out, force, progress,
                               stop_on_success, resume, settings)
    if isinstance(proposer, Proposer):
        prop = proposer
    elif proposer == "replay" and not candidates:
        prop = Replay(sources=task.seeds)
    else:
        prop = make_proposer(proposer, seed=seed, candidates=candidates, **proposer_options)
        prop = task.proposer(prop) if proposer == "mutate" else prop
    state = SearchState(task=task, grammar=g, echo=sys.stderr if progress else None)
    for w in task.size_warnings():
        state.warn(w)
    scorer = Scorer(task, client=client, workers=workers, fit_options=fit_options,
                    executor=executor)
    # a resumed run replays its earlier sessions: the same proposals in the same order, their
    # outcomes read back from the records instead of calibrated again (and checked to score the
    # same), so it goes on exactly as an uninterrupted run of the same seed would
    records = Records(spill=_spill_folder(out))
    # (the record file, locked while the search runs: closed, and so unlocked, at its end)
    sink, existed = _open_run(out, resume, force) if out is not None else (None, False)
    try:
        loaded, t_offset = _earlier_session(out, existed, resume, 1, state.warn)
        recorded = ById(loaded)  # (their lines are in the record file)
        bar = _Progress(progress)
        t0 = time.perf_counter() - t_offset
        session_start = time.perf_counter()
        n_new, stopped = 0, "budget"
        run = _Rounds(task, prop, state, scorer, t0, batch, max_candidates, refits=refits,
                      recorded=recorded)
        if budget_s is not None:  # (a round an executor never runs: a cluster without workers)
            run.deadline = session_start + budget_s + rounds.LATE
        pipe = None
        n_workers = default_workers() if workers is None else int(workers)  # (local threads)
        if getattr(prop, "pipelined", False):
            serial = executor is None and n_workers == 1
            pipe = _Pipeline(run, None if serial else Scheduler.threads(workers))
    except BaseException:
        if sink:
            sink.close()
        raise

    def succeeded():
        """A good fit found, with stop_on_success (a resumed run goes on past an earlier
        session's)."""
        return (stop_on_success and run.first_good is not None
                and run.first_good["id"] not in recorded)

    def keep(b):
        """Keep a scored batch (once): its records, and the lines of those new to the file."""
        nonlocal n_new
        with uninterrupted():  # (memory and file keep the same records, Ctrl-C or not)
            records.extend(b.records)
            b.emitted = True
            new = [r for r in b.records if r["id"] not in recorded]
            n_new += len(new)
            if sink and new:
                sink.write(_lines(new))
                sink.flush()

    def emit(b):
        """Keep a scored batch, then show the progress line."""
        if b is None or b.emitted:
            return
        keep(b)
        collect_young()
        best = _leader(run.front)
        el = time.perf_counter() - session_start
        bar.update(_status(len(records), n_new / el if el > 0 else 0.0, best, len(run.front),
                           el, budget_s, task), key=(len(records), id(best), len(run.front)))

    # Python's cyclic garbage collector is paused for the search (its full collections walked
    # the simplifier's memo and the records, under the GIL, a third of the proposer's time); the
    # search itself makes no reference cycles, and the young generation is collected once it is
    # large (collect_young: a custom proposer's cycles)
    paused = gc_paused(promote=True)
    paused.__enter__()
    held = holding()  # (uninterrupted()'s handlers installed once, not once a batch kept)
    held.__enter__()
    try:
        ready = run.next()  # the first batch is proposed before anything else can run
        if pipe is not None:
            pipe.start(ready)
        while True:
            if isinstance(ready, str):
                stopped = ready
                break
            if budget_s is not None and time.perf_counter() - session_start >= budget_s:
                stopped = "budget"
                break
            if pipe is not None:
                ready = pipe.step(ready, emit)
            else:  # the proposer sees every batch scored before it proposes the next
                run.calibrate(ready, run.begin(ready))
                run.finish(ready)
                emit(ready)
                ready = None if succeeded() else run.next()
            if succeeded():
                stopped = "success"
                break
        if pipe is not None:
            pipe.end(emit)
    except (KeyboardInterrupt, ExecutorLost) as e:
        stopped = "interrupted"  # keep what was done: the records are already written
        if isinstance(e, ExecutorLost):  # (the round being calibrated is not in the records)
            stopped = "executor lost"
            state.warn(lost_executor(e, resumable=out is not None))
        for b in pipe.interrupt() if pipe is not None else ():
            keep(b)  # (scored by the proposer thread, not yet kept)
        run.front = pareto_front(records)  # the front and best of every record kept
        scored = [r for r in records if r["status"] == "ok" and math.isfinite(r["heldout_error"])]
        state.population = _fittest(scored)
    finally:
        if pipe is not None:
            pipe.settle(check=False)  # (the proposer thread's job has ended)
        paused.__exit__(None, None, None)
        held.__exit__(None, None, None)
        if sink:
            sink.close()
    unreplayed = []  # (an earlier session's records this one stopped before replaying)
    if loaded:
        kept = np.isin(loaded.ids(), records.ids())
        unreplayed = [r for r, k in zip(loaded, kept.tolist()) if not k]
    if unreplayed:
        records.extend(unreplayed)
        run.front = pareto_front(records)
        if run.first_good is None:
            run.first_good = next((r for r in records if _good(task, r)), None)
    if (pipe is not None and pipe.threads is not None and executor is None
            and getattr(prop, "name", None) == "mutate"):
        hint = proposer_bound(run.own_seconds, time.perf_counter() - session_start, n_workers)
        if hint:
            state.warn(hint)
    idle = _replayed_only(len(loaded), n_new, stopped, budget_s)
    if idle:
        state.warn(idle)
    elapsed = time.perf_counter() - t0
    lowest = _leader(run.front)  # (what the progress line shows)
    bar.finish(_status(len(records), n_new / max(elapsed - t_offset, 1e-9), lowest,
                       len(run.front), elapsed - t_offset, budget_s, task),
               key=(len(records), id(lowest), len(run.front)))
    return conclude(task, records, run.front, run.first_good, scorer.ev, elapsed,
                    getattr(prop, "name", "custom"), seed, stopped, state.warnings, out,
                    settings)


# A search of one population on this many worker threads or more whose proposer thread was
# busy at least this share of a run of at least this many seconds is told that islands would
# use the machine better (proposer_bound)
BOUND_WORKERS, BOUND_BUSY, BOUND_SECONDS = 4, 0.9, 5.0


# search()'s own keywords (a misspelt one reaches the proposer's options: its "did you mean")
_SEARCH_KEYWORDS = tuple(p for p in inspect.signature(search).parameters
                         if p != "proposer_options")


def proposer_bound(own_seconds, seconds, workers):
    """The note for a search of one population on ``workers`` threads whose own Python steps
    (scoring, proposing, staging: one thread, under the GIL) took ``own_seconds`` of its
    ``seconds``: when they kept that thread busy most of the run, the calibrations were waiting
    on them, and more workers add nothing; islands spread that work over processes. None when
    not (or the run was too short or on too few workers to tell)."""
    if workers < BOUND_WORKERS or seconds < BOUND_SECONDS:
        return None
    busy = own_seconds / seconds
    if busy < BOUND_BUSY:
        return None
    return (f"the search's own Python (proposing, simplifying and scoring candidates, one "
            f"thread under the GIL) was busy {min(busy, 1.0):.0%} of the run, so its {workers} "
            f"worker threads mostly waited for it: a search of one population gains little "
            f"from more of them on this task; islands (islands=N, ndvm search --islands N, "
            f"N >= the cores) spread that work over processes (README, \"Using many cores\")")


class _Pipeline:
    """A single population's rounds pipelined over two threads (``threads``: the scheduler
    whose worker is the proposer thread; None runs the same steps one after the other on the
    calling thread, workers=1). While batch k calibrates on the calling thread, the proposer
    thread scores batch k-1, proposes batch k+1 from the state through batch k-1 (one batch of
    lag, the same for any worker count, so a seed proposes the same candidates) and begins it;
    then it calibrates batch k too, and then batch k+1 until the next round begins. The calling
    thread keeps (emits) batch k-2 once it has no fit of batch k left to start, then calibrates
    batch k+1's until batch k's last fits have ended."""

    def __init__(self, run, threads):
        self.run, self.threads = run, threads
        self.job = self.wake = None  # the proposer thread's current job and its stop sign
        self.done = self.scored = None  # the last batch calibrated; the last batch scored
        self.fits = None  # the ready batch's calibrations (begun)

    def start(self, ready):
        """Begin the first batch's calibrations."""
        if isinstance(ready, _Batch):
            self.fits = self.run.begin(ready)

    def step(self, ready, emit):
        """Calibrate ``ready`` (emitting the batch scored before it); the next batch, or why
        there is none."""
        run = self.run
        if self.threads is None:
            emit(self.scored)
            run.calibrate(ready, self.fits)
            following, self.fits = run.advance(self.done)
        else:
            if self.wake is not None:
                self.wake.set()  # (the last job lends itself to this batch no more)
            last, staged, self.wake = self.job, Future(), Stop()
            self.job = self.threads.submit(run.advance, self.done, self.fits, staged, self.wake)
            current = self.fits

            def meanwhile(b=self.scored):
                # (batch k-2 is kept, then batch k+1 calibrated, while the last fits of batch k
                # end on the other thread)
                emit(b)
                _help_next(current, staged)

            run.calibrate(ready, current, lent=1, meanwhile=meanwhile)
            following, self.fits = staged.result()
            if last is not None:
                last.result()  # (it ended before this one began: re-raises its own failure)
        self.scored, self.done = self.done, ready
        return following

    def settle(self, check=True):
        """End the proposer thread's job (it stops lending itself to the next batch; with
        ``check``, its failure is raised) and cancel the batch begun but never calibrated."""
        if self.wake is not None:
            self.wake.set()
        try:
            if self.job is not None:
                self.job.result()
        except BaseException:
            if check:
                raise
        finally:
            self.job = None
            if self.fits is not None:
                self.fits.cancel()
                self.fits = None

    def end(self, emit):
        """The search stops: the batches not yet kept are (the last one calibrated scored
        now; the batch proposed after it is dropped)."""
        self.settle()
        emit(self.scored)
        if self.done is not None:
            self.run.finish(self.done)
            emit(self.done)
            self.done = None

    def interrupt(self):
        """Ctrl-C: the batches scored (by the proposer thread's job or before) but not kept."""
        self.settle(check=False)  # (the proposer thread's job ends before anything is read)
        return [b for b in (self.scored, self.done)
                if b is not None and b.finished and not b.emitted]


def _help_next(current, staged):
    """The calling thread, none of the ``current`` batch's calibrations left to start, runs the
    next batch's (once ``staged`` holds it), one at a time, until the current batch's last ones
    have ended on the other thread: it does not wait idle for them (a batch's last fit is
    ~1/16 of a round). The proposer thread does the same the other way round."""
    while not current.finished() and staged.done() and staged.exception() is None:
        fits = staged.result()[1]
        if fits is None or not fits.drain(1):
            return


def _search_islands(task, islands, seed, grammar, batch, every, migrants, max_candidates,
                    budget_s, workers, executor, client, fit_options, refits, proposer_options,
                    out, force, progress, stop_on_success, resume, settings):
    """``search`` with islands > 1 (see there)."""
    if budget_s is None and max_candidates is None:
        raise ValueError("an island search needs a time budget or max_candidates")
    workers = island_workers(islands, workers, executor)  # (checked before the run folder)
    # (the record file, locked while the search runs: closed, and so unlocked, at its end)
    sink, existed = _open_run(out, resume, force) if out is not None else (None, False)
    said = []
    try:
        loaded, t_offset = _earlier_session(out, existed, resume, islands, said.append)
    except BaseException:
        if sink:
            sink.close()
        raise
    bar = _Progress(progress)
    t0 = time.perf_counter()

    def write(block):
        sink.write(block.encoded())  # (its lines' bytes, made in the process that ran the
        sink.flush()  # epoch: neither decoded nor encoded again here)

    # (kept as the epochs' blocks arrive: the records are not unpacked; a resumed run's start
    # from the earlier sessions')
    front = pareto_front([r for r in loaded if r["status"] == "ok"])
    good = [r for r in (next((r for r in loaded if _good(task, r)), None),) if r is not None]
    n_loaded = len(loaded)  # (the search's records go on from these, in the same Records)

    def show(records, block):
        front[:] = pareto_front(front + block.front)  # (the front of their fronts is theirs)
        if block.good is not None and (not good or block.good["id"] < good[0]["id"]):
            good[:] = [block.good]
        el = time.perf_counter() - t0
        new = len(records) - n_loaded
        bar.update(_status(len(records), new / el if el > 0 else 0.0, _leader(front),
                           len(front), el, budget_s, task))

    try:
        records, stopped, warnings = search_islands(
            task, islands, seed, grammar, batch, every, migrants, max_candidates, budget_s,
            workers, executor, client, fit_options, refits, proposer_options,
            write if sink else None, show, stop_on_success, spill=_spill_folder(out),
            recorded=loaded, t_offset=t_offset, resumable=out is not None)
    finally:
        if sink:
            sink.close()
    elapsed = time.perf_counter() - t0
    bar.finish(_status(len(records), (len(records) - n_loaded) / max(elapsed, 1e-9),
                       _leader(front), len(front), elapsed, budget_s, task))
    idle = _replayed_only(n_loaded, len(records) - n_loaded, stopped, budget_s)
    warnings = said + task.size_warnings() + warnings + ([idle] if idle else [])
    if progress:  # (as a search of one population shows its own: SearchState.warn)
        for w in dict.fromkeys(warnings):
            show_warning(sys.stderr, w)
    return conclude(task, records, front, good[0] if good else None,
                    ndvm.Evaluator(client=client), elapsed, f"mutate x {islands} islands", seed,
                    stopped, warnings, out, settings)


def _leader(front):
    """The record of lowest held-out error so far (the front's last), or None: what the
    progress line shows as the best (so it never gets worse as the search goes on)."""
    return front[-1] if front else None


def _status(n, rate, best, front_size, elapsed, budget_s, task):
    if best is None:
        b = "no fit yet"
    elif task.objective == "nll":
        b = f"best NLL {best['heldout_error']:.6g}"
    else:
        b = f"best held-out MSE {best['heldout_error']:.3g} (R2 {best['r2']:.3f})"
    budget = f"/{budget_s:.0f}s" if budget_s is not None else "s"
    return (f"{n} candidates  {rate:.0f}/s  {b}  front {front_size}  {elapsed:.1f}{budget}")
