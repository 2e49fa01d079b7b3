"""One round of the search at a time: propose -> simplify and validate -> calibrate -> score.

``_Rounds`` holds a population's search steps (``next`` proposes and validates a round, ``begin``
and ``calibrate`` fit it, ``finish`` scores it and folds it into the front and population), with
what they keep between rounds (``SearchState``, ``Seen``); a ``score.Scorer`` validates,
calibrates and scores the candidates against the task. The search loop (``loop.py``) and the
islands (``islands.py``) both drive them. A resumed run's recorded outcomes are replayed here
instead of calibrated again.
"""
import json
import math
import time
from dataclasses import dataclass, field

import ndvm
from ndvm._core._core import (
    Seen,
    population_fold,
    round_kept,
    round_records,
    round_scored,
    round_validated,
)
from ndvm._core._core import first_line as _first_line
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.records import Front, _dump, _good
from ndvm.cosearch.score import CANDIDATE, _recorded_fit
from ndvm.cosearch.select import fitness
from ndvm.cosearch.sexpr import size, skeleton, to_source, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.task import Task
from ndvm.parallel import EXECUTOR_BATCH, NotRun
from ndvm.schedule import WorkerDied

_POPULATION = 64
# Seconds past the time budget that a search waits for the work still out (an island's epoch,
# each ending at its first round's end after the budget; one population's round on an
# executor): then it ends without it (a Dask cluster whose workers all left, or that never had
# one, holds the work until a worker comes, maybe never)
LATE = 60.0


@dataclass
class SearchState:
    """What proposers may look at: the task, the grammar, the front, the best so far."""

    task: Task
    grammar: Grammar
    front: list = field(default_factory=list)
    population: list = field(default_factory=list)
    seen: Seen = field(default_factory=Seen)
    rejected: int = 0
    warnings: list = field(default_factory=list)
    echo: object = None  # a stream that shows each new warning as it happens (progress=True)

    def warn(self, message):
        """Record a proposer's warning (kept in the result and summary.json)."""
        if self.echo is not None and message not in self.warnings:
            show_warning(self.echo, message)
        self.warnings.append(message)


def show_warning(stream, message):
    """A search's warning shown on ``stream`` as it happens (below its progress line)."""
    stream.write(f"\nndvm: warning: {message}\n")
    stream.flush()


def lost_executor(e, resumable):
    """The warning of a search that ``ExecutorLost`` ``e`` ended (``resumable``: a single
    population's run folder, which ``resume`` continues)."""
    again = ("; resume=True (ndvm search --resume) goes on from the records once it is back"
             if resumable else "")
    return (f"{e}: the search stopped there, with what had come back (the candidates still "
            f"out are not in the records){again}")


@dataclass
class _Batch:
    """One round's candidates: their records (in proposal order), the programs to calibrate
    and the records they belong to; then the fitted parameters."""

    records: list
    items: list
    slots: list
    fitted: list = None
    after: list = None  # per item: its fit's evaluation after it (_Calibration.after)
    fit_each: float = 0.0
    finished: bool = False
    refits: list = field(default_factory=list)  # (record to refit, its prog, param names)
    refits_begun: list = None  # their calibrations begun with the batch's (Scorer.begin_refit)
    refitted: list = None
    emitted: bool = False  # its records kept (search's emit)
    replayed: bool = False  # its candidates' outcomes read back from a resumed run's records


