"""Islands: populations searched apart that pass their best members on at fixed candidate counts.

An island is a whole search of its own (proposer, simplifier, calibration, scoring, population,
one thread). It runs in epochs of ``every`` candidates, each a pure function of its state and the
migrants it receives: ``run_epoch(island, n, migrants) -> (island after the epoch, its records)``.
Epoch e of island i starts from island i after epoch e-1 and receives the ``migrants`` best
members of island i-1 after epoch e-1 (a ring), so a seed and a number of islands give the same
records whatever runs the epochs and in whatever order they finish. Epochs run in worker
processes (``workers`` of them; the Python work of proposing and scoring is spread with the
calibrations, nothing is shared under one GIL) or as tasks on any ``concurrent.futures.Executor``
(a Dask cluster's ``client.get_executor()``). Record ids are island + k * islands, unique by
construction. A worker that dies loses only the epochs it was running: they are submitted again
from the states they started from (a Dask cluster resubmits them itself), and an epoch's records
are written once, when its result arrives.
"""
import gc
import multiprocessing
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from ndvm.cosearch.proposers import make_proposer
from ndvm.cosearch.records import _good
from ndvm.cosearch.rounds import SearchState, _fittest, _Rounds, _Scorer
from ndvm.parallel import default_workers, gc_paused

__all__ = ["Island", "run_epoch", "search_islands"]

RETRIES = 3  # an epoch whose worker died is submitted again this many times, then it fails


