"""Islands: the same records for a seed and a number of islands whatever runs the epochs, in
whatever order they finish, and a worker killed mid-search (SIGKILL, a real process) costs only a
rerun of its epoch: no candidate lost, none recorded twice."""
import json
import os
import random
import signal
import threading
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from types import SimpleNamespace

import pytest

import ndvm
from ndvm import schedule
from ndvm.cosearch import islands as isl
from ndvm.cosearch import rounds
from ndvm.cosearch.records import RECORD_FILE, SUMMARY_FILE, _dump, _good
from ndvm.cosearch.tasks import get_task

from fake_executors import FailsAfter, FakeCluster

FIELDS = ("id", "island", "proposer", "proposed", "model", "status", "params", "train_error",
          "heldout_error", "r2", "size", "error")
# (a candidate budget; the time budget only guards: damped's own, 60 s, cut the islands short
# on a machine so loaded that a test ran at 1% of a core, and the records then differed)
RUN = dict(islands=3, max_candidates=288, migration_every=48, budget=3600, seed=5)


def _rows(res):
    return [[r.get(k) for k in FIELDS] for r in res.records]


@pytest.fixture(scope="module")
def inline():
    """The islands' epochs one after the other in this process (workers=1)."""
    return ndvm.search("damped", workers=1, **RUN)


