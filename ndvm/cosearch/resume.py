"""A run folder continued (``resume``): what a search refuses before any work (``check_run``:
its proposer, resume with force, another task, another number of islands or other settings than
the earlier sessions'), and the earlier sessions' records read back for the search to replay
(``_earlier_session``)."""
import json
from pathlib import Path

import numpy as np

from ndvm.cosearch.records import (RECORD_FILE, SUMMARY_FILE, Records, _existing,
                                   _iter_records, _jsonable, _load, _spill_folder)
from ndvm.cosearch.rounds import ResumeMismatch
from ndvm.fit_options import whole_number

__all__ = ["check_run"]

_SAMPLE = 1000  # the records whose islands tell how many a run folder's search had


def check_run(task, proposer=None, out=None, resume=False, force=False, islands=1):
    """Raise ValueError (RunExistsError) for what ``search`` would refuse, before any work."""
    applicable = tuple(getattr(task, "proposers", ()) or ("mutate", "replay", "llm"))
    if isinstance(proposer, str) and proposer not in applicable:
        raise ValueError(f"the {proposer} proposer does not apply to task {task.name}; "
                         f"use {' or '.join(applicable)}")
    if resume and force:
        raise ValueError("resume continues the run in the out directory and force replaces it: "
                         "give one of them (--resume or --force)")
    if out is not None:
        _existing(Path(out), resume, force)
        if resume:
            _same_task(Path(out), task)
            _same_islands(Path(out), islands)
    elif resume:
        raise ValueError("resume needs the out directory of the earlier run")
    return applicable


def _same_islands(out, islands, most=_SAMPLE):
    """ResumeMismatch when the run in ``out`` is not a search of as many ``islands``, as its
    summary.json says, else as its first ``most`` records tell (``_earlier_session`` checks
    every record as it reads them)."""
    if not whole_number(islands) or islands < 1:
        return  # (check_islands says why)
    was = _summary_islands(out)
    if was is not None and was != islands:
        raise ResumeMismatch(_other_islands(out, None, islands))
    try:
        with open(out / RECORD_FILE, "rb") as f:
            first = [json.loads(line) for _, line in zip(range(most), f)]
    except (OSError, ValueError):
        first = []  # (a line cut short: the records are checked as they are read)
    if not all(isinstance(r, dict) and whole_number(r.get("id")) for r in first):
        return  # (not records of ours: said as they are read)
    seen = [(r["id"], r.get("island")) for r in first]
    for i, island in seen:
        if _not_of(islands, i, island):
            raise ResumeMismatch(_other_islands(out, island, islands, seen))


def _not_of(islands, rid, island):
    """Whether record ``rid`` of island ``island`` (None: one population's) is not one a
    search of ``islands`` makes (its ids are island + k islands)."""
    return (island is not None) if islands == 1 else island != rid % islands


# settings that choose among a run's records and do not make them (a resume may change them)
_CHOOSING = ("simple_constants",)


def _same_settings(out, settings):
    """ResumeMismatch when the run in ``out`` (its summary.json, when written: a run killed
    outright has none, and its replay finds the first candidate that differs) was searched
    with other ``settings`` (SearchResult.settings): a resumed run must make the same
    candidates. Another seed made the same first fifty (the grammar's small models), so a
    short resume of a run of another seed was taken for it."""
    was = _earlier_summary(out).get("settings")
    if not isinstance(was, dict):  # (no summary, or an older ndvm's)
        return
    now = json.loads(json.dumps(_jsonable(settings)))  # (as summary.json holds them)
    differ = [k for k in now if k in was and was[k] != now[k] and k not in _CHOOSING]
    if differ:
        raise ResumeMismatch(
            f"cannot resume: the run in {out} was searched with "
            f"{', '.join(f'{k}={was[k]!r}' for k in differ)}, and this session has "
            f"{', '.join(f'{k}={now[k]!r}' for k in differ)} (a resumed run makes the same "
            f"candidates as the earlier sessions: give the same settings, or a new --out "
            f"folder)")


