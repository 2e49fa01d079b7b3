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
construction. The epochs go through ``ndvm.schedule.Scheduler``: a worker that dies loses only
the epochs it was running, which the scheduler submits again from the states they started from
(on a renewed pool when it is ours), and an epoch's records are written once, when its result
arrives. On a Dask cluster a busy worker is also sent the next ready island's epoch, queued behind
the one it runs (``Scheduler.ahead``), while the time budget has room for it: the worker starts it
as soon as its epoch ends instead of idling through a round trip to the coordinator and back; an
epoch still queued when the search ends is cancelled.

An island travels light: the coordinating process keeps each island as the bytes its last epoch
packed (it never unpacks one), and the task, with its data, stays in the processes that run the
epochs: an epoch is sent the search's key, and the task only when its process answers that it
has not got it yet (once per worker process and search). The islands' scorers, everything in
them derived from the task, are made again from it where they land (``score.Scorer``).

An island's Seen (the digests of every source it has met, 8 bytes each) grows with the search,
so on worker processes of ours and on a Dask cluster's workers it stays in the processes its
epochs ran in instead of travelling: each island has a home (a slot of the Scheduler) that keeps
its Seen between epochs (``_SEENS``), and the epoch sends back only the digests it added. The
coordinator keeps them all, and knows after how many epochs each process kept each island's
Seen: an island that moves to a process left idle is sent the digests of the epochs since it
last ran there, or every digest where it never ran (``_held``). An epoch that lands where its
island's Seen is not as the coordinator knew it (dropped, the process renewed, or Dask ran it
elsewhere) answers NEED_SEEN and is sent again with every digest. On any other executor the Seen
travels inside the island, as the rest of it.
"""
import contextlib
import copyreg
import io
import pickle
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ndvm._core._core import Seen
from ndvm.cosearch import rounds as _rounds
from ndvm.cosearch.proposers import make_proposer
from ndvm.cosearch.records import RecordBlock, Records, holding, uninterrupted
from ndvm.cosearch.rounds import SearchState, _Rounds, lost_executor
from ndvm.fit_options import whole_number
from ndvm.cosearch.score import Scorer, lent_scorer
from ndvm.parallel import collect_young, gc_paused
from ndvm.schedule import (ExecutorLost, Scheduler, check_main_importable, default_workers,
                           died_each_time, lost_worker)

__all__ = ["Island", "run_epoch", "search_islands"]

NEED_TASK = "ndvm: this process has not got the search's task"  # (an epoch's answer)
NEED_SEEN = "ndvm: this process has not got the island's Seen"  # (an epoch's answer)
_KEEP = 4  # the tasks of this many searches stay in a process that runs epochs
_TASKS = {}  # search key -> its task, in this process
# (search key, island) -> (the epochs the island had run, its Seen then), in this process: the
# Seens of the islands whose epochs ran here, the one of an island that moved elsewhere too (its
# next epoch here is sent only the digests since), at most ``held``'s bound of them, the least
# recently used dropped first
_SEENS = {}
_TASKS_LOCK = threading.Lock()


def island_seed(seed, index):
    """The proposer seed of island ``index`` of a search seeded ``seed`` (independent streams)."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1)[0])


class Island:
    """One population: its proposer, search state, scorer and rounds; picklable between epochs."""

    def __init__(self, task, index, n_islands, seed, grammar, batch, client="dmci",
                 fit_options=None, refits=0, proposer_options=None, lent=False):
        """``lent``: the island is packed at the end of its epoch (``_epoch``'s): its scorer is
        the thread's (``lent_scorer``), else its own."""
        self.index = index
        prop = make_proposer("mutate", seed=island_seed(seed, index),
                             **{"library_share": (index, n_islands), **(proposer_options or {})})
        prop = task.proposer(prop)
        self.state = SearchState(task=task, grammar=grammar)
        scorer = (lent_scorer if lent else Scorer)(task, client=client, workers=1,
                                                   fit_options=fit_options)
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
        self.rounds.fittest().add([dict(m) for m in migrants])

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
        with gc_paused(promote=True):
            while seconds is None or time.perf_counter() - began < seconds:
                b = r.next()
                if isinstance(b, str):
                    if b != "candidates":
                        self.stopped = b
                    break
                r.calibrate(b, r.begin(b))
                r.finish(b)
                out.extend(b.records)
                collect_young()
        return out


