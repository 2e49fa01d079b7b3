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
