"""ndvm's one scheduler: where every piece of concurrent work runs, and what happens to it.

fit_many's and evaluate_many's worker threads, their chunks on an executor (Dask), the
co-search's proposer thread and the threads it lends to a round's calibrations, and the islands'
epochs in worker processes or on a cluster all go through a ``Scheduler``:

    sched = Scheduler.threads(workers)     # the persistent pool of ndvm worker threads
    sched = Scheduler.processes(workers)   # kept spawned worker processes (1: this thread),
                                           #    each a slot of its own (submit's ``where``)
    sched = Scheduler.on(executor)         # any concurrent.futures.Executor (Dask's included)

    h = sched.submit(fn, *args, tag=...)   # -> a Handle; fn(*args) runs on a worker
    sched.submit(fn, *args, where=k)       #    on worker process k (of sched.slots): what a
                                           #    piece of work leaves in it is there next time
    sched.wait(handles, timeout)           # -> the handles whose outcome is known, in the order
                                           #    given (at least one unless the timeout passed)
    sched.wait(handles, every=True)        # -> once every one is done
    h.result(), h.done(), h.tag, h.lost    # its value or its own exception; lost: the workers
                                           #    it lost on the way (the work was run again)
    sched.cluster_reruns()                 # -> [(tag, worker)]: work a Dask cluster ran again
                                           #    on its own after its worker died
    sched.ahead                            # how many pieces of work a busy slot may be sent
                                           #    beyond the one it runs (1 on a Dask cluster)
    sched.cancel(handles)                  # those not started never start
    sched.abandon(handles)                 # and those running in a process of ours stop (the
                                           #    process killed, renewed when next used)
    sched.lend(work, helpers)              # work() on the calling thread and on ``helpers``
                                           #    workers at once (shared work, claimed in parts)
    sched.raise_failures(handles)          # a finished helper's own failure raised

Guarantees (each tested in tests/test_schedule.py): handles complete in any order, and ``wait``
lists those done in the order the caller gave them, so a caller that reads results in
submission order (or by tag) gets the same answer however the workers finish; a worker that
dies (a killed process: BrokenProcessPool; a Dask worker: KilledWorker or CommClosedError)
costs only a rerun: its work is submitted again, up to RETRIES times, on a renewed pool when the
pool is ours, and its handle reports the loss in ``lost`` instead of failing; a cancelled
handle's work never starts; ``lend`` never leaves the calling thread idle while there is shared
work to claim. Work that must be shared by threads inside one native call (a FitBatch's claims,
ndvm/_core/fit/batch.hpp) is claimed there, natively, without the GIL; its waits block until
notified (no polling).
"""
import atexit
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor
from concurrent.futures import wait as _wait_futures
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor

__all__ = ["DASK_QUIET", "RETRIES", "ExecutorLost", "Handle", "Scheduler", "WorkerDied",
           "check_executor", "check_main_importable", "default_workers", "died_each_time",
           "executor_workers", "lost_worker", "shutdown"]

RETRIES = 3  # a piece of work whose worker died is submitted again this many times, then fails
WATCH = 0.5  # seconds between looks at a pool of worker processes for a dead worker (_stalled)
GROW = 1.0  # seconds between asks of a Dask cluster for the workers it has now (Scheduler.live)

# Dask's own monitoring turned down, for a cluster that runs a search on a few cores
# (``dask.config.set(DASK_QUIET)`` before the cluster starts: a LocalCluster's worker processes
# inherit it). By default its event loops tick every 20 ms in every process, the nannies read
# their workers' memory every 100 ms, a system monitor samples every 500 ms and each worker's
# profiler samples the running task every 10 ms, taking the GIL from it: on a 2-core machine
# 0.11 of a core with no work at all, 0.010 so (bench/parallel_scaling.py, dask_islands).
DASK_QUIET = {"distributed.admin.tick.interval": "1s",
              "distributed.worker.memory.monitor-interval": "1s",
              "distributed.admin.system-monitor.interval": "2s",
              "distributed.worker.profile.enabled": False}