def run_epoch(island, n, migrants, seconds=None):
    """One epoch of ``island`` (a pure function of its arguments, but for ``seconds``, the time
    left of a search's budget): it receives ``migrants``, runs ``n`` candidates and returns (the
    island after it, its records)."""
    island.receive(migrants)
    records = island.run(n, seconds)
    return island, records


def _task_here(key):
    """The task this process keeps for the search ``key`` (an island unpacks its task as this)."""
    return _TASKS[key]


def _keep(key, task):
    with _TASKS_LOCK:
        _TASKS[key] = task
        while len(_TASKS) > _KEEP:
            old = next(iter(_TASKS))
            del _TASKS[old]
            _drop_seens(old)


def _forget(key):
    with _TASKS_LOCK:
        _TASKS.pop(key, None)
        _drop_seens(key)


def _drop_seens(key):
    for k in [k for k in _SEENS if k[0] == key]:
        del _SEENS[k]


def _left_behind():
    return None  # (an island's Seen where it was packed without it: _epoch puts it back)


def _pack(island, key, task, without_seen=False):
    """The bytes of ``island`` with its task left out (unpacked where the task is kept), and its
    Seen (unpacked as None) when ``without_seen``."""
    f = io.BytesIO()
    p = pickle.Pickler(f, protocol=pickle.HIGHEST_PROTOCOL)
    p.dispatch_table = copyreg.dispatch_table.copy()  # (looked up by type, in C: no per-object
    p.dispatch_table[type(task)] = lambda t: ((_task_here, (key,)) if t is task  # callback)
                                              else t.__reduce_ex__(pickle.HIGHEST_PROTOCOL))
    if without_seen:
        p.dispatch_table[Seen] = lambda _: (_left_behind, ())
    p.dump(island)
    return f.getvalue()


def _seen_for(key, index, held):
    """Island ``index``'s Seen after ``held[0]`` epochs: the one this process kept; else, with
    the digests ``held[1]``, the Seen they make (every digest: ``held[3]`` None), or the one
    kept here after ``held[3]`` epochs with the digests of the epochs since added; else None
    (the epoch answers NEED_SEEN)."""
    epoch, digests, _, since = held
    kept = _SEENS.pop((key, index), None)  # (kept again only once the epoch has run)
    if kept is not None and kept[0] == epoch:
        return kept[1]
    if digests is None:
        return None
    if since is None:
        return Seen.of(digests)
    if kept is None or kept[0] != since:
        return None
    kept[1].extend(digests)
    return kept[1]


def _hold(key, index, epochs, seen, most):
    """Keep island ``index``'s Seen after ``epochs`` epochs here, as the newest of at most
    ``most`` Seens."""
    with _TASKS_LOCK:
        _SEENS.pop((key, index), None)
        _SEENS[(key, index)] = (epochs, seen)
        while len(_SEENS) > most:
            del _SEENS[next(iter(_SEENS))]


@dataclass
class _Outcome:
    """What an epoch sends back: the island packed, its records (packed where they were made:
    the coordinator keeps and writes them without unpacking them), its migrants, and what the
    coordinator needs to know of it."""

    packed: bytes
    records: RecordBlock
    best: list
    n_proposed: int
    stopped: object
    warnings: list
    seen: bytes = None  # the digests its Seen gained in the epoch (when it stays: ``held``)
    next_id: int = 0  # the id of its next record
    seconds: float = 0.0  # how long its rounds ran, by the clock of the process that ran them