def island_seed(seed, index):
    """The proposer seed of island ``index`` of a search seeded ``seed`` (independent streams)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


class Island:
    """One population: its proposer, search state, scorer and rounds; picklable between epochs."""

    def __init__(self, task, index, n_islands, seed, grammar, batch, client="dmci",
                 fit_options=None, refits=0, proposer_options=None):
        self.index = index
        prop = make_proposer("mutate", seed=island_seed(seed, index),
                             **{"library_share": (index, n_islands), **(proposer_options or {})})
        prop = task.proposer(prop)
        self.state = SearchState(task=task, grammar=grammar)
        scorer = _Scorer(task, client=client, workers=1, fit_options=fit_options)
        self.rounds = _Rounds(task, prop, self.state, scorer, time.perf_counter(), batch, 0,
                              refits=refits, first_id=index, id_step=n_islands)
        self.stopped = None  # why its proposer stopped for good ("exhausted", ...), or None

    @property
    def n_proposed(self):
        return self.rounds.n_proposed

    def receive(self, migrants):
        """Take other islands' best records into the population (their models not proposed
        here again)."""
        for m in migrants:
            self.state.seen.add(m["model"])
        self.state.population = _fittest(self.state.population + [dict(m) for m in migrants])

    def best(self, k):
        """Copies of the ``k`` fittest members of the population (the migrants it sends)."""
        return [dict(r) for r in self.state.population[:k]]

    def run(self, n, seconds=None):
        """Propose, calibrate and score ``n`` more candidates, one round after the other (no new
        round after ``seconds``, when given: the search's time budget); the records, in
        order."""
        r = self.rounds
        r.max_candidates = r.n_proposed + n
        began = r.t0 = time.perf_counter()  # (the coordinator stamps the records' times)
        out = []
        with gc_paused():
            while seconds is None or time.perf_counter() - began < seconds:
                b = r.next()
                if isinstance(b, str):
                    if b != "candidates":
                        self.stopped = b
                    break
                r.calibrate(b, r.begin(b))
                r.finish(b)
                out.extend(b.records)
                gc.collect(0)
        return out


def run_epoch(island, n, migrants, seconds=None):
    """One epoch of ``island`` (a pure function of its arguments, but for ``seconds``, the time
    left of a search's budget): it receives ``migrants``, runs ``n`` candidates and returns (the
    island after it, its records)."""
    island.receive(migrants)
    records = island.run(n, seconds)
    return island, records


class _Inline(Executor):
    """Runs each epoch when it is submitted, in this process (one worker: nothing to spread)."""

    def submit(self, fn, *args, **kwargs):
        f = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            f.set_exception(e)
        return f


def _lost_worker(exc):
    """Whether ``exc`` says the worker running a task died (the task itself did not fail)."""
    return isinstance(exc, BrokenProcessPool) or type(exc).__name__ in ("KilledWorker",
                                                                        "CommClosedError")


_PROCESSES = {}  # workers -> this process's pool of worker processes, kept for the next search
_PROCESSES_LOCK = threading.Lock()


def _processes(workers, broken=None):
    """The kept pool of ``workers`` worker processes (started on first use: a worker process
    imports ndvm once, not once a search), a new one in place of ``broken``."""
    with _PROCESSES_LOCK:
        pool = _PROCESSES.get(workers)
        if pool is None or pool is broken:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            # spawn: a fork of a process with threads running (ours, BLAS's) may deadlock
            pool = _PROCESSES[workers] = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        return pool


class _Pool:
    """Where epochs run: the caller's executor, worker processes of our own (remade when one
    dies), or this process for a single worker."""

    def __init__(self, workers, executor):
        self.own = executor is None
        if executor is not None:
            self.executor = executor
        else:
            self.executor = _Inline() if workers == 1 else _processes(workers)
        self.workers = workers
        self.on = {}  # future -> the executor it was submitted to

    def submit(self, *args):
        """The future of ``run_epoch(*args)`` (on a new pool when a worker of ours has died and
        no future has said so yet)."""
        try:
            f = self.executor.submit(run_epoch, *args)
        except BrokenProcessPool:
            self.renew(self.executor)
            f = self.executor.submit(run_epoch, *args)
        self.on[f] = self.executor
        return f

    def renew(self, broken):
        """``broken`` lost a worker process: a new pool for the epochs to run again (ours only,
        and only once per broken pool)."""
        if self.own and self.workers > 1 and self.executor is broken:
            self.executor = _processes(self.workers, broken=broken)


def search_islands(task, islands, seed, grammar, batch, every, migrants, max_candidates, budget_s,
                   workers, executor, client, fit_options, refits, proposer_options, sink,
                   on_records, stop_on_success):
    """Run ``islands`` islands to ``max_candidates`` (split evenly) or ``budget_s`` seconds;
    returns (records in id order, why it stopped, warnings). ``sink(records)`` writes each
    epoch's records as they arrive; ``on_records(all so far, the epoch's)`` reports progress."""
    workers = min(islands, default_workers()) if workers is None else int(workers)
    share = None
    if max_candidates is not None:
        share = [max_candidates // islands + (i < max_candidates % islands)
                 for i in range(islands)]
    states = [Island(task, i, islands, seed, grammar, batch, client=client,
                     fit_options=fit_options, refits=refits,
                     proposer_options=proposer_options) for i in range(islands)]
    epochs = [0] * islands  # epochs completed by each island
    sent = {}  # (island, epoch) -> the migrants it sends after that epoch
    finished = [False] * islands
    running = {}  # future -> (island, epoch, its arguments, attempts)
    records, warnings = [], []
    started = time.perf_counter()
    stopped, succeeded = "candidates", False

    def quota(i):
        n = every if share is None else min(every, share[i] - states[i].n_proposed)
        return max(0, n)

    def incoming(i, e):
        """The migrants island i receives before epoch e (None: not known yet)."""
        if e == 0 or migrants == 0:
            return []
        src = (i - 1) % islands
        if src == i:
            return []
        last = epochs[src] - 1 if finished[src] else e - 1  # (a finished island sends its last)
        return sent.get((src, min(e - 1, last)))

    def launch():
        busy = {v[0] for v in running.values()}
        for i in range(islands):  # (first, so that incoming() knows every finished island)
            if not finished[i] and i not in busy and (quota(i) == 0
                                                      or states[i].stopped is not None):
                finished[i] = True
        for i in range(islands):
            if finished[i] or i in busy:
                continue
            n = quota(i)
            given = incoming(i, epochs[i])
            if given is None:
                continue
            left = None if budget_s is None else max(0.0, budget_s - (time.perf_counter()
                                                                      - started))
            args = (states[i], n, given, left)
            running[pool.submit(*args)] = (i, epochs[i], args, 0)

    pool = _Pool(workers, executor)
    try:
        launch()
        while running:
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for f in done:
                ran_on = pool.on.pop(f, None)
                if f not in running:  # (resubmitted when its pool broke)
                    continue
                i, e, args, attempts = running.pop(f)
                try:
                    island, recs = f.result()
                except BaseException as exc:
                    if not _lost_worker(exc) or attempts >= RETRIES:
                        raise
                    warnings.append(f"island {i} epoch {e}: its worker died; run again "
                                    f"({type(exc).__name__})")
                    if isinstance(exc, BrokenProcessPool):
                        pool.renew(ran_on)  # (every epoch on the broken pool runs again)
                        for g in [g for g in running if pool.on.get(g) is ran_on]:
                            j, ej, a, n_try = running.pop(g)
                            running[pool.submit(*a)] = (j, ej, a, n_try)
                    running[pool.submit(*args)] = (i, e, args, attempts + 1)
                    continue
                states[i] = island
                epochs[i] = e + 1
                sent[(i, e)] = island.best(migrants)
                now = round(time.perf_counter() - started, 4)
                for r in recs:
                    r["time"] = now
                    r["island"] = i
                records.extend(recs)
                succeeded = succeeded or (stop_on_success and any(_good(task, r) for r in recs))
                sink(recs)
                on_records(records, recs)
            over = budget_s is not None and time.perf_counter() - started >= budget_s
            if over or succeeded:
                stopped = "budget" if over else "success"
                for i in range(islands):
                    finished[i] = True  # (no new epoch: those running end and are kept)
            launch()
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        for f in running:
            f.cancel()
    if stopped == "candidates" and any(s.stopped for s in states):
        stopped = next(s.stopped for s in states if s.stopped)
    records.sort(key=lambda r: r["id"])
    return records, stopped, warnings + [w for s in states for w in s.state.warnings]


def first_good(task, records):
    """The good record of lowest id (an island search has no single order in time)."""
    return next((r for r in records if _good(task, r)), None)


def check_islands(islands, every, migrants):
    """ValueError for island settings that cannot run."""
    for name, v, low in (("islands", islands, 1), ("migration_every", every, 1),
                         ("migrants", migrants, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {v!r}")
    return int(islands), int(every), int(migrants)