class _Rounds:
    """The steps of the search loop. ``next`` (propose and validate a batch), ``finish`` (score
    a calibrated batch, update the front and population) and ``advance`` (both) run on the
    proposer thread and alone touch the search state; ``calibrate`` runs on the caller's."""

    def __init__(self, task, prop, state, scorer, t0, batch, max_candidates, refits=0,
                 recorded=None, first_id=0, id_step=1):
        self.task, self.prop, self.state, self.scorer = task, prop, state, scorer
        self.refits = refits if task.objective == "mse" else 0
        self.refitted = set()  # models already refitted from many starts
        self.t0, self.batch, self.max_candidates = t0, batch, max_candidates
        self.next_id = first_id  # (islands number their records first_id + k id_step)
        self.id_step = id_step
        self.n_proposed = 0
        self.recorded = recorded or {}  # id -> record of an earlier session (resume replays it)
        self.simplifier = Simplifier(task.params)  # its memo serves every candidate of the run
        self.first_good = None
        self.front = []
        # (the front and the population with their places, updated a round at a time)
        self._front = self._fittest = None
        self.own_seconds = 0.0  # advance's own steps (scoring, proposing, staging; not lent)
        # (a perf_counter time: a round's calibrations on an executor not run by then are given
        # up, recorded failed: the search's time budget and LATE seconds; None: wait for them)
        self.deadline = None
        self.died = False  # (a round's candidates lost with their workers: said once)

    def advance(self, done, current=None, staged=None, wake=None):
        """Score the batch ``done`` (when there is one), propose the next and begin its
        calibrations: (the next _Batch or why there is none, its calibrations or None). With
        ``staged`` (a Future given that pair as soon as it exists), this thread is then lent to
        the ``current`` batch's calibrations until none is left to start, and then to the next
        batch's until ``wake`` (an ndvm._core.Stop, looked at before each fit) is set (the
        caller's thread, done with the current batch, hands this thread its next job): no
        thread idles while the current batch's last fits end."""
        began = time.perf_counter()
        try:
            if done is not None:
                self.finish(done)
            following = self.next()
            fits = self.begin(following) if isinstance(following, _Batch) else None
            self.own_seconds += time.perf_counter() - began
        except BaseException as e:
            if staged is not None:
                staged.set_exception(e.with_traceback(None))
            raise
        if staged is None:
            return following, fits
        staged.set_result((following, fits))
        if current is not None:
            current.drain()
        if fits is not None and not wake.is_set():
            fits.drain(stop=wake)  # (looked at before each fit, natively: no GIL taken to look)
        return following, fits

    def next(self):
        """The next _Batch, or why there is none ("candidates", "exhausted", "proposer
        failed")."""
        if self.max_candidates is not None and self.n_proposed >= self.max_candidates:
            return "candidates"
        for _ in range(3):  # a proposer's transient failure (None) is retried twice
            srcs = self.prop.propose(self.batch, self.state)
            if srcs is not None:
                break
        else:
            return "proposer failed"
        if not srcs:
            return "exhausted"
        whole = True
        if self.max_candidates is not None:  # (a whole round is proposed all the same: a run
            # of n candidates is the first n of a longer one, which a resumed run can extend)
            whole = len(srcs) <= self.max_candidates - self.n_proposed
            srcs = srcs[:self.max_candidates - self.n_proposed]
        self.n_proposed += len(srcs)
        b = self.prepare(srcs)
        # (a round's refits are numbered after its proposals, when it is proposed: a run's ids
        # do not depend on when its rounds are scored, and a run of n candidates is the first
        # records of a longer one. A round cut short has none: the longer run's whole round
        # numbers its refits after proposals this one does not make)
        b.refits = []
        for rec, prog, names in self.leaders() if whole else ():
            b.refits.append((rec, prog, names, self.next_id))
            self.next_id += self.id_step
        return b

    def leaders(self):
        """Up to ``refits`` population members, lowest held-out error first, not yet refitted
        from many starts: a right structure stuck in a poor local optimum of its few default
        starts gets a second, wider calibration (``Scorer.refit``)."""
        out = []
        for rec in self.state.population:
            if len(out) >= self.refits:
                break
            model = rec["model"]
            if model in self.refitted or not rec["params"]:
                continue
            self.refitted.add(model)
            try:
                prog = ndvm.parse(model)
            except Exception:  # noqa: BLE001 - (it parsed when it was scored)
                continue
            out.append((rec, prog, tuple(rec["params"])))
        return out

    def prepare(self, srcs):
        """Records for ``srcs``: duplicates and invalid candidates are final; the others are
        simplified (unless the proposer did), validated and queued for calibration. The records
        are made in one native call (``round_records``, which keeps the rules), the models
        validated in another."""
        task, prop = self.task, self.prop
        # (likelihood programs' literals are constants, never fitted)
        simplify = task.objective == "mse" and not getattr(prop, "canonical", False)
        records, todo, models, self.next_id = round_records(
            srcs, _blank(getattr(prop, "name", "custom")), self.next_id, self.id_step,
            self.recorded, self.state.seen,
            getattr(prop, "made", None) or {},  # (tree, source, size, skeleton) it built
            simplify, self._tree_of, to_source, size, skeleton, task.params, _mismatch)
        # (validated together, in one call: a round's Python after its calibrations runs on cold
        # caches, where each call costs the more)
        items, slots = round_validated(todo, self.scorer.validate_round(models))
        replayed = all(rec["id"] in self.recorded for rec in records)
        return _Batch(records, items, slots, replayed=replayed)

    def _tree_of(self, src, canon, simplify):
        """The tree of the candidate ``src`` (``canon``: the proposer's canonical entry for it,
        or None): ``canon``'s tree, or ``src`` read; ``simplify``: simplified (a form the
        simplifier does not take is kept as it is; more parameters than the task names raise
        TooManyParameters)."""
        tree = to_tree(src, CANDIDATE) if canon is None else canon[0]
        if simplify:
            try:
                tree = self.simplifier.canonicalize(tree)
            except TooManyParameters:
                raise
            except Exception:  # noqa: BLE001 - an unusual form is calibrated as is
                pass
        return tree

    def begin(self, b):
        """Begin the batch's calibrations (their starts are drawn here, one batch after the
        other); what ``calibrate`` and ``advance`` take."""
        recorded = [self.recorded[rec["id"]] for rec in b.slots] if b.replayed else None
        fits = self.scorer.begin(b.items, recorded, self.deadline)
        # (the refits' starts drawn and their fits staged here too, with the batch's: after the
        # batch's calibrations this thread's caches hold their data, not the search's Python)
        b.refits_begun = None if b.replayed else [
            self.scorer.begin_refit(prog, names, rec["params"], rec["id"])
            for rec, prog, names, _ in b.refits]
        return fits

    def calibrate(self, b, fits, lent=0, meanwhile=None):
        """Fit the batch's programs on the caller's thread, the pool's and ``lent`` more (the
        proposer thread, once it has proposed; ``meanwhile()`` runs on the caller's once it has
        none left to start); then the batch's refits."""
        began = time.perf_counter()
        b.fitted = fits.finish(lent, meanwhile)
        b.after = fits.after
        # (the calibrations that failed, read once for what they say of the executor: a
        # round's are few, usually none)
        failed = [p for p in b.fitted if not isinstance(p, dict)]
        if failed:
            self._failures(failed)
        b.fit_each = (time.perf_counter() - began) / max(1, len(b.items))
        # (a replayed batch's refits are read back, or run, when their records are made)
        b.refitted = ([None] * len(b.refits) if b.replayed else
                      [self.scorer.finish_refit(begun) for begun in b.refits_begun])

    def _failures(self, failed):
        """Warn of what a round's ``failed`` calibrations say of the executor (once for workers
        that died: the records say which)."""
        lost = sum(isinstance(p, NotRun) for p in failed)
        if lost:  # (the executor had no worker: the search's budget was over LATE s before)
            self.state.warn(f"{lost} candidate(s) of a round were not calibrated: the executor "
                            f"had not run them {LATE:g} s after the time budget ended (its "
                            f"workers gone, or none ever joined: a Dask cluster without "
                            f"workers?); they are recorded failed")
        died = next((p for p in failed if isinstance(p, WorkerDied)), None)
        if died is not None and not self.died:  # (said once: the records say which)
            self.died = True
            self.state.warn(f"candidates were not calibrated: {died}; they are recorded "
                            f"failed with that error (a candidate that exhausts a worker's "
                            f"memory? workers that keep dying?)")

    def _refit(self, rec, prog, names):
        return self.scorer.refit(prog, names, rec["params"], seed=rec["id"])

    def finish(self, b):
        """Score the calibrated batch and fold its records into the front and population."""
        task, state = self.task, self.state
        # (a round's records are scored within microseconds: one time for them all)
        fit_seconds, stamp = round(b.fit_each, 6), round(time.perf_counter() - self.t0, 4)
        # (each record scored, and the first good one found, in one native call)
        good = None if self.first_good is not None else lambda rec: _good(task, rec)
        scorer = self.scorer
        first = round_scored(b.items, b.slots, b.fitted, b.after, scorer.scoring,
                             scorer._assess_now, fit_seconds, stamp, good)
        if first is not None:
            self.first_good = first
        for (old, prog, names, rid), done in zip(b.refits, b.refitted or []):
            if done is None:  # replayed: as recorded, or run now if the record was never written
                again = self.recorded.get(rid)
                done = ((_recorded_fit(again), None) if again is not None
                        else self._refit(old, prog, names))
            b.records.append(self.refit_record(old, prog, rid, *done))
        # (each record read once here: stamped, checked, sorted out; ok: the records a front or
        # population may keep)
        ok = round_kept(b.records, stamp, self.recorded, _replayed)
        front = self._front
        if front is None or front.records is not self.front:
            front = self._front = Front(self.front)
        front.add(ok)
        self.front = state.front = front.records
        self.fittest().add(ok)
        b.finished = True

    def fittest(self):
        """The population (``state.population``) as a ``_Fittest`` that folds new records in:
        the one kept from the last round unless the population was set since."""
        state, kept = self.state, self._fittest
        if kept is None or kept.records is not state.population:
            kept = self._fittest = _Fittest(state.population)
            state.population = kept.records
        return kept

    def refit_record(self, old, prog, rid, p, after=None):
        """The record ``rid`` of a refit of ``old`` (proposer "refit") to params ``p`` (or the
        error that stopped it; ``after``: its fit's evaluation after it, as ``Scorer.refit``
        gives): ok when it scores, else failed."""
        model = old["model"]
        rec = {"id": rid, "proposer": "refit", "proposed": model, "model": model,
               "refit_of": old["id"], "status": "failed", "params": {},
               "train_error": math.inf, "heldout_error": math.inf, "r2": None,
               "size": old["size"], "skeleton": old.get("skeleton"), "error": None,
               "time": round(time.perf_counter() - self.t0, 4)}
        why, scores = self.scorer.assess(prog, p, after) if isinstance(p, dict) else (None, None)
        if isinstance(p, dict) and why is None:
            tr, ho, r2 = scores
            rec.update(status="ok", params=p, train_error=tr, heldout_error=ho, r2=r2)
        else:
            rec["error"] = why or _first_line(p)
        if self.first_good is None and _good(self.task, rec):
            self.first_good = rec
        return rec