def _epoch(key, state, n, migrants, k, seconds, lines, held=None, task=None, recorded=None):
    """One epoch of an island, in whatever process runs it: ``state`` is the island as its last
    epoch packed it, or for its first epoch the arguments that make it (after the task). The
    task is the one this process keeps for the search ``key``, or ``task`` when given (then
    kept); without either it returns NEED_TASK (the coordinator sends the task). With ``held``
    (the epochs the island has run, digests of its Seen or None, how many Seens a process
    keeps, and the epochs after which the digests given start, None when they are all of them)
    the island's Seen stays here after the epoch and travels neither way: it is the one kept
    here, or made of the digests given, or an older one kept here brought up to date with them
    (an island back in a process it ran in before); else it returns NEED_SEEN. Sends back
    ``k`` migrants, the records packed (with their lines for the record file when ``lines``),
    without their times: the coordinator stamps them as they arrive, and with ``held`` the
    digests the Seen gained. ``recorded``: {id: record} of an earlier session of the run (a
    resumed one) that the epoch may meet: their candidates are replayed (checked, not
    calibrated again) and their records not sent back (the coordinator has them)."""
    if task is not None:
        _keep(key, task)
    task = _TASKS.get(key)
    if task is None:
        return NEED_TASK
    island = Island(task, *state, lent=True) if isinstance(state, tuple) else pickle.loads(state)
    if held is not None:
        if not isinstance(state, tuple):  # (a new island's Seen is new and empty)
            island.state.seen = _seen_for(key, island.index, held)
            if island.state.seen is None:
                return NEED_SEEN
        island.state.seen.mark()
    island.rounds.recorded = recorded or {}
    began = time.perf_counter()
    island, records = run_epoch(island, n, migrants, seconds)
    ran = time.perf_counter() - began
    if recorded:
        records = [r for r in records if r["id"] not in recorded]
        island.rounds.recorded = {}  # (not packed with the island)
    for r in records:
        del r["time"]
    added = None
    if held is not None:
        added = island.state.seen.added()
        _hold(key, island.index, held[0] + 1, island.state.seen, held[2])
    return _Outcome(_pack(island, key, task, held is not None),
                    RecordBlock(records, task, lines), island.best(k), island.n_proposed,
                    island.stopped, list(island.state.warnings), added,
                    island.rounds.next_id, ran)


