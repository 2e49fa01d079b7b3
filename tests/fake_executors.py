"""Fake executors for the tests of lost clusters: a module of its own, not conftest, because
worker processes import the test modules again, and on their path ``conftest`` may be another
folder's (bench/conftest.py)."""
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


class LosesItsScheduler(Executor):
    """A Dask cluster's executor as the search sees one (its ``_client`` answers ``nthreads``
    and ``get_events``), running the work on a pool of ``threads``, whose scheduler stops
    answering after ``n`` questions: ``nthreads`` then raises ConnectionResetError, as Dask's
    client does once the connection to a stopped scheduler is reset."""

    def __init__(self, n, threads=1):
        from types import SimpleNamespace

        self.pool, self.n, self.threads = ThreadPoolExecutor(threads), n, threads
        self._client = self
        self.scheduler = SimpleNamespace(address="tcp://10.0.0.9:8786")

    def nthreads(self):
        self.n -= 1
        if self.n < 0:
            raise ConnectionResetError(104, "Connection reset by peer")
        return {"tcp://10.0.0.9:9001": self.threads}

    def get_events(self, topic):
        return []

    def submit(self, fn, *args, **kw):
        return self.pool.submit(fn, *args)

    def shutdown(self, wait=True, **kw):
        self.pool.shutdown(wait=wait)