# proposer name -> the record its rounds' records are copies of (_blank)
_BLANKS = {}


def _blank(proposer):
    """The record a round's records are copies of (a dict's copy is half its display's cost;
    its fields in the records' order), of the proposer named ``proposer``: made once a name and
    kept (round_records copies it and never writes to it), not made again every round. (A
    name that is not a str, a custom proposer's, gets a new one each time, as it is.)"""
    blank = _BLANKS.get(proposer) if type(proposer) is str else None
    if blank is None:
        blank = {"id": None, "proposer": proposer, "proposed": None, "model": None,
                 "status": "invalid", "params": None, "train_error": math.inf,
                 "heldout_error": math.inf, "r2": None, "size": None, "skeleton": None,
                 "error": None}
        if type(proposer) is str:
            _BLANKS[proposer] = blank
    return blank


def _replayed(old, rec):
    """Check the record ``rec`` read back from an earlier session's ``old`` (it must score the
    same: ResumeMismatch) and give it ``old``'s times."""
    _same_outcome(old, rec)
    rec["time"] = old.get("time", rec["time"])
    if "fit_seconds" in old:
        rec["fit_seconds"] = old["fit_seconds"]


def _mismatch(rid, was, now):
    """The ResumeMismatch of candidate ``rid``, the source ``was`` in the earlier session and
    ``now`` in this one."""
    return ResumeMismatch(
        f"cannot resume: candidate {rid} was {was!r} in the earlier session and is {now!r} now "
        f"(resume needs the same task and data, a --csv file's columns and --target among them, "
        f"proposer, seed and batch: batch=, ndvm search --batch; a single population's run on a "
        f"Dask cluster has rounds of {EXECUTOR_BATCH} candidates for each of its worker threads; "
        f"an island search, the same islands, migration_every and migrants)")