def default_workers():
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def check_workers(workers, unit="threads"):
    """The worker count a call asked for (None: every core), checked (1.5 was taken for 1);
    ``unit``: what a worker is, for the message."""
    if workers is None:
        return default_workers()
    if type(workers) is int and workers >= 1:  # (the common case, asked once a round)
        return workers
    from ndvm.fit_options import whole_number

    if not whole_number(workers) or workers < 1:
        raise ValueError(f"workers must be a whole number of {unit}, at least 1 (or None: "
                         f"every core), got {workers!r}")
    return int(workers)


def check_executor(executor):
    """``executor``, or TypeError when it cannot take work (a Dask scheduler's address, say,
    where its cluster's executor belongs)."""
    if not callable(getattr(executor, "submit", None)):
        hint = (" (for a Dask cluster at that address: "
                "distributed.Client(address).get_executor())"
                if isinstance(executor, str) and "://" in executor else "")
        raise TypeError(f"executor must be a concurrent.futures.Executor{hint}, got "
                        f"{type(executor).__name__} {executor!r}")
    return executor


def check_main_importable():
    """RuntimeError when worker processes cannot start here: a spawned process first imports
    this program's main module again, from its file, and a program read from standard input
    (``python - < script``) has none; and a script that starts them as it is imported (no ``if
    __name__ == "__main__":`` in it) would start them again in each of them, which Python
    refuses there: each would print its traceback and die, and the search would find its
    workers dead. (A notebook's or ``python -c``'s main module is not imported again: it has
    no file.)"""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if (path is not None and getattr(main, "__spec__", None) is None
            and not os.path.exists(path)):
        raise RuntimeError(
            f"worker processes cannot start: each imports this program's main module again, "
            f"and it was read from {path!r}, not from a file; run the program from a file, or "
            f"ask for one worker (workers=1: every island on this process)")
    if path is not None and not _guards_main(path):
        raise RuntimeError(
            f"worker processes cannot start: each imports this program's main module again "
            f"(Python's spawn start method), and {path!r} starts the search as it is imported "
            f"(not from under its `if __name__ == \"__main__\":`), so each would start it "
            f"again; put the code that runs the search under "
            f"`if __name__ == \"__main__\":`, or ask for one worker (workers=1: every island "
            f"on this process)")


_GUARDED = {}  # (main module's file, its modification time) -> its guards' line spans


def _guards_main(path):
    """Whether the search was started, in the main module ``path``, from under its ``if
    __name__ == "__main__":`` (the line its top-level code is running is in such a block's
    body); True when that cannot be known (no top-level frame of the main module on the stack:
    a call from a thread, say; a file that cannot be read or parsed). A guard elsewhere in the
    file does not count: a search above it starts again in every worker."""
    main = sys.modules.get("__main__")
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals is getattr(main, "__dict__", None)):
        frame = frame.f_back
    if frame is None:
        return True
    spans = _guard_spans(path)
    return spans is None or any(a <= frame.f_lineno <= b for a, b in spans)


def _guard_spans(path):
    """The line spans of the bodies of ``if __name__ == "__main__":`` blocks in the Python file
    ``path`` (cached by its modification time), or None when it cannot be read or parsed."""
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    if key not in _GUARDED:
        import ast

        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read(), path)
        except (OSError, SyntaxError, ValueError):
            _GUARDED[key] = None
        else:
            def main_test(t):
                return (isinstance(t, ast.Compare)
                        and any(isinstance(x, ast.Name) and x.id == "__name__"
                                for x in (t.left, *t.comparators))
                        and any(isinstance(x, ast.Constant) and x.value == "__main__"
                                for x in (t.left, *t.comparators)))

            # (a compound test counts: if __name__ == "__main__" and not dry_run:)
            _GUARDED[key] = [(n.body[0].lineno, n.body[-1].end_lineno) for n in ast.walk(tree)
                             if isinstance(n, ast.If)
                             and any(main_test(t) for t in ast.walk(n.test))]
    return _GUARDED[key]


def _client_of(executor):
    """The Dask client behind ``executor`` when it is a cluster's (``Client.get_executor()``,
    whose submit takes ``Client.submit``'s keywords), else None."""
    client = getattr(executor, "_client", None)
    return client if client is not None and hasattr(client, "nthreads") else None