def search_islands(task, islands, seed, grammar, batch, every, migrants, max_candidates, budget_s,
                   workers, executor, client, fit_options, refits, proposer_options, sink,
                   on_records, stop_on_success, spill=None, recorded=(), t_offset=0.0,
                   resumable=False):
    """Run ``islands`` islands to ``max_candidates`` (split evenly) or ``budget_s`` seconds;
    returns (records in id order, as Records, why it stopped, warnings). ``sink(block)`` writes
    each epoch's new records (a RecordBlock, stamped with their ``time`` and ``island``) as
    they arrive, or is None; ``on_records(all so far, the epoch's block)`` reports progress.
    ``workers``: as ``island_workers`` resolved it (None with ``executor``); ``spill``: the
    folder the records go to past records.SPILL_BYTES (None: all kept in memory).
    ``recorded``: an earlier session's records of this run (a resumed run; each of island
    id % islands), which the islands replay (their outcomes checked and reused, not calibrated
    again: each epoch is sent those it may meet) and which are among the records returned (a
    Records is returned itself, the new records added to it, not copied);
    the new records' times go on from ``t_offset``. ``resumable``: a lost executor's warning
    says the run can be resumed."""
    share = None
    if max_candidates is not None:
        share = [max_candidates // islands + (i < max_candidates % islands)
                 for i in range(islands)]
    key = uuid.uuid4().hex  # (the search's task, kept where its epochs run)
    states = [(i, islands, seed, grammar, batch, client, fit_options, refits, proposer_options)
              for i in range(islands)]  # each island: what makes it, then its packed bytes
    proposed = [0] * islands  # candidates each island has proposed
    stops = [None] * islands  # why each island's proposer stopped for good, or None
    island_warnings = [[] for _ in range(islands)]
    epochs = [0] * islands  # epochs completed by each island
    sent = {}  # (island, epoch) -> the migrants it sends after that epoch (until read for good)
    finished = [False] * islands
    running = []  # the Handles of the epochs running (tag: island, epoch)
    records = recorded if isinstance(recorded, Records) else Records(recorded, spill=spill)
    warnings = []
    replays = _replays(recorded, islands)  # (each island's earlier records: ids, positions)
    next_ids = list(range(islands))  # the id of each island's next record
    started = time.perf_counter()
    stopped, succeeded = "candidates", False
    died = set()  # (the islands stopped by an epoch whose worker died on every try)
    sched = Scheduler.processes(workers) if executor is None else Scheduler.on(executor)
    # (on processes of ours and on a Dask cluster's workers, each island's Seen stays in its
    # home process: ``_epoch``'s held; on another executor it travels)
    keeps = executor is None or sched.slots is not None
    seens = [[] for _ in range(islands)]  # each island's digests, as its epochs sent them
    # (where each island's Seen was kept, as the coordinator last knew it: place -> epochs)
    kept_at = [{} for _ in range(islands)]
    home = [None if sched.slots is None else i % sched.slots for i in range(islands)]
    most = islands  # (the Seens a process keeps: all of them here, else _most's)
    longest = None  # (the longest an epoch's rounds have run, as its process timed them)

    def quota(i):
        n = every if share is None else min(every, share[i] - proposed[i])
        return max(0, n)

    def incoming(i, e):
        """The migrants island i receives before epoch e (None: not known yet)."""
        if e == 0 or migrants == 0:
            return []
        src = (i - 1) % islands
        if src == i:
            return []
        last = epochs[src] - 1 if finished[src] else e - 1  # (a finished island sends its last)
        if last < 0:  # (it finished before its first epoch came back: it sends none)
            return []
        # (an island stopped by its workers' deaths may have had its last migrants dropped,
        # kept until their receiver was past them: it then sends none)
        return sent.get((src, min(e - 1, last)), [] if src in died else None)

    def launch():
        nonlocal most
        busy = {h.tag[0] for h in running}
        for i in range(islands):  # (first, so that incoming() knows every finished island)
            if not finished[i] and i not in busy and (quota(i) == 0 or stops[i] is not None):
                finished[i] = True
        came = {i: incoming(i, epochs[i]) for i in range(islands)
                if not finished[i] and i not in busy}  # (each one's migrants: None, not yet)
        ready = [i for i, m in came.items() if m is not None]
        # (the islands fewest epochs along go first, in order: under a time budget each
        # advances in turn, none left waiting while others run epoch after epoch)
        if sched.slots is not None:  # (an island's epoch goes to its home process when that
            # is idle, else to an idle one, which becomes its home; else, on a Dask cluster
            # (sched.ahead), it queues behind the epoch a slot runs, at its home when it can:
            # that worker starts it as soon as its epoch ends, without a round trip to this
            # process between them; else it waits. Of the islands as far along, those whose
            # home is idle go first)
            live = sched.live()  # (on a Dask cluster, a worker that joined adds slots)
            most = _most(islands, [sched.place(k) for k in live])
            load = Counter(h.where for h in running)
            idle = [k for k in live if not load[k]]
            most_each = 1 + _ahead(sched.ahead, seconds_left(), longest)
            ready = sorted(ready, key=lambda i: (epochs[i], home[i] not in idle))[
                :sum(max(0, most_each - load[k]) for k in live)]
            for i in ready:
                free = ([k for k in live if not load[k]]
                        or [k for k in live if load[k] < most_each])
                home[i] = home[i] if home[i] in free else free[0]
                load[home[i]] += 1
        else:  # (no slots: no more epochs than run at once, so that none waits in the
            # executor's queue with the budget's time left when it was sent)
            room = max(0, sched.capacity() - len(running))
            ready = sorted(ready, key=epochs.__getitem__)[:room]
        for i in ready:
            held = _held(epochs[i], seens[i], most, kept_at[i], sched.place(home[i])) \
                if keeps else None
            # (an epoch of n candidates makes at most n (1 + refits) records: a round proposes
            # one or more, and refits at most that many population members)
            replay = _replay(recorded, replays[i], next_ids[i], quota(i) * (1 + refits), islands)
            running.append(sched.submit(_epoch, key, states[i], quota(i), came[i], migrants,
                                        seconds_left(), sink is not None, held, None, replay,
                                        tag=(i, epochs[i]), where=home[i]))

    def seconds_left():
        """The budget's seconds left (None without one), for an epoch about to be sent."""
        return None if budget_s is None else max(0.0, budget_s - (time.perf_counter() - started))

    def again(h, task=None, seen=False):
        """Epoch ``h`` submitted again to the same process, with the task and with every digest
        of its island's Seen (the process had not got them)."""
        args = list(h.args)  # (_epoch's, ``held`` and ``task`` last)
        args[5] = seconds_left()  # (not the budget's when it was first sent: an inline
        # scheduler sends every island first, each then asks for the task and runs)
        if task is not None:
            args[8] = task
        if seen:
            args[7] = (args[7][0], b"".join(seens[h.tag[0]]), most, None)
        return sched.submit(_epoch, *args, tag=h.tag, where=h.where)

    held = holding()  # (uninterrupted()'s handlers installed once, not once an epoch kept)
    held.__enter__()
    try:
        launch()
        while running:
            done = sched.wait(running, timeout=None if budget_s is None else max(
                0.0, budget_s + _rounds.LATE - (time.perf_counter() - started)))
            if not done:  # (LATE seconds past the budget: their workers are gone or stalled)
                stopped = "budget"
                warnings.append(
                    f"{len(running)} epoch(s), of island(s) "
                    f"{', '.join(str(h.tag[0]) for h in running)}, had not come back "
                    f"{_rounds.LATE:g} s after the time budget ended (their workers gone or "
                    f"stalled): the search ended without them, and their candidates are not in "
                    f"the records")
                break
            for h in done:
                running.remove(h)
                i, e = h.tag
                warnings.extend(f"island {i} epoch {e}: its worker died; run again "
                                f"({type(exc).__name__})" for exc in h.lost)
                try:
                    out = h.result()  # (an epoch whose worker died was run again)
                except Exception as exc:
                    if not lost_worker(exc):
                        raise
                    finished[i] = True  # (the others go on, with the migrants it sent last)
                    died.add(i)
                    warnings.append(f"island {i} epoch {e}: {died_each_time(h, exc)}; the "
                                    f"island stopped there, and its epoch's candidates are not "
                                    f"in the records")
                    continue
                if isinstance(out, str) and out == NEED_TASK:  # (sent once to each process)
                    running.append(again(h, task=task))
                    continue
                if isinstance(out, str) and out == NEED_SEEN:  # (the island moved, or its
                    running.append(again(h, seen=True))  # home process died)
                    continue
                states[i], block = out.packed, out.records
                if out.seen is not None:
                    seens[i].append(out.seen)
                    kept_at[i][sched.place(h.where)] = e + 1
                proposed[i], stops[i], island_warnings[i] = (out.n_proposed, out.stopped,
                                                             out.warnings)
                next_ids[i] = out.next_id
                longest = max(longest or 0.0, out.seconds)
                epochs[i] = e + 1
                sent[(i, e)] = out.best
                for j, d in [k for k in sent if k[1] < epochs[(k[0] + 1) % islands] - 1]:
                    del sent[(j, d)]  # (its receiver has begun a later epoch: never read again)
                block.stamp(time=round(time.perf_counter() - started + t_offset, 4), island=i)
                with uninterrupted():  # (memory and file keep the same records)
                    records.add(block)
                    if sink is not None:
                        sink(block)
                succeeded = succeeded or (stop_on_success and block.good is not None)
                on_records(records, block)
            over = budget_s is not None and time.perf_counter() - started >= budget_s
            if over or succeeded:
                stopped = "budget" if over else "success"
                for i in range(islands):
                    finished[i] = True  # (no new epoch: those running end and are kept)
                # (an epoch queued behind another never starts: it would run the budget's time
                # left when it was sent; one that has started ends and is kept)
                sched.cancel(_queued(running))
                running[:] = [h for h in running if not h.cancelled()]
            launch()
    except KeyboardInterrupt:
        stopped = "interrupted"
    except ExecutorLost as e:
        stopped = "executor lost"
        warnings.append(lost_executor(e, resumable=resumable))
    finally:
        held.__exit__(None, None, None)  # (a Ctrl-C while the epochs are abandoned: raised)
        killed = sched.abandon(running)  # (none but after Ctrl-C, SIGTERM or an error)
        _forget(key)  # (where this process ran epochs itself)
        _forget_everywhere(sched, key, killed)
    warnings.extend(f"island {i} epoch {e}: its Dask worker {w} died; the cluster ran it "
                    f"again" for (i, e), w in sched.cluster_reruns())
    if stopped == "candidates" and len(died) == islands:  # (no island could run)
        stopped = "executor lost"
    if stopped == "candidates" and any(stops):
        stopped = next(s for s in stops if s)
    ran = sum(p > 0 for p in proposed)
    if stopped == "budget" and ran < islands:
        warnings.append(
            f"only {ran} of the {islands} islands ran before the time budget ended (an "
            f"island's epoch is {every} candidates, migration_every): the others searched "
            f"nothing. Fewer islands (about the number of workers) search deeper in the same "
            f"time")
    records.sort_by_id()
    return records, stopped, warnings + [w for ws in island_warnings for w in ws]