class Shuffled(Executor):
    """Runs each task on a thread after a random delay: epochs finish in a scrambled order."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(4)
        self.rng = random.Random(1)

    def submit(self, fn, *args):
        delay = self.rng.uniform(0.0, 0.05)
        return self.pool.submit(lambda: (time.sleep(delay), fn(*args))[1])

    def shutdown(self, wait=True, **kw):
        self.pool.shutdown(wait=wait)


def test_island_records_are_numbered_apart_and_all_kept(inline, tmp_path):
    assert len(inline.records) == RUN["max_candidates"] + sum(
        r["proposer"] == "refit" for r in inline.records)
    ids = [r["id"] for r in inline.records]
    assert len(set(ids)) == len(ids)
    assert all(r["id"] % RUN["islands"] == r["island"] for r in inline.records)
    assert {r["island"] for r in inline.records} == {0, 1, 2}
    assert inline.stopped == "candidates" and inline.best is not None
    from conftest import as_recorded  # (here: worker processes import this module, where
    # another folder's conftest may come first on the path)
    assert as_recorded(inline.front) == ndvm.cosearch.pareto_front(inline.records)


def test_the_same_records_on_processes_and_in_any_finishing_order(inline, tmp_path):
    procs = ndvm.search("damped", workers=2, out=tmp_path / "run", **RUN)
    assert _rows(procs) == _rows(inline)
    assert procs.best["model"] == inline.best["model"]
    written = [json.loads(x) for x in (tmp_path / "run" / RECORD_FILE).read_text().splitlines()]
    assert sorted(r["id"] for r in written) == [r["id"] for r in procs.records]
    # (each line as the record it writes: packed and written where the epoch ran, stamped with
    # its time and island where it arrived)
    assert sorted(written, key=lambda r: r["id"]) == [json.loads(_dump(r)) for r in procs.records]
    assert procs.first_good == next(r for r in procs.records if _good(procs.task, r))
    from conftest import as_recorded  # (as above)
    assert as_recorded(procs.front) == ndvm.cosearch.pareto_front(procs.records)
    summary = json.loads((tmp_path / "run" / SUMMARY_FILE).read_text())
    assert summary["candidates"] == len(written)
    ex = Shuffled()
    try:
        shuffled = ndvm.search("damped", executor=ex, **RUN)
    finally:
        ex.shutdown()
    assert _rows(shuffled) == _rows(inline)


def test_migrants_reach_the_next_island():
    task = get_task("damped")
    g = task.grammar or ndvm.cosearch.Grammar(inputs=tuple(task.inputs),
                                              params=tuple(task.params), loop=task.loops)
    a = isl.Island(task, 0, 2, seed=1, grammar=g, batch=16)
    b = isl.Island(task, 1, 2, seed=1, grammar=g, batch=16)
    a, recs = isl.run_epoch(a, 64, [])
    sent = a.best(4)
    assert len(sent) == 4 and all(r["id"] % 2 == 0 for r in sent)
    assert sent[0]["model"] == a.state.population[0]["model"]
    b, _ = isl.run_epoch(b, 32, sent)
    models = {r["model"] for r in b.state.population}
    assert sent[0]["model"] in models  # the fittest migrant is among b's parents
    assert all(r["model"] in b.state.seen for r in sent)  # and never calibrated again on b
    # without migration the search differs (migration is not a no-op)
    alone = ndvm.search("damped", workers=1, **dict(RUN, migrants=0))
    with_m = ndvm.search("damped", workers=1, **RUN)
    assert _rows(alone) != _rows(with_m)


def test_an_island_travels_without_its_task_and_runs_on_where_it_lands():
    import pickle

    import numpy as np

    from ndvm.cosearch.grammar import Grammar
    from ndvm.cosearch.tasks import Task

    rng = np.random.default_rng(0)
    x = {f"x{i}": rng.uniform(1, 2, 20_000) for i in range(3)}
    task = Task.from_arrays("wide", x, x["x0"] * x["x1"] / x["x2"], heldout=0.25,
                            params=("a", "b", "c", "d", "e"), loops=False, threshold=None,
                            budget_seconds=None,
                            fit={"optimizer": "lm", "starts": 2, "start_scales": (0.3, 3.0)})
    g = Grammar(inputs=tuple(x), params=("a", "b", "c", "d", "e"), loop=False)
    recipe = (0, 2, 1, g, 16, "dmci", None, 0, None)  # (Island's arguments after the task)
    key = "test-travels-light"
    try:
        assert isl._epoch(key, recipe, 32, [], 4, None, True) == isl.NEED_TASK  # (not sent yet)
        first = isl._epoch(key, recipe, 32, [], 4, None, True, None, task)
        assert x["x1"][100:104].tobytes() not in first.packed  # (its data stay behind)
        assert len(first.packed) < len(pickle.dumps(task)) / 4
        second = isl._epoch(key, first.packed, 32, [], 4, None, False)  # (the task is kept here)
    finally:
        isl._forget(key)
    assert isl._epoch(key, first.packed, 32, [], 4, None, True) == isl.NEED_TASK
    # the same records as the island run on without packing (start draws, library and all)
    whole = isl.Island(task, *recipe)
    whole, a = isl.run_epoch(whole, 32, [])
    whole, b = isl.run_epoch(whole, 32, [])
    rows = [[[r.get(k) for k in FIELDS] for r in recs] for recs in (a, b, whole.best(4))]
    assert rows == [[[r.get(k) for k in FIELDS] for r in recs]
                    for recs in (first.records.records(), second.records.records(), second.best)]
    assert second.n_proposed == whole.n_proposed == 64


def test_first_epochs_on_one_thread_share_its_scorer_with_new_draws(monkeypatch):
    """Each island's first epoch made a Scorer of its own (its plans, probes and joint points
    made again, each set of free names staged again) and the next epochs revived a third: they
    take the thread's (``lent_scorer``), its start draws new, with the records of islands that
    each have their own."""
    task = get_task("damped")
    g = task.search_grammar().check()
    recipes = [(i, 2, 1, g, 16, "dmci", None, 0, None) for i in (0, 1)]
    scorers = []
    run_epoch = isl.run_epoch
    monkeypatch.setattr(isl, "run_epoch", lambda island, *a: (
        scorers.append(island.rounds.scorer), run_epoch(island, *a))[1])
    key = "test-lent-scorer"
    try:
        first = [isl._epoch(key, r, 32, [], 4, None, False, None, task) for r in recipes]
        again = isl._epoch(key, first[0].packed, 32, [], 4, None, False)
    finally:
        isl._forget(key)
    assert len(scorers) == 3 and scorers[0] is scorers[1] is scorers[2]
    got = [[[r.get(k) for k in FIELDS] for r in o.records.records()] for o in (*first, again)]
    want = []
    for recipe, epochs in ((recipes[0], 2), (recipes[1], 1)):
        island = isl.Island(task, *recipe)  # (its own Scorer)
        for _ in range(epochs):
            island, recs = run_epoch(island, 32, [])
            want.append([[r.get(k) for k in FIELDS] for r in recs])
    assert got == [want[0], want[2], want[1]]


def test_an_islands_seen_stays_where_its_epoch_ran_and_is_sent_again_when_not_there():
    """On processes of ours (``held``) an island's Seen neither leaves the process that ran its
    epoch nor comes back: the epoch sends only the digests it added, the next epoch finds the
    Seen kept, and one that lands where it is not answers NEED_SEEN and runs on every digest
    sent again, with the same records as the island run on without packing."""
    task = get_task("damped")
    g = task.search_grammar().check()
    recipe = (0, 2, 1, g, 16, "dmci", None, 0, None)
    key = "test-seen-stays"
    try:
        first = isl._epoch(key, recipe, 64, [], 4, None, False, (0, None, 2, None), task)
        kept = isl._SEENS[(key, 0)]
        assert kept[0] == 1 and len(first.seen) == 8 * len(kept[1]) > 0
        assert first.seen[:64] not in first.packed  # (its digests stay here)
        second = isl._epoch(key, first.packed, 64, [], 4, None, False, (1, None, 2, None))
        assert isl._SEENS[(key, 0)][1] is kept[1]  # (the same Seen, grown)
        digests = first.seen + second.seen
        assert ndvm._core._core.Seen.of(digests) is not kept[1]
        stale = isl._epoch(key, first.packed, 64, [], 4, None, False, (1, None, 2, None))
        assert stale == isl.NEED_SEEN  # (the Seen kept is after 2 epochs, not after 1)
        assert (key, 0) not in isl._SEENS  # (and was dropped)
        assert isl._epoch(key, second.packed, 64, [], 4, None, False, (2, None, 2, None)) == \
            isl.NEED_SEEN
        third = isl._epoch(key, second.packed, 64, [], 4, None, False, (2, digests, 2, None))
        assert len(isl._SEENS[(key, 0)][1]) * 8 == len(digests + third.seen)
        # back in a process that kept it after 1 epoch: sent the digests of epochs 2 and 3
        isl._SEENS[(key, 0)] = (1, ndvm._core._core.Seen.of(first.seen))
        assert isl._epoch(key, third.packed, 64, [], 4, None, False,
                          (3, second.seen + third.seen, 2, 2)) == isl.NEED_SEEN  # (not after 2)
        isl._SEENS[(key, 0)] = (1, ndvm._core._core.Seen.of(first.seen))
        fourth = isl._epoch(key, third.packed, 64, [], 4, None, False,
                            (3, second.seen + third.seen, 2, 1))
        assert len(isl._SEENS[(key, 0)][1]) * 8 == len(digests + third.seen + fourth.seen)
    finally:
        isl._forget(key)
    assert not any(k[0] == key for k in isl._SEENS)
    whole = isl.Island(task, *recipe)
    outs = []
    for _ in range(4):
        whole, recs = isl.run_epoch(whole, 64, [])
        outs.append([[r.get(k) for k in FIELDS] for r in recs])
    assert outs == [[[r.get(k) for k in FIELDS] for r in o.records.records()]
                    for o in (first, second, third, fourth)]
    assert len(whole.state.seen) * 8 == len(digests + third.seen + fourth.seen)


def test_an_island_back_in_a_process_it_ran_in_is_sent_only_the_digests_since(inline,
                                                                               monkeypatch):
    """3 islands on 2 processes: an idle process takes an island whose home is busy, so islands
    move. One that comes back to a process where its Seen was kept after an earlier epoch is
    sent only the digests of the epochs since, not all of them, and the records are the same
    as the islands run inline."""
    made = []

    def held(*args):
        made.append(isl_held(*args))
        return made[-1]

    every = []  # (the epochs sent every digest: an island in a process for the first time)

    def submit(self, fn, *args, **kw):
        if fn is isl._epoch and args[7] is not None and args[7][1] is not None \
                and args[7][3] is None:
            every.append(args[7][0])
        return schedule_submit(self, fn, *args, **kw)

    isl_held, schedule_submit = isl._held, schedule.Scheduler.submit
    monkeypatch.setattr(isl, "_held", held)
    monkeypatch.setattr(schedule.Scheduler, "submit", submit)
    run = dict(RUN, max_candidates=1152)  # (8 epochs an island)
    want = _rows(ndvm.search("damped", workers=1, **run))
    for _ in range(3):  # (islands move as the epochs' timing has it: on a loaded machine a
        # search may see none come back; CI once did)
        made.clear()
        every.clear()
        res = ndvm.search("damped", workers=2, **run)
        assert _rows(res) == want
        since = [h for h in made if h[3] is not None]
        assert all(0 < h[3] < h[0] and len(h[1]) > 0 for h in since)
        assert len(every) <= 3  # (each island at most once in the process it did not start in)
        if since:
            break
    assert since


def test_a_search_whose_islands_seens_go_missing_sends_them_again(inline, monkeypatch):
    """Every other epoch finds its island's Seen gone (as when the island moves to another
    process or its home process died): the coordinator sends every digest again, and the
    records are the same."""
    seen_for, calls = isl._seen_for, []

    def forgetful(key, index, held):
        calls.append(held[1] is not None)
        if len(calls) % 2 and held[1] is None:
            return None
        return seen_for(key, index, held)

    monkeypatch.setattr(isl, "_seen_for", forgetful)
    res = ndvm.search("damped", workers=1, **RUN)
    assert _rows(res) == _rows(inline)
    assert any(calls) and not all(calls)  # (some epochs were sent their Seen again)


def test_one_worker_keeps_every_islands_seen_and_forgets_them_after(inline, monkeypatch):
    seen_for, sent_again = isl._seen_for, []

    def recording(key, index, held):
        sent_again.append(held[1] is not None)
        return seen_for(key, index, held)

    monkeypatch.setattr(isl, "_seen_for", recording)
    res = ndvm.search("damped", workers=1, **RUN)
    assert _rows(res) == _rows(inline)
    assert sent_again and not any(sent_again)  # (every epoch found its island's Seen kept)
    assert not isl._SEENS and not isl._TASKS


def _held_here():
    return [k[0] for k in isl._SEENS], list(isl._TASKS)


def test_worker_processes_keep_the_islands_seens_until_the_search_ends(inline):
    res = ndvm.search("damped", workers=2, **RUN)
    assert _rows(res) == _rows(inline)
    sched = schedule.Scheduler.processes(2)
    held = [sched.submit(_held_here, where=k).result() for k in range(2)]
    assert held == [([], []), ([], [])]  # (each process was told to forget the search)


def test_an_epoch_sent_again_gets_the_time_left_then_not_the_budget_it_was_first_sent_with(
        inline):
    # one worker runs each epoch as it is sent: every island's first epoch is sent at once,
    # asks for the task, and is sent again. Each was sent again with the whole budget it was
    # first sent with, so 8 islands ran 0.5 s each (4.1 s for a 0.5 s budget). Now the first
    # epoch uses the budget, and the islands sent after it have no time left: they run no
    # round, and the search says so
    epochs = 4096  # (one epoch could outlast the budget: the budget ends it, at a round's end)
    res = ndvm.search("damped", islands=4, workers=1, budget="0.4s", migration_every=epochs,
                      seed=1)
    assert res.stopped == "budget" and res.records
    assert {r["island"] for r in res.records} == {0}
    note = [w for w in res.warnings if "islands ran before the time budget ended" in w]
    assert len(note) == 1 and note[0].startswith("only 1 of the 4 islands ran")
    assert f"{epochs} candidates" in note[0]
    # (a search that every island ran in, or that a candidate budget ended, says nothing)
    assert not [w for w in inline.warnings if "islands ran before" in w]


def test_under_a_time_budget_every_island_advances_in_turn():
    # the islands fewest epochs along go first: with more islands than worker processes, the
    # first few islands used to run epoch after epoch (the lowest numbers went first) while the
    # last ones never ran (16 islands, 2 workers, 2 s: islands 8 to 15 ran nothing)
    import collections

    # (here 12 islands of 16-candidate epochs on 2 processes: each now ends 1 epoch from the
    # others, where the lowest-numbered first left them 6 to 9 apart)
    res = ndvm.search("damped", islands=12, workers=2, budget="3s", migration_every=16, seed=3)
    assert res.stopped == "budget"
    ran = collections.Counter(r["island"] for r in res.records if r["proposer"] != "refit")
    assert set(ran) == set(range(12)), ran
    assert max(ran.values()) - min(ran.values()) <= 3 * 16, ran
    assert not [w for w in res.warnings if "islands ran before" in w]


def test_island_settings_are_checked():
    with pytest.raises(ValueError, match="islands must be a whole number >= 1"):
        ndvm.search("damped", islands=0, max_candidates=10, budget=None)
    with pytest.raises(ValueError, match="migration_every"):
        ndvm.search("damped", islands=2, migration_every=0, max_candidates=10, budget=None)
    with pytest.raises(ValueError, match="mutate proposer"):
        ndvm.search("damped", islands=2, proposer="replay", max_candidates=10, budget=None)
    with pytest.raises(ValueError, match="task kalman does not use it"):
        ndvm.search("kalman", islands=2, max_candidates=10, budget=None)
    with pytest.raises(ValueError, match="whole number of worker processes"):
        ndvm.search("damped", islands=2, workers=0, max_candidates=10, budget=None)
    with pytest.raises(ValueError, match="whole number of threads"):
        ndvm.search("damped", workers=0, max_candidates=10, budget=None)


def test_workers_and_an_executor_are_one_or_the_other_and_never_more_than_islands(tmp_path):
    with pytest.raises(ValueError, match="give one or the other"):
        ndvm.search("damped", islands=2, workers=2, executor=ThreadPoolExecutor(1),
                    max_candidates=10, budget=None, out=tmp_path / "run")
    assert not (tmp_path / "run").exists()  # (refused before the run folder is made)
    assert isl.island_workers(2, 8, None) == 2  # (a process more than islands would idle)
    assert isl.island_workers(3, 1, None) == 1


@pytest.mark.parametrize("islands", [1, 2])
def test_an_address_given_as_the_executor_is_refused_before_any_work(islands):
    # (a user who passes a Dask scheduler's address where its executor belongs)
    with pytest.raises(TypeError, match=r"executor must be a concurrent.futures.Executor "
                                        r"\(for a Dask cluster.*get_executor\(\)\), got str"):
        ndvm.search("damped", islands=islands, executor="tcp://127.0.0.1:8786",
                    max_candidates=10, budget=None)
    with pytest.raises(TypeError, match="got int 4"):
        ndvm.search("damped", islands=islands, executor=4, max_candidates=10, budget=None)


# a program that asks for 2 worker processes, prints why it cannot have them, and runs on one
_TWO_THEN_ONE = ("import ndvm\n"
                 "try:\n"
                 "    ndvm.search('damped', islands=2, workers=2, max_candidates=32, budget=None)\n"
                 "except RuntimeError as e:\n"
                 "    print('REFUSED', e)\n"
                 "r = ndvm.search('damped', islands=2, workers=1, max_candidates=32, budget=None)\n"
                 "print('RAN', len(r.records))\n")


def _guarded(test):
    """A program that runs an island search on 2 worker processes under ``if <test>:`` (DRY is
    False) and prints how many records it made."""
    return ("import ndvm\n"
            "DRY = False\n"
            f"if {test}:\n"
            "    r = ndvm.search('damped', islands=2, workers=2, max_candidates=32,\n"
            "                    budget=None)\n"
            "    print('RAN', len(r.records))\n")


def _python(tmp_path, script=None, stdin=None):
    """Run a program in a fresh interpreter: the file ``script``, or ``stdin`` as ``python -``
    reads it (no main-module file)."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-" if script is None else str(script)], input=stdin,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)