def _threads_of(nthreads):
    """One place for each thread of each Dask worker (address -> threads), in address order."""
    return [a for a, n in sorted(nthreads.items()) for _ in range(max(0, n))]


def executor_workers(executor, nthreads=None):
    """How many tasks ``executor`` runs at once (its cores when it does not say); TypeError when
    it is no executor (``check_executor``: every executor a call is given passes here first).
    ``nthreads``: a Dask cluster's ``cluster_threads``, when the caller asked it already."""
    check_executor(executor)
    n = getattr(executor, "_max_workers", None)  # concurrent.futures' own pools
    client = _client_of(executor)
    if n is None and client is not None:
        n = sum((cluster_threads(client) if nthreads is None else nthreads).values())
    return int(n) if n else default_workers()


def cluster_threads(client):
    """A Dask cluster's {worker address: threads}, or ExecutorLost when its scheduler cannot
    be asked (it stopped, or the connection to it was lost: the socket's error is no file's)."""
    try:
        return client.nthreads()
    except Exception as e:  # noqa: BLE001 - a closed comm, a reset connection, a timeout
        raise ExecutorLost(lost_cluster(_address_of(client), f"could not be asked for its "
                                        f"workers ({_why(e)})")) from None


def _address_of(client):
    """The address of a Dask client's scheduler (None for another client)."""
    return getattr(getattr(client, "scheduler", None), "address", None)


def _why(exc):
    """An exception as the messages here quote it: its kind and first line."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}{': ' + text if text else ''}"


def lost_cluster(address, what):
    """ExecutorLost's message for the Dask cluster whose scheduler is at ``address``: it did
    ``what``."""
    return (f"lost the Dask cluster at {address}: it {what} (its scheduler stopped, or the "
            f"connection to it was lost)")


class ExecutorLost(RuntimeError):
    """The executor stopped running the caller's work: it cancelled work the caller had not
    cancelled (a Dask cluster whose scheduler stopped, or whose connection was lost), or it
    refuses new work (shut down)."""


class WorkerDied(RuntimeError):
    """Work whose worker died on every try (RETRIES + 1): likelier the work's own doing (a
    candidate that exhausts a worker's memory, say) than bad luck."""


def died_each_time(h, exc):
    """The WorkerDied of handle ``h``, whose work's worker died on every try (``h.lost``, then
    ``exc``)."""
    return WorkerDied(f"its worker died on each of {len(h.lost) + 1} tries ({_why(exc)})")


def lost_worker(exc):
    """Whether ``exc`` says the worker running a task died (the task itself did not fail)."""
    return (isinstance(exc, BrokenProcessPool)
            or type(exc).__name__ in ("KilledWorker", "CommClosedError") or _lost_outcome(exc))


def _lost_outcome(exc):
    """Whether ``exc`` is the failure Dask's concurrent.futures executor gives a task whose
    outcome the cluster lost after the task had finished (a worker removed as the cluster
    closes): its wrapper then reads the task's value as an error triple and fails the future
    with the TypeError or ValueError of unpacking it, raised in its own ``_cascade_future`` (a
    task's own error comes with the task's traceback: raised in the task's code). The task did
    not fail: it is lost, as a dead worker's is (run again; on a cluster that is gone the new
    submission says so)."""
    tb = exc.__traceback__ if type(exc) in (TypeError, ValueError) else None
    if tb is None:
        return False
    while tb.tb_next is not None:  # (the innermost frame: where it was raised)
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_name == "_cascade_future" and "distributed" in code.co_filename