def _ahead(ahead, left, longest):
    """How many epochs a busy slot is sent beyond the one it runs: the scheduler's ``ahead``
    without a time budget; with one (``left`` seconds of it), only while an epoch queued now
    would both start and end within it, ``longest`` (the longest an epoch has run, None
    before any came back) twice over: else an epoch queued behind another would start with
    the time that was left when it was sent and run past the budget."""
    if left is None:
        return ahead
    return ahead if longest is not None and left >= 2.0 * longest else 0


def _queued(running):
    """The handles of ``running`` (in the order they were sent) sent to a slot behind another
    still there: not started, unless the one before has ended and its result is on its way (a
    Dask cluster's future does not say which: one cancelled there after it started is run to
    its end by its worker, its records never read)."""
    first, out = set(), []
    for h in running:
        if h.where is None:
            continue
        if h.where in first:
            out.append(h)
        first.add(h.where)
    return out


def _replays(recorded, islands):
    """Each island's records in ``recorded`` (an earlier session's): (their ids in order, their
    positions in ``recorded``), as numpy arrays."""
    ids = recorded.ids() if isinstance(recorded, Records) else np.array(
        [r["id"] for r in recorded], dtype=np.int64)
    out = []
    for i in range(islands):
        where = np.flatnonzero(ids % islands == i)
        order = np.argsort(ids[where], kind="stable")
        out.append((ids[where][order], where[order]))
    return out


