"""Resume stays whole: a real search process killed (SIGKILL) at three points, then resumed.

The resumed run's records hold each candidate once, and its records and front equal those of an
uninterrupted run of the same seed and candidate budget (records, parameters and errors, not the
times). One kill also leaves the last record cut in half, as a kill during the write does.
"""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import ndvm
from ndvm.cosearch import loop, rounds
from ndvm.cosearch.records import RECORD_FILE, _load

from conftest import as_recorded

SEED, BUDGET = 3, 480
FIELDS = ("id", "proposer", "proposed", "model", "status", "params", "train_error",
          "heldout_error", "r2", "size", "error")

# the child runs the search a user would, slowed by 10 ms a round so that it can be killed
# part-way (the delay changes no result: rounds are proposed in the same order)
CHILD = textwrap.dedent("""
    import sys, time
    import ndvm
    from ndvm.cosearch import rounds
    slow = rounds._Rounds.next
    def next_round(self):
        time.sleep(0.01)
        return slow(self)
    rounds._Rounds.next = next_round
    ndvm.search("damped", seed=%d, max_candidates=%d, budget=None, out=sys.argv[1],
                workers=2, refits=1)
""" % (SEED, BUDGET))
# the same for an island search, its epochs run on the search's own thread (workers=1), where
# the delay reaches them
ISLANDS = {"islands": 2, "migration_every": 64, "refits": 1}
CHILD_ISLANDS = CHILD.replace("workers=2, refits=1)",
                              "workers=1, islands=2, migration_every=64, refits=1)")


def _lines(path):
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0


def _kill_after(out, n_lines, tmp_path, child=CHILD):
    """Start the search (``child``) in a process and SIGKILL it once ``n_lines`` records are
    written."""
    script = tmp_path / "child.py"
    script.write_text(child)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, str(script), str(out)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    path = out / loop.RECORD_FILE
    deadline = time.monotonic() + 120
    try:
        while _lines(path) < n_lines:
            if p.poll() is not None:
                pytest.fail(f"the search ended before it was killed: {p.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the search wrote too slowly to be killed in time")
            time.sleep(0.002)
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    assert p.returncode == -signal.SIGKILL
    return _lines(path)


@pytest.fixture(scope="module")
def whole():
    """The uninterrupted run (one worker: the same candidates as two)."""
    return ndvm.search("damped", seed=SEED, max_candidates=BUDGET, budget=None, workers=1,
                       refits=1)


@pytest.mark.parametrize("kill_at,tear", [(1, False), (160, True), (360, False)])
def test_a_killed_search_resumes_to_the_uninterrupted_run(kill_at, tear, whole, tmp_path):
    out = tmp_path / "run"
    written = _kill_after(out, kill_at, tmp_path)
    assert 0 < written < len(whole.records)
    path = out / loop.RECORD_FILE
    if tear:  # the kill came while a record was being written: its line is cut short
        text = path.read_text()
        path.write_text(text[:-25])
    res = ndvm.search("damped", seed=SEED, max_candidates=BUDGET, budget=None, out=out,
                      resume=True, refits=1)
    records = _resumed_as(res, out, whole)
    proposed = [r["proposed"] for r in records
                if r["status"] != "duplicate" and r["proposer"] != "refit"]
    assert len(proposed) == len(set(proposed))
    assert [[r[k] for k in FIELDS] for r in res.records] == [[r[k] for k in FIELDS]
                                                             for r in whole.records]


def _resumed_as(res, out, whole):
    """Assert that the resumed run ``res`` (its folder ``out``) is the uninterrupted ``whole``:
    each candidate once in the record file, every outcome, the front and the chosen model;
    the file's records."""
    records = [json.loads(x) for x in (out / loop.RECORD_FILE).read_text().splitlines()]
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == len(whole.records)  # each candidate once
    assert _outcomes(records) == _outcomes(whole.records)
    assert _outcomes(res.records) == _outcomes(whole.records)
    assert [r["id"] for r in res.front] == [r["id"] for r in whole.front]
    assert res.best["model"] == whole.best["model"]
    assert res.best["params"] == whole.best["params"]
    summary = json.loads((out / loop.SUMMARY_FILE).read_text())
    assert summary["candidates"] == len(whole.records)
    return records