class ResumeMismatch(ValueError):
    """A resumed run proposes or scores a candidate otherwise than its earlier session did."""


_OUTCOME = ("proposed", "model", "status", "params", "train_error", "heldout_error", "r2", "size",
            "error")


def _same_outcome(old, new):
    """Raise ResumeMismatch unless a replayed record scores as its earlier session wrote it."""
    a, b = json.loads(_dump(old)), json.loads(_dump(new))
    differ = [k for k in _OUTCOME if a.get(k) != b.get(k)]
    if differ:
        raise ResumeMismatch(
            f"cannot resume: candidate {new['id']} ({new['proposed']}) scores otherwise than "
            f"the earlier session recorded ({', '.join(f'{k}: {a.get(k)!r} -> {b.get(k)!r}' for k in differ)}); "
            f"was the run made by another version of ndvm or with other data?")


def _fittest(pool):
    """The _POPULATION records of lowest ``fitness``, one per model (its best fit)."""
    out, models = [], set()
    for r in sorted(pool, key=fitness):
        model = r["model"]
        if model not in models:
            models.add(model)
            out.append(r)
            if len(out) == _POPULATION:
                break
    return out


class _Fittest:
    """A population as ``_fittest`` leaves it (in its order), with each member's ``fitness``
    and its model's, that ``add`` updates in place: a round's few new records folded in one at
    a time (each placed after the members as fit, and kept when its model's member, if any, is
    less fit; the least fit member dropped past _POPULATION: ``_fittest`` of the union, as
    sorting it again would give), without reading the other members again."""

    __slots__ = ("keys", "models", "ordered", "records")

    def __init__(self, population=()):
        self.records = list(population)
        self.keys = [fitness(r) for r in self.records]
        self.models = {r["model"]: k for r, k in zip(self.records, self.keys)}
        self.ordered = not any(map(math.isnan, self.keys))  # (no NaN: each key has its place)

    def add(self, records):
        """Fold ``records`` in: ``self.records`` is then ``_fittest(records before + these)``."""
        out, keys, models = self.records, self.keys, self.models
        new = [fitness(r) for r in records]
        if not self.ordered or any(map(math.isnan, new)):  # (NaN: sorted's place of it is
            self.__init__(_fittest(out + list(records)))  # no bisection's: rank them all)
            return
        # (each record folded in natively: ``ndvm._core.population_fold``)
        population_fold(out, keys, models, new,
                        records if type(records) is list else list(records), _POPULATION)