def test_a_program_read_from_stdin_is_told_why_worker_processes_cannot_start(tmp_path):
    # spawned workers import the main module again from its file: '<stdin>' is none, and the
    # pool used to break with "a process ... was terminated abruptly" after its retries
    out = _python(tmp_path, stdin=_TWO_THEN_ONE)
    assert out.returncode == 0, out.stderr
    assert "REFUSED worker processes cannot start" in out.stdout
    assert "'<stdin>', not from a file" in out.stdout and "workers=1" in out.stdout
    assert "RAN 32" in out.stdout


def test_a_script_without_a_main_guard_is_told_why_worker_processes_cannot_start(tmp_path):
    # each spawned worker imports the script again, which started the search again there: every
    # worker printed a traceback and died, 4 tries an island (~800 lines), and the estimator
    # then said "raise the budget"; the search now refuses before it starts a process
    script = tmp_path / "fit_it.py"
    script.write_text(_TWO_THEN_ONE)
    out = _python(tmp_path, script)
    assert out.returncode == 0, out.stderr
    assert "REFUSED worker processes cannot start" in out.stdout
    assert "starts the search as it is imported" in out.stdout
    assert 'if __name__ == "__main__":' in out.stdout and "RAN 32" in out.stdout
    assert "Traceback" not in out.stderr
    # (a guard elsewhere in the file does not count: the search above it started again in each
    # worker, ~10 tracebacks, and the result said "executor lost")
    script.write_text(_TWO_THEN_ONE + "if __name__ == '__main__':\n    print('done')\n")
    out = _python(tmp_path, script)
    assert out.returncode == 0, out.stderr
    assert "REFUSED worker processes cannot start" in out.stdout and "RAN 32" in out.stdout
    assert "Traceback" not in out.stderr
    # (guarded, it runs on 2 worker processes; the test runner's own main module is guarded)
    script.write_text(_guarded("__name__ == '__main__'"))
    out = _python(tmp_path, script)
    assert out.returncode == 0 and "RAN 32" in out.stdout, out.stderr