def test_resume_refuses_another_seed(tmp_path):
    out = tmp_path / "run"
    ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out, workers=1)
    lines = (out / RECORD_FILE).read_text()
    # (the summary's settings, before any work: the first 50 proposals are the grammar's small
    # models, the same for every seed, and a resume of 10 candidates of another seed was taken
    # for the run, its summary rewritten with the other seed)
    for n in (10, 96):
        with pytest.raises(rounds.ResumeMismatch, match=r"was searched with seed=1, and this "
                                                        r"session has seed=2"):
            ndvm.search("damped", seed=2, max_candidates=n, budget=None, out=out, resume=True,
                        workers=1)
    assert (out / RECORD_FILE).read_text() == lines
    assert json.loads((out / loop.SUMMARY_FILE).read_text())["settings"]["seed"] == 1
    # a run killed before its summary: its replay finds the first candidate that differs
    (out / loop.SUMMARY_FILE).unlink()
    with pytest.raises(rounds.ResumeMismatch, match=r"candidate 50 was .* in the earlier session"):
        ndvm.search("damped", seed=2, max_candidates=96, budget=None, out=out, resume=True,
                    workers=1)


def test_resume_refuses_records_that_score_otherwise(tmp_path):
    out = tmp_path / "run"
    ndvm.search("damped", seed=1, max_candidates=32, budget=None, out=out, workers=1)
    path = out / loop.RECORD_FILE
    records = [json.loads(x) for x in path.read_text().splitlines()]
    ok = next(r for r in records if r["status"] == "ok")
    ok["heldout_error"] *= 2.0  # a record edited by hand, or another data set
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(rounds.ResumeMismatch, match=f"candidate {ok['id']} .*heldout_error"):
        ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out, resume=True,
                    workers=1)


@pytest.mark.parametrize("refits", [0, 1])
def test_a_finished_run_extends_to_a_larger_budget(refits, tmp_path):
    """A run of n candidates is the first n of a longer run: resuming with a larger budget
    gives exactly the longer run (rounds cut by the budget are proposed whole all the same).
    With refits, a round's refit records were numbered when the round after it had been
    proposed, and a run's last round cut short numbered them before proposals the longer run
    makes: resuming it raised ResumeMismatch. They are numbered after their round's proposals
    now, and a round cut short has none."""
    out = tmp_path / "run"
    ndvm.search("damped", seed=2, max_candidates=40, budget=None, out=out, workers=1,
                refits=refits)
    res = ndvm.search("damped", seed=2, max_candidates=72, budget=None, out=out, resume=True,
                      workers=1, refits=refits)
    longer = ndvm.search("damped", seed=2, max_candidates=72, budget=None, workers=1,
                         refits=refits)
    assert [[r[k] for k in FIELDS] for r in res.records] == [[r[k] for k in FIELDS]
                                                             for r in longer.records]
    assert (sum(r["proposer"] == "refit" for r in longer.records) > 0) == (refits > 0)
    ids = [r["id"] for r in longer.records]
    assert ids == list(range(len(ids)))


