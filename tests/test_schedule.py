"""ndvm.schedule: the one scheduler's guarantees, each on its own (see the module's docstring):
the order ``wait`` reports in, a lost worker's work run again (a real process killed with
SIGKILL included), cancellation, lending the calling thread, helpers' failures."""
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from ndvm import schedule
from ndvm.schedule import RETRIES, Scheduler

from fake_executors import FailsAfter


class KilledWorker(Exception):
    """Named as Dask's: a worker died while running the task."""


class Losing(Executor):
    """Runs each submission at once, but its first ``losses`` submissions of each call fail as
    if their worker had died (``error``)."""

    def __init__(self, losses, error=KilledWorker):
        self.losses, self.error, self.calls = losses, error, []

    def submit(self, fn, *args):
        self.calls.append(args)
        f = Future()
        if self.losses > 0:
            self.losses -= 1
            f.set_exception(self.error("the worker died"))
        else:
            try:
                f.set_result(fn(*args))
            except Exception as e:  # noqa: BLE001 - delivered through the future
                f.set_exception(e)
        return f


def test_wait_lists_the_done_handles_in_the_order_given_whatever_order_they_end():
    gates = [threading.Event() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        try:
            sched = Scheduler.on(pool)
            handles = [sched.submit(g.wait, tag=k) for k, g in enumerate(gates)]
            assert sched.wait(handles, timeout=0.01) == []  # (nothing done: the timeout ends it)
            for k in (3, 1):  # the last and the second end first
                gates[k].set()
            while len(sched.wait(handles, timeout=1.0)) < 2:
                pass
            assert [h.tag for h in sched.wait(handles)] == [1, 3]
            for g in gates:
                g.set()
            assert sched.wait(handles, every=True) == handles
            assert [h.result() for h in handles] == [True] * 4
        finally:  # (a failed check must not leave the pool's threads waiting)
            for g in gates:
                g.set()


def test_a_lost_workers_work_runs_again_and_says_so():
    ex = Losing(2)
    sched = Scheduler.on(ex)
    h = sched.submit(pow, 2, 10, tag="x")
    assert h.result() == 1024 and len(ex.calls) == 3
    assert [type(e) for e in h.lost] == [KilledWorker, KilledWorker]
    h = Scheduler.on(Losing(1)).submit(pow, 3, 2)  # (wait settles it too)
    assert Scheduler.on(Losing(0)).wait([h]) == [h] and h.result() == 9 and len(h.lost) == 1
    # a task's own failure is never taken for a lost worker: it is raised, not run again
    ex = Losing(0)
    h = Scheduler.on(ex).submit(int, "not a number")
    with pytest.raises(ValueError):
        h.result()
    assert len(ex.calls) == 1 and h.lost == []
    # a worker lost more than RETRIES times: the loss is raised
    ex = Losing(RETRIES + 1)
    h = Scheduler.on(ex).submit(pow, 2, 2)
    with pytest.raises(KilledWorker):
        h.result()
    assert len(ex.calls) == RETRIES + 1


def test_a_broken_pool_of_ours_is_renewed_once_for_all_its_work():
    broken, fresh = Losing(10, BrokenProcessPool), Losing(0)
    current, renewed = [broken], []

    def renew(old, slot):  # (as schedule._process_pool: a new pool for the broken one only)
        if current[0] is old:
            renewed.append(old)
            current[0] = fresh
        return current[0]

    sched = Scheduler(lambda slot: current[0], 2, renew=renew)
    handles = [sched.submit(pow, 2, k) for k in range(3)]
    assert [h.result() for h in handles] == [1, 2, 4]
    assert len(fresh.calls) == 3 and all(h.on is fresh for h in handles)
    assert renewed == [broken]  # (once, though three handles lost their worker)

    class Broke(Executor):
        def submit(self, fn, *args):
            raise BrokenProcessPool("a worker died while idle")

    # a pool that broke while idle (its submit raises): renewed at the next submit
    current[0] = broken = Broke()
    fresh.calls.clear()
    assert sched.submit(pow, 2, 5).result() == 32 and renewed[-1] is broken
    assert len(fresh.calls) == 1
    # the caller's executor is not ours: nothing is renewed, the error is raised
    with pytest.raises(BrokenProcessPool):
        Scheduler.on(broken).submit(pow, 2, 5)


def _kill_first(marker):
    """SIGKILL this worker process the first time (``marker`` not there yet); then its pid."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


def test_a_worker_process_killed_mid_task_loses_nothing(tmp_path):
    sched = Scheduler.processes(2)
    pool = schedule._process_pool(2, 1)
    h = sched.submit(_kill_first, str(tmp_path / "killed"), where=3)  # (slot 3 % 2)
    pid = h.result()
    assert (tmp_path / "killed").exists() and pid != os.getpid()
    assert len(h.lost) >= 1 and isinstance(h.lost[0], BrokenProcessPool)
    assert schedule._process_pool(2, 1) is not pool and h.on is schedule._process_pool(2, 1)
    assert pid in schedule.process_ids(2) and h.where == 1


def test_work_sent_to_a_slot_runs_in_that_process_every_time():
    sched = Scheduler.processes(2)
    pids = [[sched.submit(os.getpid, where=k).result() for _ in range(3)] for k in range(2)]
    assert len(set(pids[0])) == len(set(pids[1])) == 1 and pids[0][0] != pids[1][0]
    assert sorted({p for ps in pids for p in ps}) == sorted(schedule.process_ids(2))
    turns = {sched.submit(os.getpid).result() for _ in range(4)}  # (without where: in turn)
    assert turns == set(schedule.process_ids(2))
    assert Scheduler.threads(2).slots is None and Scheduler.processes(1).slots is None


def _die_mid_send(marker):
    """The first time: SIGKILL this worker process halfway through sending a result (the
    result pipe's lock held, a message header promising more bytes than follow), as a worker
    killed at the wrong moment leaves it; then its pid."""
    import struct
    import sys
    if not os.path.exists(marker):
        open(marker, "w").close()
        frame = sys._getframe(1)
        while frame is not None and "result_queue" not in frame.f_locals:
            frame = frame.f_back
        queue = frame.f_locals["result_queue"]
        queue._wlock.acquire()
        os.write(queue._writer.fileno(), struct.pack("!i", 1000) + b"partial")
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


def test_a_worker_killed_while_sending_a_result_does_not_hang_its_pool(tmp_path):
    # Regression (a CI run hung in test_islands): concurrent.futures' manager thread waited
    # forever for the rest of a killed worker's half-sent result, and every pending future with
    # it; the scheduler now sees the dead worker, breaks the pool and runs the work again.
    sched = Scheduler.processes(2)
    out = []
    t = threading.Thread(target=lambda: out.append(
        sched.submit(_die_mid_send, str(tmp_path / "killed")).result()), daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive(), "the scheduler hung on a pool whose worker died mid-send"
    assert out and out[0] != os.getpid() and (tmp_path / "killed").exists()


_EXIT_WITH_A_STUCK_POOL = """
import sys, time
sys.path.insert(0, {tests!r})
from test_schedule import _die_mid_send
from ndvm import schedule
pool = schedule._process_pool(1, 0)
future = pool.submit(_die_mid_send, {marker!r})
while not schedule._stalled(pool):
    time.sleep(0.05)
time.sleep(0.5)
print("stuck" if not future.done() else "not stuck", flush=True)
"""


def test_a_process_whose_worker_died_mid_send_still_exits(tmp_path):
    # Regression (a search stopped by SIGTERM, sent to its whole process group, wrote its
    # summary and plots and then never exited): at exit, concurrent.futures joins each pool's
    # manager thread, which waited forever for the rest of the dead worker's result.
    code = _EXIT_WITH_A_STUCK_POOL.format(tests=os.path.dirname(__file__),
                                          marker=str(tmp_path / "killed"))
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("a process whose pool's worker died mid-send never exited")
    assert r.stdout.strip() == "stuck", r.stderr  # (the state the exit must get out of)
    assert r.returncode == 0, r.stderr


def test_cancelled_work_never_starts():
    ran, gate = [], threading.Event()
    with ThreadPoolExecutor(1) as pool:
        try:
            sched = Scheduler.on(pool)
            first = sched.submit(gate.wait)
            later = [sched.submit(ran.append, k) for k in range(3)]
            sched.cancel(later)
        finally:
            gate.set()
        assert sched.wait([first, *later], every=True)
    assert ran == [] and all(h.cancelled() for h in later) and first.result() is True


def test_abandoned_work_in_a_process_of_ours_stops_and_its_slot_is_renewed():
    sched = Scheduler.processes(2)
    old = sched.submit(os.getpid, where=1).result()
    long = sched.submit(time.sleep, 600, where=1)
    queued = sched.submit(os.getpid, where=1)  # (behind it: never starts)
    deadline = time.monotonic() + 60
    while not long.future.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sched.abandon([long, queued]) == {1}
    for h in (long, queued):  # (neither ran to its end: the process went with them)
        f = h.future
        assert f.cancelled() or isinstance(f.exception(timeout=60), BrokenProcessPool)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # (killed, not left to sleep for ten minutes)
        try:
            os.kill(old, 0)
        except ProcessLookupError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the abandoned work's process still runs")
    new = sched.submit(os.getpid, where=1).result()
    assert new != old and new in schedule.process_ids(2)


def test_abandoned_work_on_threads_runs_to_its_end_unread():
    gate, ran = threading.Event(), []
    with ThreadPoolExecutor(1) as pool:
        sched = Scheduler.on(pool)
        h = sched.submit(lambda: (gate.wait(60), ran.append(1)))
        assert sched.abandon([h]) == set()
        gate.set()
    assert ran == [1]


class _ClosesLeavingWorkPending(Executor):
    """A Dask cluster's executor as the scheduler sees one (its ``_client`` answers
    ``nthreads``, ``get_events`` and ``status``) whose futures are never told anything: as
    Dask's executor left one when its client closed while gathering it."""

    def __init__(self):
        from types import SimpleNamespace

        self._client, self.status = self, "running"
        self.scheduler = SimpleNamespace(address="tcp://10.0.0.9:8786")

    def nthreads(self):
        return {"tcp://10.0.0.9:9001": 1}

    def get_events(self, topic):
        return []

    def submit(self, fn, *args, **kwargs):
        return Future()


def test_work_left_pending_by_a_closed_dask_client_is_lost_with_its_cluster():
    # Regression (a CI run: a search whose cluster closed mid-epoch ran on to its time budget,
    # the epoch's future pending for good)
    ex = _ClosesLeavingWorkPending()
    sched = Scheduler.on(ex)
    h = sched.submit(pow, 2, 5)
    assert sched.wait([h], timeout=0.1) == []  # (its client open: the work may come back)
    ex.status = "closed"
    assert sched.wait([h], timeout=30) == [h]
    with pytest.raises(schedule.ExecutorLost, match="10.0.0.9:8786"):
        h.result()


def test_lend_runs_the_work_on_the_calling_thread_and_the_helpers():
    """Shared work claimed in parts: the calling thread takes parts too; with no helper it takes
    them all; a helper's own failure is raised by raise_failures; when the calling thread's
    part raises, helpers not yet started never start."""
    sched = Scheduler.threads(3)
    parts, lock, who = list(range(64)), threading.Lock(), []
    barrier = threading.Barrier(3, timeout=30)

    def work():
        barrier.wait()  # (every lent thread is in: each then takes parts)
        while True:
            with lock:
                if not parts:
                    return
                parts.pop()
                who.append(threading.get_ident())
            time.sleep(0.001)

    handles = sched.lend(work, 2)
    sched.wait(handles, every=True)
    sched.raise_failures(handles)
    assert not parts and len(who) == 64
    assert threading.get_ident() in who and len(set(who)) == 3
    parts[:], who[:] = range(8), []
    barrier = threading.Barrier(1)
    assert sched.lend(work, 0) == [] and who == [threading.get_ident()] * 8

    def failing():
        raise RuntimeError("a helper's own failure")

    handles = [sched.submit(failing)]
    sched.wait(handles, every=True)
    with pytest.raises(RuntimeError, match="own failure"):
        sched.raise_failures(handles)
    ran, gate = [], threading.Event()
    me = threading.get_ident()

    def caller_fails():
        if threading.get_ident() == me:
            raise KeyboardInterrupt
        ran.append(1)

    with ThreadPoolExecutor(1) as pool:
        try:
            one = Scheduler.on(pool)
            one.submit(gate.wait)  # (the only worker is busy: the helpers wait in the queue)
            with pytest.raises(KeyboardInterrupt):
                one.lend(caller_fails, 2)
        finally:
            gate.set()
    assert ran == []


def test_workers_are_checked():
    with pytest.raises(ValueError, match="at least 1"):
        Scheduler.threads(0)
    with pytest.raises(ValueError, match="at least 1"):
        Scheduler.processes(0)
    assert Scheduler.processes(1).submit(pow, 2, 3).result() == 8  # (inline: this thread)


_DIED = []  # (the calls of _dies_once so far: a Dask cluster of threads shares this process)


def _dies_once(x):
    if not _DIED:
        _DIED.append(x)
        raise KilledWorker("the worker died")
    return x + 1


def test_work_run_again_on_a_dask_cluster_really_runs_again():
    # Dask names pure work by its arguments and hands back the existing (failed) outcome of the
    # same name: the scheduler submits impure work, so a rerun is a new run
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        _DIED.clear()
        h = Scheduler.on(client.get_executor()).submit(_dies_once, 41)
        assert h.result(timeout=30) == 42
        assert [type(e).__name__ for e in h.lost] == ["KilledWorker"] and _DIED == [41]


def test_dask_quiet_names_settings_dask_has():
    pytest.importorskip("distributed")
    import dask

    for key, value in schedule.DASK_QUIET.items():
        default = dask.config.get(key)  # (a KeyError for a name Dask does not have)
        assert type(default) is type(value)
    with dask.config.set(schedule.DASK_QUIET):
        assert dask.config.get("distributed.worker.profile.enabled") is False


def test_slots_are_the_processes_there_now():
    assert Scheduler.processes(1).live() == []  # (the calling thread: no slots)
    assert Scheduler.threads(2).live() == []
    assert Scheduler.processes(2).live() == [0, 1]  # (not started: a process of ours is renewed)


def test_capacity_is_how_many_pieces_of_work_run_at_once_now(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    assert Scheduler.processes(1).capacity() == 1  # (each piece on the calling thread)
    assert Scheduler.processes(2).capacity() == 2
    with ThreadPoolExecutor(3) as ex:
        assert Scheduler.on(ex).capacity() == 3
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(schedule, "GROW", 0.0)  # (asked each time)
    # a cluster without a worker when the search begins has no slots: it counts its threads
    # as they join (an island search sends no more epochs than run at once)
    with distributed.LocalCluster(n_workers=0, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        sched = Scheduler.on(client.get_executor())
        assert sched.slots is None and sched.capacity() >= 1
        cluster.scale(2)
        client.wait_for_workers(2, timeout=30)
        assert sched.capacity() == 4


def test_work_the_executor_cancels_or_refuses_raises_executor_lost():
    """Work cancelled by the executor, not by the caller, used to raise a bare CancelledError
    (a Dask cluster whose scheduler stopped: the CLI printed its traceback); it raises
    ExecutorLost, which says what was lost. Work the caller cancelled is its own business."""
    with FailsAfter(1, "cancelled") as ex:
        sched = Scheduler.on(ex)
        ran, lost = sched.submit(abs, -2), sched.submit(abs, -3)
        assert ran.result() == 2
        with pytest.raises(schedule.ExecutorLost, match="the executor cancelled work it held"):
            lost.result()
        mine = sched.submit(abs, -4)
        sched.cancel([mine])
        assert mine.dropped and sched.wait([mine]) == [mine]
    done = ThreadPoolExecutor(1)
    done.shutdown()
    with pytest.raises(schedule.ExecutorLost, match=r"the executor refused new work "
                       r"\(RuntimeError: cannot schedule new futures after shutdown\)"):
        Scheduler.on(done).submit(abs, -1)


def _outcome_lost_by_dask(value):
    """The future Dask's concurrent.futures executor (distributed.cfexecutor) fails when its
    task finished with ``value`` and the cluster then lost the outcome (its status no longer
    "finished": a worker removed as the cluster closes): with the exception of unpacking the
    value as an error triple, made by that wrapper's own code."""
    import asyncio

    cfexecutor = pytest.importorskip("distributed.cfexecutor")

    class Lost:  # (a Dask future whose task finished, then was lost with its worker)
        status = "lost"

        async def _result(self, raiseit=False):
            return value

    f = Future()

    async def cascade():
        await cfexecutor._cascade_future(Lost(), f)

    asyncio.run(cascade())
    return f


class ClosedClientError(Exception):
    """Named as Dask's: the client's scheduler is gone (not a RuntimeError)."""


def test_a_task_whose_outcome_dask_lost_runs_again_and_a_closed_cluster_is_lost():
    """A Dask cluster closed mid-search: a finished task's outcome lost with its worker failed
    its future with a TypeError made by Dask's executor wrapper, and the search raised it (CI,
    test_parallel's closed scheduler, once). Such a task is lost, not failed: it runs again,
    and a cluster that is gone refuses it, its ClosedClientError (no RuntimeError) taken for
    ExecutorLost; a task's own TypeError is still its own."""
    for value, kind in ((object(), TypeError), ("the value", ValueError)):  # (a value's shape)
        lost = _outcome_lost_by_dask(value).exception()
        assert type(lost) is kind and schedule.lost_worker(lost)
    try:
        len(None)
    except TypeError as e:  # (a task's own, raised in its code)
        assert not schedule.lost_worker(e)
    assert not schedule.lost_worker(TypeError("no traceback"))

    class Closing(Executor):  # the lost outcome first; then the client is closed
        def __init__(self):
            self.calls = 0

        def submit(self, fn, *args, **options):
            self.calls += 1
            if self.calls == 1:
                return _outcome_lost_by_dask(object())
            raise ClosedClientError("Client is closed. Can't send update-graph message.")

    ex = Closing()
    h = Scheduler(lambda _: ex, 1, client=object()).submit(pow, 2, 3)
    with pytest.raises(schedule.ExecutorLost, match="refused new work .*ClosedClientError"):
        h.result()
    assert ex.calls == 2 and len(h.lost) == 1
    ex = Losing(0, error=ClosedClientError)  # (a task raising its own is not a lost cluster)
    h = Scheduler(lambda _: ex, 1).submit(pow, 2, 3)
    assert h.result() == 8


def test_a_real_closed_dask_client_refuses_work_as_executor_lost():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    try:
        sched = Scheduler.on(client.get_executor())
        cluster.close()
        end = time.monotonic() + 30
        while client.status == "running" and time.monotonic() < end:
            time.sleep(0.01)
        with pytest.raises(schedule.ExecutorLost, match="refused new work"):
            sched.submit(pow, 2, 3)
    finally:
        client.close()