class Handle:
    """One piece of submitted work: ``result()`` (its value, or its own exception raised),
    ``done()``, ``tag`` (the caller's), ``lost`` (the exceptions of workers that died running
    it; it ran again each time). Read by the thread that submitted it (``done`` and ``result``
    are where a lost worker's work is submitted again)."""

    __slots__ = ("args", "dropped", "fn", "future", "lost", "on", "sched", "tag", "where")

    def __init__(self, sched, fn, args, tag, where=None):
        self.sched, self.fn, self.args, self.tag, self.where = sched, fn, args, tag, where
        self.lost = []
        self.future = self.on = None
        self.dropped = False  # (cancelled by the caller: Scheduler.cancel)

    def _settled(self):
        """Whether the current future's outcome is final (a lost worker's is not: the work is
        submitted again here)."""
        f = self.future
        if not f.done():
            if self.sched._renew is not None and _stalled(self.on):
                _unstick(self.on)  # (the pool then fails this future: handled below, next call)
            elif self.sched._closed():  # (its client cancelled the work; the future was not
                f.cancel()  # told: Dask's executor can miss it, and it waited for good)
        if not f.done() or f.cancelled():
            return f.done()
        exc = f.exception()
        if exc is None or not lost_worker(exc) or len(self.lost) >= RETRIES:
            return True
        self.lost.append(exc)
        self.sched._resubmit(self, exc)
        return False

    def done(self):
        return self._settled()

    def cancelled(self):
        return self.future.cancelled()

    def result(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if end is None else max(0.0, end - time.monotonic())
            _wait_futures([self.future], timeout=self.sched._watch(left))
            if self._settled():
                if self.future.cancelled() and not self.dropped:
                    raise ExecutorLost(self.sched.lost_message("cancelled work it held"))
                return self.future.result(timeout=0)


class Scheduler:
    """Where work runs (see the module's docstring): ``workers`` at once, on the executor
    ``current(slot)`` gives; ``renew(broken, slot)`` gives a new one in place of a broken pool
    of ours (None: not ours to renew). ``places``: the process of each slot that ``submit``'s
    ``where`` sends work to (its number; on Dask its worker's address: slots of one process
    share what work leaves there), or None (the executor places the work); ``slots``: how
    many (or None). On a Dask cluster the slots grow as workers join (``live``)."""

    def __init__(self, current, workers, renew=None, options=None, client=None, places=None):
        self.current, self.workers, self._renew = current, workers, renew
        self.places, self.slots = places, None if places is None else len(places)
        self._turn = 0  # (the slot of the next work submitted without ``where``)
        self._options = options or {}  # (keywords every submit passes to the executor)
        self._client = client  # (a Dask cluster's client: its event log tells of dead workers)
        self._tags = {}  # (on a cluster: each submitted task's key -> its handle's tag)
        self._asked = time.monotonic()  # (when the cluster was last asked for its workers)
        self._there = set(places or ())  # (the workers it had then)
        # (the cluster's scheduler, as the messages of a lost cluster name it)
        self._address = _address_of(client)
        # (how many pieces of work a caller may queue on a busy slot behind the one it runs: on
        # a Dask cluster 1, so that its worker starts the next as soon as the one it runs
        # ends instead of idling through a round trip to this process and back, ~8.5 ms on a
        # LocalCluster; 0 elsewhere: our processes' round trip is ~1 ms, and work queued there
        # cannot be cancelled once the pool has sent it on)
        self.ahead = 0 if client is None else 1

    def lost_message(self, what):
        """ExecutorLost's message: the executor (a Dask cluster: its scheduler's address) did
        ``what``."""
        if self._client is not None:
            return lost_cluster(self._address, what)
        return f"the executor {what} (was it shut down?)"

    def place(self, where):
        """The process of slot ``where`` (None: the work was not sent to a slot, or there are
        none)."""
        return None if where is None or self.places is None else self.places[where]

    @classmethod
    def threads(cls, workers=None):
        """The persistent pool of worker threads (grown to ``workers`` if smaller)."""
        workers = check_workers(workers)
        return cls(lambda _: _thread_pool(workers), workers)

    @classmethod
    def processes(cls, workers):
        """``workers`` spawned worker processes of ours (kept for the next call, each renewed
        when it dies), each a slot of its own: ``submit(..., where=k)`` runs the work in the
        k-th, so that what the work leaves in its process (an island's Seen) is there for the
        next work sent there; work submitted without ``where`` goes to each in turn. One worker
        runs each piece of work on the calling thread, when submitted (no slots)."""
        workers = check_workers(workers)
        if workers == 1:
            inline = _Inline()
            return cls(lambda _: inline, 1)
        check_main_importable()
        return cls(lambda slot: _process_pool(workers, slot), workers,
                   renew=lambda broken, slot: _process_pool(workers, slot, broken),
                   places=list(range(workers)))

    @classmethod
    def on(cls, executor):
        """The caller's ``concurrent.futures.Executor``. On a Dask cluster's executor each
        piece of work is submitted as impure: Dask then neither hashes its arguments (an
        island's state, its migrants) to name it, nor hands back the outcome of an earlier
        submission with the same arguments when work is run again after its worker died; and
        each of the cluster's worker threads is a slot (``places``: their workers' addresses),
        which ``where`` asks for (a loose restriction: Dask runs the work elsewhere when that
        worker is gone); a worker that joins later adds its threads (``live``). A cluster
        without a worker yet has no slots: Dask places all the work."""
        client = _client_of(executor)
        if client is None:
            return cls(lambda _: executor, executor_workers(executor))
        nthreads = cluster_threads(client)  # (asked once: a round trip to its scheduler)
        return cls(lambda _: executor, executor_workers(executor, nthreads),
                   options={"pure": False}, client=client, places=_threads_of(nthreads) or None)

    def live(self):
        """The slots whose process is there now: on a Dask cluster (asked at most every GROW
        seconds) the slots of the workers it has, a worker that joined since adding its
        threads as new slots; elsewhere every slot (a dead process of ours is renewed); none
        without slots."""
        if self.places is None:
            return []
        nthreads = self._cluster_threads()
        if nthreads is not None:
            have = Counter(self.places)
            self.places += _threads_of({a: n - have[a] for a, n in nthreads.items()})
            self.slots = len(self.places)
        if self._client is None:
            return list(range(self.slots))
        # (none there: every slot, and Dask holds the work until a worker comes)
        return [k for k, a in enumerate(self.places) if a in self._there] or list(
            range(self.slots))

    def capacity(self):
        """How many pieces of work run at once now, at least 1: the live slots; without slots
        ``workers`` (on a Dask cluster, which may have had no worker when the search began, its
        worker threads as last asked: at most every GROW seconds)."""
        if self.places is not None:
            return max(1, len(self.live()))
        nthreads = self._cluster_threads()
        if nthreads:
            self.workers = sum(nthreads.values())
        return max(1, self.workers)

    def workerless(self):
        """Whether this Scheduler's Dask cluster had no worker when last asked (at most every
        GROW seconds); False off a cluster."""
        self._cluster_threads()
        return self._client is not None and not self._there

    def _cluster_threads(self):
        """A Dask cluster's {worker address: threads} now (its workers kept as ``_there``),
        asked at most every GROW seconds; None between asks, off a cluster, or when its
        scheduler is out of reach."""
        if self._client is None or time.monotonic() - self._asked < GROW:
            return None
        self._asked = time.monotonic()
        try:
            nthreads = self._client.nthreads()
        except Exception:  # noqa: BLE001 - (the scheduler out of reach: as it was)
            return None
        self._there = set(nthreads)
        return nthreads

    def submit(self, fn, *args, tag=None, where=None):
        """``fn(*args)`` on a worker (with ``slots``, the slot ``where``; without ``where``,
        our worker processes each in turn, a Dask cluster wherever it places it; without
        slots, ``where`` is ignored): its Handle."""
        if self.slots is None:
            where = None
        elif where is not None:
            where %= self.slots
        elif self._client is None:
            where, self._turn = self._turn % self.slots, self._turn + 1
        h = Handle(self, fn, args, tag, where)
        self._start(h)
        return h

    def _start(self, h):
        ex, options = self.current(h.where), self._options
        if self._client is not None:  # (named by us: the cluster's event log names its keys)
            options = dict(options, key=f"{getattr(h.fn, '__name__', 'work')}-{uuid.uuid4().hex}")
            self._tags[options["key"]] = h.tag
            if h.where is not None:
                options.update(workers=[self.place(h.where)], allow_other_workers=True)
        try:
            h.future = ex.submit(h.fn, *h.args, **options)
        except BrokenProcessPool:  # (a worker died while idle: no future said so yet)
            if self._renew is None:
                raise
            ex = self._renew(ex, h.where)
            h.future = ex.submit(h.fn, *h.args, **options)
        except Exception as e:  # (shut down, or a Dask client that lost its scheduler: a
            # RuntimeError, or the client's own ClosedClientError, which is no RuntimeError)
            if (self._renew is not None or isinstance(e, ExecutorLost)
                    or not (isinstance(e, RuntimeError) or type(e).__name__ == "ClosedClientError")):
                raise
            raise ExecutorLost(self.lost_message(
                f"refused new work ({type(e).__name__}: {e})")) from e
        h.on = ex

    def _watch(self, left):
        """How long to wait before looking again: on a pool of worker processes of ours, or on a
        Dask cluster, at most WATCH seconds (a dead worker may have left its pool unable to say
        so: _stalled; a closed client may have left a future unable to say so: _closed)."""
        if self._renew is None and self._client is None:
            return left
        return WATCH if left is None else min(left, WATCH)

    def _closed(self):
        """Whether this Scheduler's Dask client has closed (its cluster lost: it cancelled every
        future it held). Dask's concurrent.futures executor then cancels each of its futures,
        but a gather under way when the cluster went raised past that, and its future stayed
        pending: a search whose cluster closed mid-epoch ran on to its time budget (seen once
        in CI)."""
        return self._client is not None and getattr(self._client, "status", None) == "closed"

    def _resubmit(self, h, exc):
        if isinstance(exc, BrokenProcessPool) and self._renew is not None:
            self._renew(h.on, h.where)  # (once per broken pool: a renewed one is returned as
            # it is)
        self._start(h)

    def wait(self, handles, timeout=None, every=False):
        """The handles of ``handles`` whose outcome is known, in the order given: once at least
        one is (``every``: all are), or after ``timeout`` seconds (maybe none)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            ready = [h for h in handles if h.done()]
            if (len(ready) == len(handles)) if every else (ready or not handles):
                return ready
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return ready
            _wait_futures([h.future for h in handles if not h.future.done()],
                          timeout=self._watch(left),
                          return_when=ALL_COMPLETED if every else FIRST_COMPLETED)

    def cluster_reruns(self):
        """[(tag, worker address)] of the work submitted here that a Dask worker was running,
        or held the result of, when it died (unexpectedly), from the cluster's event log: Dask
        runs such work again elsewhere on its own, so no handle sees the loss (``lost`` stays
        empty). [] off a cluster, and when the log cannot be read (a report, never a
        failure)."""
        if self._client is None or not self._tags:
            return []
        try:
            events = self._client.get_events("all")
        except Exception:  # noqa: BLE001 - (an older or a remote scheduler without the log)
            return []
        return [(self._tags[k], msg.get("worker")) for _, msg in events
                if isinstance(msg, dict) and msg.get("action") == "remove-worker"
                and not msg.get("expected")
                for k in (*msg.get("processing-tasks", ()), *msg.get("lost-computed-tasks", ()))
                if k in self._tags]

    def cancel(self, handles):
        """The work of ``handles`` not yet started never starts (the running ends first)."""
        for h in handles:
            h.dropped = True
            h.future.cancel()

    def abandon(self, handles):
        """Give up the work of ``handles``: what has not started never starts, and what runs in
        a worker process of ours stops at once, its process killed (its slot's pool is renewed
        when next used); on threads, or on an executor not ours, it runs to its end, unread.
        Returns the slots whose process was killed. (A search stopped by Ctrl-C or SIGTERM
        waited for its islands' running epochs, whose records it would never read, before it
        could exit: as long as an epoch takes, minutes on large data.)"""
        self.cancel(handles)
        killed = set()
        if self._renew is None:
            return killed
        for h in handles:
            if h.future is not None and h.future.running() and h.on is not None:
                _unstick(h.on)
                killed.add(h.where)
        return killed

    def lend(self, work, helpers):
        """``work()`` on the calling thread and on ``helpers`` workers at once: each call takes
        its parts of one piece of shared work until none is left. Returns the helpers' handles
        once this thread's call has returned (theirs may still be ending their last parts: the
        shared work knows when it is finished); when this thread's call raises, the helpers
        not yet started are cancelled."""
        handles = [self.submit(work) for _ in range(max(0, helpers))]
        try:
            work()
        except BaseException:
            self.cancel(handles)
            raise
        return handles

    def raise_failures(self, handles):
        """Raise the first own failure of the ``handles`` that ended (never a cancelled one)."""
        for h in handles:
            if h.future.done() and not h.future.cancelled():
                h.result()


class _Inline(Executor):
    """Runs each piece of work when it is submitted, on the submitting thread."""

    def submit(self, fn, *args, **kwargs):
        f = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - delivered through the future
            f.set_exception(e)
        return f


# The persistent pool of worker threads: created on first use, grown when a call asks for more
# workers, shut down at exit. Calls from several threads share it.
_POOL = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def _thread_pool(workers):
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            old = _POOL
            _POOL_SIZE = max(workers, default_workers())
            _POOL = ThreadPoolExecutor(max_workers=_POOL_SIZE, thread_name_prefix="ndvm-worker")
            if old is not None:
                old.shutdown(wait=False)  # its running tasks finish; its threads then exit
        return _POOL


def shutdown():
    """Stop the persistent worker threads and join them (the pool is recreated when needed)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        pool, _POOL, _POOL_SIZE = _POOL, None, 0
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