def test_a_record_file_is_read_a_line_at_a_time_and_its_cut_last_line_repaired(tmp_path):
    from ndvm.cosearch.records import _iter_records

    def _read_records(path, repair=False):
        return list(_iter_records(path, repair))

    path = tmp_path / "candidates.jsonl"
    good = ['{"id": 0, "status": "ok"}', '{"id": 1, "model": "(* a x) é"}']
    path.write_bytes(b"")
    assert _read_records(path) == []
    path.write_text("\n".join(good) + "\n\n", encoding="utf-8")  # (a blank line is skipped)
    assert [r["id"] for r in _read_records(path, repair=True)] == [0, 1]
    assert path.read_text(encoding="utf-8") == "\n".join(good) + "\n\n"
    # the kill came while the last record was written: without repair it is an error, with
    # repair it is cut off the file and the run goes on after the last whole record
    torn = "\n".join(good) + '\n{"id": 2, "sta'
    path.write_text(torn, encoding="utf-8")
    with pytest.raises(ValueError, match=r"candidates.jsonl:3: not a JSON record"):
        _read_records(path)
    assert path.read_text(encoding="utf-8") == torn
    assert [r["id"] for r in _read_records(path, repair=True)] == [0, 1]
    assert path.read_text(encoding="utf-8") == "\n".join(good) + "\n"
    # a whole last record whose newline was never written gets it
    path.write_text("\n".join(good), encoding="utf-8")
    assert [r["id"] for r in _read_records(path, repair=True)] == [0, 1]
    assert path.read_text(encoding="utf-8") == "\n".join(good) + "\n"
    path.write_text("\n".join(good) + "\n   ", encoding="utf-8")  # (trailing blanks: nothing)
    assert [r["id"] for r in _read_records(path, repair=True)] == [0, 1]
    # a broken line before the last is never repaired: it says where it is
    path.write_text(good[0] + "\nnot json\n" + good[1] + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"candidates.jsonl:2: not a JSON record"):
        _read_records(path, repair=True)


def test_a_resumed_run_that_stops_sooner_keeps_the_earlier_sessions_records(tmp_path):
    out = tmp_path / "run"
    whole = ndvm.search("damped", seed=3, max_candidates=96, budget=None, out=out)
    lines = (out / RECORD_FILE).read_text()
    shorter = ndvm.search("damped", seed=3, max_candidates=48, budget=None, out=out, resume=True)
    assert (out / RECORD_FILE).read_text() == lines  # (nothing new to write)
    assert sorted(r["id"] for r in shorter.records) == [r["id"] for r in whole.records]
    assert as_recorded(shorter.front) == ndvm.cosearch.pareto_front(whole.records)


def test_a_resume_of_a_folder_without_a_run_says_so(tmp_path):
    # (a mistyped --out with --resume silently began a new run)
    res = ndvm.search("damped", max_candidates=16, out=tmp_path / "none", resume=True)
    assert any("holds no run to continue" in w for w in res.warnings)
    again = ndvm.search("damped", max_candidates=32, out=tmp_path / "none", resume=True)
    assert not any("holds no run" in w for w in again.warnings)


# -- island searches ----------------------------------------------------------------------------


def _outcomes(records):
    return {r["id"]: [r[k] for k in FIELDS] for r in map(_load, records)}


@pytest.fixture(scope="module")
def whole_islands():
    """The uninterrupted island search."""
    return ndvm.search("damped", seed=SEED, max_candidates=BUDGET, budget=None, workers=1,
                       **ISLANDS)


@pytest.mark.parametrize("kill_at,tear", [(1, False), (300, True)])
def test_a_killed_island_search_resumes_to_the_uninterrupted_run(kill_at, tear, whole_islands,
                                                                 tmp_path):
    """An island search could not be resumed: a run killed after an hour was run anew. Its
    islands now replay their records from the start (each epoch sent those it may meet), on
    any number of workers, and go on as the uninterrupted run, each candidate once."""
    out = tmp_path / "run"
    written = _kill_after(out, kill_at, tmp_path, CHILD_ISLANDS)
    assert 0 < written < len(whole_islands.records)
    path = out / loop.RECORD_FILE
    if tear:
        path.write_text(path.read_text()[:-25])
    res = ndvm.search("damped", seed=SEED, max_candidates=BUDGET, budget=None, out=out,
                      resume=True, workers=2, **ISLANDS)
    records = _resumed_as(res, out, whole_islands)
    assert all(r["island"] == r["id"] % 2 for r in records)