def _kill_when_written(out, pids, killed):
    """Once the first epoch's records are written, SIGKILL the first of ``pids()`` (as soon as
    it lists one)."""
    path = out / RECORD_FILE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0 and (listed := pids()):
            pid = listed[0]
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, path.read_text().count("\n")))
            return
        time.sleep(0.001)


def test_a_killed_worker_process_loses_and_duplicates_nothing(inline, tmp_path):
    run = dict(RUN, max_candidates=576, migration_every=96)
    whole = ndvm.search("damped", workers=1, **run)
    schedule.process_ids(2)  # (its processes started)
    killed = []  # (the process killed is the home of islands: their Seens are sent again)

    def busy():  # (a process running an epoch: one killed between two epochs loses nothing,
        # its pool is renewed at the next submit without a word, and a CI run killed one so)
        pools = [schedule._process_pool(2, k) for k in range(2)]
        return [pid for pool in pools if pool._pending_work_items for pid in pool._processes]

    for attempt in range(3):  # (a process killed just after it sent its epoch's outcome,
        # which its pool still lists as pending, loses nothing and no warning is due: the
        # local suite once killed one so. The search is tried again until a kill lost an epoch)
        out, killed[:] = tmp_path / f"run{attempt}", []
        t = threading.Thread(target=_kill_when_written, args=(out, busy, killed))
        t.start()
        res = ndvm.search("damped", workers=2, out=out, **run)
        t.join()
        assert killed and killed[0][1] < len(whole.records)  # killed mid-search
        assert _rows(res) == _rows(whole)
        written = [json.loads(x)["id"] for x in (out / RECORD_FILE).read_text().splitlines()]
        assert sorted(written) == [r["id"] for r in whole.records]  # each candidate once
        if any("worker died" in w for w in res.warnings):
            break
    assert any("worker died" in w for w in res.warnings)