def _replay(recorded, replays, first, most, islands):
    """{id: record} of an island's earlier records that an epoch of at most ``most`` records
    from id ``first`` may meet (ids first + k islands, k < most); None when it has none from
    ``first`` on."""
    ids, where = replays
    if not len(ids) or ids[-1] < first:  # (none, or none left: a new run, or one replayed
        return None  # past its earlier sessions: no search of the ids, an epoch)
    lo, hi = np.searchsorted(ids, [first, first + most * islands])
    return {int(ids[k]): recorded[int(where[k])] for k in range(lo, hi)}


def _most(islands, places):
    """How many islands' Seens a process keeps, with the islands' epochs sent to ``places`` (a
    process once for each of its slots): its slots' share of the islands and one more."""
    return -(-islands * max(Counter(places).values()) // len(places)) + 1


def _held(epochs, seens, most, kept_at, place):
    """``_epoch``'s ``held`` for an island after ``epochs`` epochs (``seens``: the digests each
    epoch added) sent to ``place``, where its Seen was kept after ``kept_at.get(place)``
    epochs: no digests when they are there (and for a new island), those of the epochs since
    when an older one is, every digest when the island never ran there."""
    since = kept_at.get(place)
    if since == epochs or epochs == 0:
        return epochs, None, most, None
    return epochs, b"".join(seens[since or 0:]), most, since


_TOLD = []  # the handles of the last searches' _forget_everywhere (a Dask cluster drops work
# whose future is dropped: they are held until done)


def _forget_everywhere(sched, key, killed=()):
    """Tell each worker process of ``sched``'s slots to forget the search ``key`` (its islands'
    Seens and the task, which it would keep until four more searches ran there), without
    waiting for them; not the slots in ``killed``, whose process is gone with what it held."""
    told = []  # (one slot of each process)
    for k in sorted({p: k for k, p in enumerate(sched.places or ())}.values()):
        if k in killed:
            continue
        with contextlib.suppress(Exception):  # (a broken pool holds nothing any more)
            told.append(sched.submit(_forget, key, where=k))
    _TOLD[:] = [h for h in _TOLD if not h.future.done()] + told


def island_workers(islands, workers, executor):
    """The worker processes an island search of ``islands`` runs on: ``workers`` (default: one
    per core), never more than there are islands (a process more would idle), or None with an
    executor, whose own workers run the epochs (ValueError when ``workers`` is given too);
    RuntimeError when worker processes cannot start in this program (check_main_importable)."""
    if executor is not None:
        if workers is not None:
            raise ValueError("workers counts an island search's own worker processes, and an "
                             "executor's workers run its epochs instead: give one or the other")
        return None
    workers = min(islands, default_workers() if workers is None else int(workers))
    if workers > 1:
        check_main_importable()
    return workers


def check_islands(islands, every, migrants):
    """ValueError for island settings that cannot run."""
    for name, v, low in (("islands", islands, 1), ("migration_every", every, 1),
                         ("migrants", migrants, 0)):
        if not whole_number(v) or v < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {v!r}")
    return int(islands), int(every), int(migrants)