def test_an_island_search_stopped_by_its_budget_extends_to_the_longer_run(tmp_path):
    """A time budget ends each island at a round inside an epoch; a resumed run with a
    candidate budget replays those rounds and gives exactly the run of that budget, here on
    another number of workers."""
    out = tmp_path / "run"
    first = ndvm.search("damped", seed=5, max_candidates=100_000, budget=0.3, out=out,
                        workers=2, **ISLANDS)
    assert first.stopped == "budget"
    n = len(first.records) + 150
    res = ndvm.search("damped", seed=5, max_candidates=n, budget=None, out=out, resume=True,
                      workers=1, **ISLANDS)
    longer = ndvm.search("damped", seed=5, max_candidates=n, budget=None, workers=2, **ISLANDS)
    assert _outcomes(res.records) == _outcomes(longer.records)
    lines = (out / loop.RECORD_FILE).read_text().splitlines()
    assert _outcomes(json.loads(x) for x in lines) == _outcomes(longer.records)
    times = [json.loads(x)["time"] for x in lines]  # (the new ones after the earlier session's)
    assert times[len(first.records):] and min(times[len(first.records):]) >= max(
        r["time"] for r in first.records)


def test_resume_refuses_another_number_of_islands_or_their_settings(tmp_path):
    islands, single = tmp_path / "islands", tmp_path / "single"
    ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=islands, workers=1,
                islands=2, migration_every=16)
    ndvm.search("damped", seed=1, max_candidates=32, budget=None, out=single, workers=1)
    for out, n, said, give in ((islands, 1, "an island search of 2 islands",
                                "--islands 2 \\(islands=2\\)"),
                               (islands, 3, "an island search of 2 islands", "--islands 2"),
                               (single, 2, "a search of one population", "no --islands")):
        with pytest.raises(rounds.ResumeMismatch, match=f"cannot resume: the run in .* is "
                                                        f"{said}, not .*give {give}"):
            ndvm.search("damped", seed=1, max_candidates=96, budget=None, out=out,
                        resume=True, workers=1, islands=n, migration_every=16)
    for kw, (key, was, now) in (({"migration_every": 8}, ("migration_every", 16, 8)),
                                ({"migration_every": 16, "migrants": 2}, ("migrants", 4, 2)),
                                ({"migration_every": 16, "batch": 8}, ("batch", 16, 8))):
        with pytest.raises(rounds.ResumeMismatch, match=f"was searched with {key}={was}, and "
                                                        f"this session has {key}={now}"):
            ndvm.search("damped", seed=1, max_candidates=96, budget=None, out=islands,
                        resume=True, workers=1, islands=2, **kw)
    (islands / loop.SUMMARY_FILE).unlink()  # (killed before its summary: its records tell)
    with pytest.raises(rounds.ResumeMismatch, match="is an island search of 2 islands, not an "
                                                    "island search of 3 islands .give --islands 2"):
        ndvm.search("damped", seed=1, max_candidates=96, budget=None, out=islands,
                    resume=True, workers=1, islands=3, migration_every=16)
    with pytest.raises(rounds.ResumeMismatch, match="the same islands, migration_every and "
                                                    "migrants"):  # (found replaying)
        ndvm.search("damped", seed=1, max_candidates=96, budget=None, out=islands,
                    resume=True, workers=1, islands=2, migration_every=8)


