"""Fake executors for the tests of clusters (lost, or seen as Dask's): a module of its own, not conftest, because
worker processes import the test modules again, and on their path ``conftest`` may be another
folder's (bench/conftest.py)."""
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor


class KilledWorker(Exception):
    """(named as Dask's: a task whose workers all died running it)"""


class FailsAfter(Executor):
    """Runs its first ``n`` tasks on a pool of ``threads``; each later one ``then``: "hangs"
    (never starts: a Dask cluster whose workers all left holds its work until a worker comes,
    maybe never), "cancelled" (the executor cancels it itself: a Dask client that lost its
    scheduler) or "died" (fails as work whose worker died: Dask's KilledWorker)."""

    def __init__(self, n, then, threads=1):
        assert then in ("hangs", "cancelled", "died")
        self.pool, self.n, self.then = ThreadPoolExecutor(threads), n, then

    def submit(self, fn, *args, **kw):
        self.n -= 1
        if self.n >= 0:
            return self.pool.submit(fn, *args)
        f = Future()
        if self.then == "cancelled":
            f.cancel()
            f.set_running_or_notify_cancel()  # (as a pool tells a cancelled future's waiters)
        elif self.then == "died":
            f.set_exception(KilledWorker("worker died"))
        return f

    def shutdown(self, wait=True, **kw):
        self.pool.shutdown(wait=wait)


class FakeCluster(Executor):
    """A Dask cluster's executor as the search sees one: its ``_client`` answers ``nthreads``
    (``workers`` workers of ``threads`` threads each) and ``get_events``. Each worker runs its
    work on a pool of its own, in the order sent (work sent beyond its threads waits in its
    queue, cancellable, as on a Dask worker); work sent without ``workers=`` goes to the first.
    ``slow``: {worker k: seconds} each piece of work waits on that worker before it runs.
    ``futures``: every piece of work's future, in the order sent, and ``names`` its function's
    name; ``most``: the most pieces of work one worker held at once (running or waiting)."""

    def __init__(self, threads=1, workers=1, slow=None):
        from types import SimpleNamespace

        self.threads, self.slow = threads, {f"tcp://10.0.0.9:{9001 + k}": s
                                            for k, s in (slow or {}).items()}
        self.pools = {f"tcp://10.0.0.9:{9001 + k}": ThreadPoolExecutor(threads)
                      for k in range(workers)}
        self._client = self
        self.scheduler = SimpleNamespace(address="tcp://10.0.0.9:8786")
        self.futures, self.names, self.most = [], [], 0
        self._held = {a: [] for a in self.pools}

    def nthreads(self):
        return {a: self.threads for a in self.pools}

    def get_events(self, topic):
        return []

    def submit(self, fn, *args, **kw):
        where = (kw.get("workers") or list(self.pools))[0]
        wait = self.slow.get(where, 0.0)
        f = self.pools[where].submit(lambda: (time.sleep(wait), fn(*args))[1])
        self.futures.append(f)
        self.names.append(getattr(fn, "__name__", ""))
        held = self._held[where] = [g for g in self._held[where] if not g.done()] + [f]
        self.most = max(self.most, len(held))
        return f

    def shutdown(self, wait=True, **kw):
        for pool in self.pools.values():
            pool.shutdown(wait=wait)


class LosesItsScheduler(FakeCluster):
    """A fake cluster (``FakeCluster``) whose scheduler stops answering after ``n`` questions:
    ``nthreads`` then raises ConnectionResetError, as Dask's client does once the connection to
    a stopped scheduler is reset."""

    def __init__(self, n, threads=1):
        super().__init__(threads)
        self.n = n

    def nthreads(self):
        self.n -= 1
        if self.n < 0:
            raise ConnectionResetError(104, "Connection reset by peer")
        return super().nthreads()