atexit.register(shutdown)

_PROCESSES = {}  # (workers, slot) -> this process's pool of that slot's one worker process
_PROCESSES_LOCK = threading.Lock()


def _stalled(pool):
    """Whether a worker process of our ``pool`` has died. Its pool may then never say so: a
    worker killed while it sends a result leaves the result pipe half-written, and
    concurrent.futures' manager thread waits for the rest of that message forever (its other
    workers wait for the pipe's lock, every pending future stays pending)."""
    procs = getattr(pool, "_processes", None) or {}
    return any(p.exitcode is not None for p in list(procs.values()))


def _unstick(pool):
    """Make a pool with a dead worker fail its pending work: its other workers killed and this
    process's end of the result pipe closed, so that the manager's read ends and the pool marks
    itself broken (BrokenProcessPool on every pending future: the work is submitted again).
    The killed workers are reaped here too: the manager thread that would join them can die
    first (Python 3.11's concurrent.futures sets BrokenProcessPool on a future already
    cancelled: InvalidStateError), leaving each a zombie whose pid still answers."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join(5)  # (killed: at once; one another thread reaped first returns too)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if writer is not None:
        try:
            writer.close()
        except OSError:
            pass


def _unstick_at_exit():
    """At the interpreter's exit, before concurrent.futures joins each pool's manager thread: a
    kept pool whose worker died (a SIGTERM to the whole process group, a batch system's or a
    terminal's, reaches the workers too) is unstuck. A worker killed while it sent a result
    leaves its pool's manager thread reading the rest of that message, which never comes, and
    the join waited for it forever: a search stopped by SIGTERM wrote its summary, front and
    plots, then never exited."""
    with _PROCESSES_LOCK:
        pools = list(_PROCESSES.values())
    for pool in pools:
        if _stalled(pool):
            _unstick(pool)


# (the hook concurrent.futures' own exit uses, registered after it: the hooks run last first)
threading._register_atexit(_unstick_at_exit)


def _process_pool(workers, slot, broken=None):
    """The kept pool of slot ``slot`` of ``workers`` worker processes (one process each, started
    on first use: a worker process imports ndvm once, not once a call), a new one in place of
    ``broken``."""
    with _PROCESSES_LOCK:
        pool = _PROCESSES.get((workers, slot))
        if pool is None or pool is broken:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            # spawn: a fork of a process with threads running (ours, BLAS's) may deadlock
            pool = _PROCESSES[(workers, slot)] = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_started)
        return pool


def _worker_started():
    """In a new worker process: Ctrl-C is left to the process that started it (a terminal sends
    it to every process of the group: the search stops and writes what it did, and its workers
    printed a traceback each), and the worker ends as soon as that process is gone. A worker
    otherwise outlives a coordinator that was killed (SIGKILL, the out-of-memory killer, a
    notebook kernel's restart), idle on its task queue, since it holds that queue's writing end
    itself and never reads its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch():
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="ndvm-parent-watch", daemon=True).start()


def process_ids(workers):
    """The process ids of the ``workers`` kept worker processes of ``Scheduler.processes`` (each
    started if it was not)."""
    out = []
    for k in range(workers):
        pool = _process_pool(workers, k)
        if not pool._processes:
            pool.submit(int).result()
        out += list(pool._processes)
    return out