def test_a_run_folder_takes_one_search_at_a_time(tmp_path):
    """Two searches writing one folder at once (a second terminal's --resume) recorded 3,136
    candidates twice; the folder's record file is locked while a search runs, and released
    when it ends, even killed outright (the system drops the lock with the process)."""
    import threading

    out = tmp_path / "run"
    ndvm.search("damped", seed=1, max_candidates=32, budget=None, out=out, workers=1)
    started, release = threading.Event(), threading.Event()
    slow = rounds._Rounds.next

    def next_round(self):  # (the first search holds the folder until told to go on)
        started.set()
        release.wait(60)
        return slow(self)

    rounds._Rounds.next = next_round
    try:
        first = threading.Thread(target=ndvm.search, args=("damped",), kwargs={
            "seed": 1, "max_candidates": 64, "budget": None, "out": out, "workers": 1,
            "resume": True})
        first.start()
        assert started.wait(60)
        rounds._Rounds.next = slow
        for kw in ({"resume": True}, {"force": True}):
            with pytest.raises(loop.RunExistsError, match="is in use: another search is "
                                                          "writing its candidates.jsonl"):
                ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out,
                            workers=1, **kw)
    finally:
        rounds._Rounds.next = slow
        release.set()
        first.join(60)
    lines = (out / RECORD_FILE).read_text().splitlines()
    assert sorted(json.loads(x)["id"] for x in lines) == list(range(64))
    # (a process killed outright holds no lock: the killed run resumes)
    written = _kill_after(tmp_path / "killed", 1, tmp_path)
    assert written > 0
    res = ndvm.search("damped", seed=SEED, max_candidates=BUDGET, budget=None,
                      out=tmp_path / "killed", resume=True, refits=1)
    assert res.stopped == "candidates"


def test_resume_refuses_a_record_file_that_lost_or_doubled_its_records(tmp_path):
    out = tmp_path / "run"
    ndvm.search("damped", seed=1, max_candidates=32, budget=None, out=out, workers=1)
    path = out / RECORD_FILE
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:10] + [lines[7]] + lines[10:]))  # (a line copied)
    with pytest.raises(ValueError, match="holds the record of candidate 7 twice"):
        ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out, resume=True)
    summary = (out / loop.SUMMARY_FILE).read_text()
    path.write_text("")  # (its records removed, the summary kept)
    with pytest.raises(ValueError, match="candidates.jsonl is empty, and its summary.json is "
                                         "of 32 candidates"):
        ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out, resume=True)
    path.unlink()
    with pytest.raises(loop.RunExistsError, match="holds a summary.json but no candidates.jsonl"):
        ndvm.search("damped", seed=1, max_candidates=64, budget=None, out=out, resume=True)
    assert (out / loop.SUMMARY_FILE).read_text() == summary  # (nothing replaced)
    assert not path.exists()


def test_resuming_another_data_set_names_the_data_not_a_task(tmp_path):
    # (a --csv run resumed with another file was told "give --task law", which --task refuses)
    import numpy as np

    x = np.linspace(1.0, 2.0, 30)
    out = tmp_path / "run"
    ndvm.search(ndvm.Task.from_arrays("law", {"x": x}, 2 * x), max_candidates=16, out=out)
    with pytest.raises(ValueError, match="is a search of task 'law', not 'other' .give the data "
                                         "it searched: a --csv file named law.csv, or a Task "
                                         "named 'law'"):
        ndvm.search(ndvm.Task.from_arrays("other", {"x": x}, 3 * x), max_candidates=32, out=out,
                    resume=True)


def test_a_file_system_without_locks_runs_unlocked(tmp_path, monkeypatch):
    # (flock on an NFS mount without its lock service raises ENOLCK: a search there must run,
    # as it did before run folders were locked)
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    res = ndvm.search("damped", seed=1, max_candidates=16, budget=None, out=tmp_path / "run")
    assert len((tmp_path / "run" / RECORD_FILE).read_text().splitlines()) == len(res.records)


@pytest.mark.parametrize("islands", [1, 2])
def test_a_resume_whose_budget_ends_in_the_replay_says_it_made_nothing(tmp_path, islands):
    # (a 3 s resume of a 30,944-candidate run added no candidate, and said nothing)
    out = tmp_path / "run"
    ndvm.search("damped", max_candidates=6000, budget=None, out=out, workers=1, islands=islands)
    r = ndvm.search("damped", budget=0.01, out=out, resume=True, workers=1, islands=islands)
    assert len(r.records) == 6000 and r.stopped == "budget"
    assert any("this session made no new candidate: its time budget (0.01 s) ended while it "
               "replayed the earlier sessions' 6000 candidates" in w for w in r.warnings)