def _earlier_summary(out):
    """The summary.json of the run in ``out`` as a dict, or {} (none written: a run killed
    before it; or not a summary of ours): what a resume checks before any work."""
    try:
        s = json.loads((Path(out) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def _same_task(out, task):
    """ValueError when the run in ``out`` (its summary.json, when written) searched another
    task than ``task``: its records would only be found to score otherwise, one by one."""
    was = _earlier_summary(out).get("task")  # (a run killed before its summary has none: its
    if was is not None and was != task.name:  # records are checked as they are replayed)
        from ndvm.cosearch.tasks import TASKS
        give = (f"--task {was}" if was in TASKS else
                f"the data it searched: a --csv file named {was}.csv, or a Task named {was!r}")
        raise ValueError(f"cannot resume: the run in {out} is a search of task {was!r}, not "
                         f"{task.name!r} (give {give}, or a new --out folder)")


def _earlier_session(out, existed, resume, islands, warn):
    """(the records of the run in ``out``, packed, and the time of its last) when ``resume``
    (else none, and 0): what a resumed run replays (``existed``: its record file was there
    before this session opened it). A folder holding no run is warned of (``warn(message)``).
    Raises ResumeMismatch for a run searched with another number of ``islands`` (1: one
    population), whose records would only be found to differ one by one, and ValueError for a
    record file that holds a record twice (each candidate is recorded once: an edited file)
    or none beside a summary of candidates (records removed: nothing to continue)."""
    loaded, t_offset = Records(spill=_spill_folder(out)), 0.0
    if not resume:
        return loaded, t_offset
    if not existed:  # (a mistyped folder: said, not silent)
        warn(f"resume: {out} holds no run to continue (no {RECORD_FILE}); a new run was started "
             f"there")
        return loaded, t_offset
    seen = []  # (id, island) of the first records, to tell how many islands the run had
    for r in _iter_records(Path(out) / RECORD_FILE, repair=True):  # (packed as they are read)
        r = _load(r)
        island = r.get("island")
        if len(seen) < _SAMPLE:
            seen.append((r.get("id"), island))
        if _not_of(islands, r["id"], island):
            raise ResumeMismatch(_other_islands(out, island, islands, seen + [(r["id"], island)]))
        t_offset = max(t_offset, r.get("time") or 0.0)
        loaded.extend((r,))
    ids = np.sort(loaded.ids())
    twice = ids[1:][ids[1:] == ids[:-1]]
    if twice.size:
        raise ValueError(f"cannot resume: {out}/{RECORD_FILE} holds the record of candidate "
                         f"{int(twice[0])} twice ({twice.size} record(s) in all are a second "
                         f"copy): a run records each candidate once (was the file edited, or "
                         f"written by two searches at once?)")
    if not len(loaded):
        had = _earlier_summary(out).get("candidates")
        if isinstance(had, int) and had > 0:
            raise ValueError(f"cannot resume: {out}/{RECORD_FILE} is empty, and its "
                             f"{SUMMARY_FILE} is of {had} candidates (its records removed?): "
                             f"there is nothing to continue; replace it with --force "
                             f"(force=True), or choose a new --out folder")
    return loaded, t_offset


def _as_islands(n):
    return "a search of one population" if n == 1 else f"an island search of {n} islands"


def _summary_islands(out):
    """The number of islands of the run in ``out`` as its summary.json says (its settings, or
    its proposer: "mutate x N islands"; 1 for any other), or None without one."""
    s = _earlier_summary(out)
    settings = s.get("settings")
    n = settings.get("islands") if isinstance(settings, dict) else None
    if isinstance(n, int) and n >= 1:
        return n
    proposer = s.get("proposer")
    if not isinstance(proposer, str):
        return None
    try:
        return int(proposer.split(" x ")[1].split()[0]) if " x " in proposer else 1
    except (IndexError, ValueError):
        return None


def _records_islands(seen):
    """How many islands the search of records ``seen`` ((id, island) pairs) had: (n, exact),
    n the least number of islands whose ids they fit (id % n = island), exact when records of
    every one of its islands are among them; None for one population's, or records that fit
    none up to 1024."""
    isl = [(i, k) for i, k in seen if isinstance(i, int) and isinstance(k, int) and k >= 0]
    if not isl or len(isl) < len(seen):
        return None
    least = max(k for _, k in isl) + 1
    for n in range(max(2, least), 1025):
        if all(i % n == k for i, k in isl):
            return n, len({k for _, k in isl}) == n
    return None


def _other_islands(out, island, islands, seen=()):
    """Why a run in ``out`` of which a record was of island ``island`` (None: one population)
    cannot be resumed with ``islands``: what it was, as its summary.json says or else as its
    records ``seen`` ((id, island) pairs) tell, and what to give."""
    was, exact = _summary_islands(out), True
    if was is None:
        if island is None:
            was = 1
        else:
            known = _records_islands(seen)
            was, exact = known if known is not None else (None, False)
    if was is None or was == islands:  # (a summary of another run than its records?)
        what, give = "an island search of another number of islands", "the --islands it had"
    elif not exact:
        what, give = f"an island search of at least {was} islands", "the --islands it had"
    else:
        what = _as_islands(was)
        give = f"--islands {was} (islands={was})" if was > 1 else "no --islands (islands=1)"
    return (f"cannot resume: the run in {out} is {what}, not {_as_islands(islands)} (give "
            f"{give}, or a new --out folder)")


def _replayed_only(n_loaded, n_new, stopped, budget_s):
    """The warning of a resumed session whose time budget ended before it made a candidate of
    its own (it replays the earlier sessions' first), else None."""
    if n_loaded and not n_new and stopped == "budget" and budget_s is not None:
        return (f"this session made no new candidate: its time budget ({budget_s:g} s) ended "
                f"while it replayed the earlier sessions' {n_loaded} candidates (checked, not "
                f"calibrated again); give a longer budget to go on")
    return None