def _alive(pid):
    try:
        os.kill(pid, 0)  # (a zombie answers too: it is reaped by whoever adopted it)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_worker_processes_end_when_their_search_process_is_killed(tmp_path):
    """A search process SIGKILLed mid-search (the out-of-memory killer, a notebook kernel's
    restart) leaves no worker process behind: before, both stayed, idle, for good."""
    import subprocess
    import sys

    script = tmp_path / "search.py"
    script.write_text(
        "import ndvm\n"
        "from ndvm import schedule\n"
        "if __name__ == '__main__':\n"
        "    print(*schedule.process_ids(2), flush=True)\n"
        "    ndvm.search('damped', islands=2, workers=2, budget=300, out='run')\n")
    p = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    try:
        pids = [int(x) for x in p.stdout.readline().split()]
        records = tmp_path / "run" / RECORD_FILE
        deadline = time.monotonic() + 120
        while not (records.exists() and records.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(pids) == 2 and records.stat().st_size  # (killed mid-search, workers busy)
        assert all(_alive(pid) for pid in pids)
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    left = [pid for pid in pids if _alive(pid)]
    for pid in left:  # (not left behind by a failing test either)
        os.kill(pid, signal.SIGKILL)
    assert not left


def _cpu_seconds(pid):
    """The CPU seconds process ``pid`` has used (user and system), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_an_interrupted_island_search_stops_the_epochs_its_workers_run(inline):
    """Ctrl-C (or SIGTERM) during an island search stops the epochs running in its worker
    processes, whose records it would never read: before, they ran on to their end, and a
    search stopped by SIGTERM waited for them before it could exit (97 s with epochs of
    200,000 candidates), and a notebook's next search queued behind them. Their processes are
    killed; the next search renews them and runs as a fresh one does."""
    import _thread

    pids = schedule.process_ids(2)
    idle = [_cpu_seconds(pid) for pid in pids]

    def interrupt_once_both_run():  # (each worker a second into its epoch: past the first
        # round trip, which fetches the task)
        deadline = time.monotonic() + 120
        while (time.monotonic() < deadline
               and not all(_cpu_seconds(p) > t + 1.0 for p, t in zip(pids, idle))):
            time.sleep(0.01)
        _thread.interrupt_main()

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        t = threading.Thread(target=interrupt_once_both_run)
        t.start()
        res = ndvm.search("damped", islands=2, workers=2, migration_every=10**6, budget=3600,
                          seed=0)
        t.join()
    finally:
        signal.signal(signal.SIGINT, before)
    assert res.stopped == "interrupted" and not res.records  # (no epoch ended)
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(_alive(pid) for pid in pids)
    again = ndvm.search("damped", workers=2, **RUN)
    assert _rows(again) == _rows(inline)
    assert not set(schedule.process_ids(2)) & set(pids)


def test_a_killed_dask_worker_loses_and_duplicates_nothing(tmp_path):
    distributed = pytest.importorskip("distributed")
    run = dict(RUN, max_candidates=576, migration_every=96)
    whole = ndvm.search("damped", workers=1, **run)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pid_of = client.run(os.getpid)  # (worker address -> its process)

        def busy():  # (the workers holding a task: an idle one's death would cost nothing)
            return [pid_of[w] for w, keys in client.processing().items() if keys]

        out = tmp_path / "run"
        killed = []
        t = threading.Thread(target=_kill_when_written, args=(out, busy, killed))
        t.start()
        res = ndvm.search("damped", executor=client.get_executor(), out=out, **run)
        t.join()
    assert killed and killed[0][1] < len(whole.records)
    assert any("Dask worker" in w and "died" in w for w in res.warnings)  # (Dask reran it)
    assert _rows(res) == _rows(whole)
    written = [json.loads(x)["id"] for x in (out / RECORD_FILE).read_text().splitlines()]
    assert sorted(written) == [r["id"] for r in whole.records]


def test_a_dask_cluster_that_grows_during_a_search_runs_epochs_on_its_new_workers(inline,
                                                                                   monkeypatch):
    """A cluster still starting its workers when the search begins (an adaptive cluster, a
    batch system's queued jobs): a worker that joins later is a slot too. Before, the slots
    were the workers the search started with, and one worker ran every epoch, one at a time."""
    distributed = pytest.importorskip("distributed")
    add, joined = isl.Records.add, []
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:

        def adding(self, block):  # (once the first epoch is back, a second worker joins)
            if not joined:
                cluster.scale(2)
                client.wait_for_workers(2, timeout=120)
                joined.append(True)
            return add(self, block)

        monkeypatch.setattr(isl.Records, "add", adding)
        monkeypatch.setattr(schedule, "GROW", 0.0)  # (asked at every launch: a short search)
        with distributed.get_task_stream(client) as stream:
            res = ndvm.search("damped", executor=client.get_executor(), **RUN)
    ran = {t["worker"] for t in stream.data if str(t["key"]).startswith("_epoch")}
    assert joined and len(ran) == 2
    assert _rows(res) == _rows(inline)


def test_a_pool_that_broke_before_any_future_said_so_is_renewed(inline):
    """A worker died while no epoch was running (the pool is broken, no future failed): the next
    submit renews the pool instead of failing the search."""
    pool = schedule._process_pool(2, 0)
    pool.submit(time.sleep, 0).result()
    os.kill(next(iter(pool._processes)), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not pool._broken and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool._broken
    res = ndvm.search("damped", workers=2, **RUN)
    assert _rows(res) == _rows(inline)
    assert schedule._process_pool(2, 0) is not pool


def test_an_executor_is_sent_no_more_epochs_than_it_runs_at_once():
    # an executor without slots was sent every island's epoch at once, each with the budget's
    # whole time left, and ran them in turn: 8 islands on a pool of 2 took 4.4 s for a 1 s
    # budget. Now it is sent as many as it runs at once: the first two use the budget
    with ThreadPoolExecutor(2) as ex:
        res = ndvm.search("damped", islands=8, executor=ex, budget="0.5s",
                          migration_every=4096, seed=3)
    assert res.stopped == "budget"
    assert {r["island"] for r in res.records} == {0, 1}
    assert any(w.startswith("only 2 of the 8 islands ran") for w in res.warnings)


def test_on_a_cluster_a_busy_worker_holds_one_more_epoch_and_the_records_are_the_same(inline):
    """On a Dask cluster an island's epoch queues behind the one a busy worker runs: the worker
    starts it as soon as that one ends, without a round trip through the coordinator (~8.5 ms a
    LocalCluster epoch, ~11% of a damped one, idled before). At most one waits at a time, and
    the records are the same."""
    ex = FakeCluster(threads=1)
    try:
        res = ndvm.search("damped", executor=ex, **RUN)
    finally:
        ex.shutdown()
    assert ex.most == 2  # (one slot: the epoch it runs and one behind it; 1 before)
    assert _rows(res) == _rows(inline)


def test_epochs_queue_on_a_busy_worker_only_while_the_budget_has_room_for_them():
    # an epoch queued behind another starts when that one ends, with the time that was left
    # when it was sent: only while that is twice the longest an epoch ran does it start and end
    # within the budget
    assert isl._ahead(1, None, None) == 1  # (no budget: always)
    assert isl._ahead(1, 10.0, None) == 0  # (none back yet: how long one runs is not known)
    assert isl._ahead(1, 10.0, 4.0) == 1
    assert isl._ahead(1, 7.9, 4.0) == 0
    assert isl._ahead(0, None, None) == 0  # (our processes: none)


def test_an_epoch_queued_behind_another_is_taken_as_not_started():
    # (what a search that ends cancels: the epochs sent to a slot behind one still there)
    h = [SimpleNamespace(where=w) for w in (0, 1, 0, None, 1, 2)]
    assert isl._queued(h) == [h[2], h[4]]


def test_a_search_that_ends_cancels_the_epochs_queued_behind_others():
    """A search that stops (here at its first good fit, found on the fast worker) while a slow
    worker runs an epoch with another queued behind it: the queued one is cancelled (it would
    run a whole epoch after the end), the running one ends and is kept; nothing is left to run
    once the search has returned."""
    ex = FakeCluster(workers=2, slow={1: 1.0})
    try:
        res = ndvm.search("damped", islands=6, executor=ex, max_candidates=20000, budget=3600,
                          migration_every=16, seed=3, stop_on_success=True)
        epochs = [f for f, name in zip(ex.futures, ex.names) if name == "_epoch"]
        assert all(f.done() for f in epochs)
    finally:
        ex.shutdown()
    assert res.stopped == "success" and ex.most == 2
    assert sum(f.cancelled() for f in epochs) == 1
    ids = [r["id"] for r in res.records]
    assert len(ids) == len(set(ids))


def test_a_search_whose_workers_are_gone_ends_after_its_budget_and_says_so(monkeypatch):
    # its epochs out when the budget ends would never come back: it used to wait for them for
    # good. It waits LATE seconds past the budget, then ends with what came back
    monkeypatch.setattr(rounds, "LATE", 0.5)
    ex = FailsAfter(6, "hangs", threads=2)  # (2 islands: the first two ask for the task,
    # then 2 epochs each)
    try:
        res = ndvm.search("damped", islands=2, executor=ex, budget="1s", migration_every=64,
                          seed=3)
    finally:
        ex.shutdown()
    assert res.stopped == "budget" and res.records
    late = [w for w in res.warnings if "had not come back 0.5 s after the time budget" in w]
    assert len(late) == 1 and late[0].startswith("2 epoch(s), of island(s) 0, 1,")
    ids = [r["id"] for r in res.records]
    assert len(ids) == len(set(ids))  # (what came back is kept whole, once)


def test_work_whose_worker_dies_on_every_try_is_recorded_failed_and_the_search_goes_on():
    """A round whose worker died on each of its RETRIES + 1 tries used to end the search with
    the worker's exception (a traceback, no summary). One population records those candidates
    failed, says so once, and goes on to its budget; an island search stops that island (the
    others go on), and ends "executor lost" when no island can run."""
    with FailsAfter(3, "died") as ex:
        res = ndvm.search("damped", executor=ex, budget="2s", seed=1)
    assert res.stopped == "budget"
    gone = [r for r in res.records if r["error"] == (
        f"its worker died on each of {schedule.RETRIES + 1} tries (KilledWorker: worker died)")]
    assert gone and all(r["status"] == "failed" for r in gone)
    said = [w for w in res.warnings if "were not calibrated: its worker died" in w]
    assert len(said) == 1
    for n in (6, 9):  # (the islands stop at different epochs)
        with FailsAfter(n, "died") as ex:
            res = ndvm.search("damped", islands=2, executor=ex, budget="30s", seed=1,
                              migration_every=64)
        assert res.stopped == "executor lost" and res.records
        stops = [w for w in res.warnings if "its worker died on each of" in w]
        assert len(stops) == 2 and all("the island stopped there" in w for w in stops)
        ids = [r["id"] for r in res.records]
        assert len(ids) == len(set(ids))


def test_a_compound_main_guard_counts(tmp_path):
    # (if __name__ == "__main__" and ...: the guard's test is a BoolOp, and the check of the
    # line the search starts from found no guard around it)
    script = tmp_path / "compound.py"
    script.write_text(_guarded("__name__ == '__main__' and not DRY"))
    out = _python(tmp_path, script)
    assert out.returncode == 0 and "RAN 32" in out.stdout, out.stderr
