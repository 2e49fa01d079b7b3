"""One round of the search at a time: propose -> simplify and validate -> calibrate -> score.

``_Rounds`` holds a population's search steps (``next`` proposes and validates a round, ``begin``
and ``calibrate`` fit it, ``finish`` scores it and folds it into the front and population);
``_Scorer`` validates, calibrates and scores candidates against one task. The search loop
(``loop.py``) and the islands (``islands.py``) both drive them. A resumed run's recorded outcomes
are replayed here instead of calibrated again.
"""
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

import ndvm
from ndvm.cosearch._calibrate import minimize_value, setup, succeeded
from ndvm.cosearch.grammar import Grammar
from ndvm.cosearch.records import _dump, _good, pareto_front
from ndvm.cosearch.select import fitness, starts_around
from ndvm.cosearch.sexpr import size, skeleton, to_source, to_tree
from ndvm.cosearch.simplify import Simplifier, TooManyParameters
from ndvm.cosearch.task import Task, named_in, r_squared
from ndvm.fit import EvaluateAfter

_PROBE_STEPS = 2_000_000
_DENSE_POINTS = 512  # the dense probe of the input box that catches poles between data points
_POPULATION = 64
REFIT_STARTS = 16  # LM starts when a leading population member is refitted (``refits``)


_REVIVED = threading.local()  # this thread's last revived scorer (_revive_scorer)


def _revive_scorer(task, client, workers, fit_options, executor, draws):
    """A _Scorer made with these arguments whose start draws continue from ``draws``: this
    thread's last revived one when it was made the same way for the same task object (a thread
    runs one island's epoch at a time: the scorer is lent to one island at a time), else a new
    one."""
    made = (task, client, workers, fit_options, executor)
    last = getattr(_REVIVED, "scorer", None)
    if last is None or last.made[0] is not task or last.made[1:] != made[1:]:
        last = _REVIVED.scorer = _Scorer(*made)
    last.draws.bit_generator.state = draws
    return last


class Seen:
    """The sources a search has met, as 64-bit digests: ``in`` and ``add`` take sources, and the
    set pickles as 8 bytes a source (an island between epochs carries it), the same digests in
    every process."""

    __slots__ = ("_digests",)

    def __init__(self):
        self._digests = set()

    @staticmethod
    def _digest(source):
        return int.from_bytes(hashlib.blake2b(source.encode(), digest_size=8).digest(), "little")

    def __contains__(self, source):
        return self._digest(source) in self._digests

    def add(self, source):
        self._digests.add(self._digest(source))

    def add_new(self, source):
        """Add ``source``; False when it was already met (one digest for both)."""
        d, digests = self._digest(source), self._digests
        if d in digests:
            return False
        digests.add(d)
        return True

    def __len__(self):
        return len(self._digests)

    def __reduce__(self):
        return _seen_from, (np.fromiter(self._digests, dtype=np.uint64,
                                        count=len(self._digests)).tobytes(),)


def _seen_from(packed):
    s = Seen()
    s._digests = set(np.frombuffer(packed, dtype=np.uint64).tolist())
    return s


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
            self.echo.write(f"\nndvm: warning: {message}\n")
            self.echo.flush()
        self.warnings.append(message)


class _Scorer:
    """Validation, calibration and scoring of batches of sources against one task.

    Everything but its start draws is a function of how it was made (the task's splits, probe
    points, evaluators and calibration setup: megabytes on large data), so it pickles as those
    arguments and its draws' state, and is revived from the last scorer this thread revived for
    the same task object (an island's epochs in a worker process, whose task stays there)."""

    def __init__(self, task, client="dmci", workers=None, fit_options=None, executor=None):
        self.made = (task, client, workers, fit_options, executor)
        self.task = task
        self.workers = workers
        self.executor = executor
        # start_scales: the starts of each candidate drawn from normal(0, s) with s cycling
        # through these scales (ndvm.fit's own draws are all normal(0, 0.3)): one start near
        # zero and others far enough to reach a frequency of 2 or a shift of -3
        self.fit, scales = task.fit_options(fit_options, client)  # (a FitOptions)
        self.start_scales = np.resize(np.asarray(scales, dtype=np.float64),
                                      self.fit.starts) if scales else None
        self.draws = np.random.default_rng(0)  # (the same calls in the same order: same draws)
        # validation and scoring run on the proposer thread while the calibrations run:
        # each side has its own evaluators
        self.probe_ev = ndvm.Evaluator(client=client, max_steps=_PROBE_STEPS)
        self.ev = ndvm.Evaluator(client=client)
        self.fit_ev = ndvm.Evaluator(client=client)
        self.allowed = task.allowed_names  # (a set built anew on every access)
        self.refit_ev = ndvm.Evaluator(client=client)
        self.train = task.split("fit")  # (a subset of large data: Task.fit_points)
        self.held = task.split("heldout")
        self.held_var = float(np.var(self.held[1])) if task.objective == "mse" else None
        self.dense = self._dense_probe() if task.objective == "mse" and task.inputs else None
        self.joint = self.cuts = None  # the probe, training and held-out points, end to end
        if self.dense is not None and set(self.train[0]) == set(self.dense) == set(self.held[0]):
            parts = (self.dense, self.train[0], self.held[0])
            sizes = [next(iter(d.values())).size for d in parts]
            if all(np.size(d[k]) == n for d, n in zip(parts, sizes) for k in d):
                self.joint = {k: np.concatenate([d[k] for d in parts]) for k in self.dense}
                self.cuts = (sizes[0], sizes[0] + sizes[1])
        self._fitting = None  # (fitting())
        self.after = None  # what each fit's own native call evaluates and reduces after it
        if self.dense is not None:
            y = task.target
            self.center = y.mean()  # (off_domain: a value's distance from the target's mean,
            self.spread = float(np.max(np.abs(y - self.center))) or 1.0  # against its spread)
            if self.joint is not None and self.fit.dtype == "float64":
                a, b = self.cuts
                self.after = EvaluateAfter(
                    self.joint, [(0, a, float(self.center)), (a, b, self.train[1]),
                                 (b, b + self.held[1].size, self.held[1])], task.consts)

    def __reduce__(self):
        return _revive_scorer, (*self.made, self.draws.bit_generator.state)

    def fitting(self):
        """The calibrations' arguments, checked once for the whole search (a FitSetup: its plan
        serves every batch)."""
        if self._fitting is None:
            self._fitting = setup(self.train[0], self.train[1], workers=self.workers,
                                  executor=self.executor, options=self.fit, after=self.after)
        return self._fitting

    def _dense_probe(self):
        """Points filling the data's input box (a grid in 1-D, seeded uniform draws otherwise)."""
        lo = {k: float(np.min(v)) for k, v in self.task.inputs.items()}
        hi = {k: float(np.max(v)) for k, v in self.task.inputs.items()}
        if len(lo) == 1:
            return {k: np.linspace(lo[k], hi[k], _DENSE_POINTS) for k in lo}
        rng = np.random.default_rng(0)
        return {k: rng.uniform(lo[k], hi[k], _DENSE_POINTS) for k in lo}

    def values(self, prog, params):
        """The fitted model's values at the probe points between the data, the training points
        and the held-out points, in one evaluation (lanes are independent: the same numbers as
        three), as a tuple of three arrays; the exception when it raises; None without a probe."""
        if self.joint is None:
            return None
        try:
            with np.errstate(all="ignore"):
                v = self.predict(prog, params, self.joint)
        except Exception as e:  # noqa: BLE001 - reported by off_domain
            return e
        a, b = self.cuts
        return v[:a], v[a:b], v[b:]

    def off_domain(self, prog, params, values=None):
        """Why the fitted model is unusable between the data points (a non-finite value or a
        pole: more than 10x the target's spread from its mean), or None. ``values``: what
        ``values`` gave, when the caller has it."""
        if self.dense is None:
            return None
        if values is None:
            values = self.values(prog, params)
        if isinstance(values, Exception):
            try:  # (the same evaluation on the probe points alone: did they raise, or the data?)
                with np.errstate(all="ignore"):
                    v = self.predict(prog, params, self.dense)
            except Exception as e:  # noqa: BLE001 - a model that cannot run there is off-domain
                return f"fails between the data points: {str(e).splitlines()[0] if str(e) else e}"
        else:
            v = values[0]
        with np.errstate(all="ignore"):
            return self._off(np.count_nonzero(~np.isfinite(v)),
                             float(np.max(np.abs(v - self.center))))

    def _off(self, bad, most):
        """The rule of ``off_domain`` on the probe's count of non-finite values and its values'
        largest distance from the target's mean."""
        if bad:
            return "not finite between the data points (a pole or a domain edge)"
        if most > 10.0 * self.spread:
            return "a pole between the data points (value beyond 10x the target's spread)"
        return None

    def assess(self, prog, params, after=None):
        """(why it is off-domain, None) or (None, ``score``) of fitted ``params``. ``after``:
        ``EvaluateAfter.read`` of its fit when it was evaluated after the fit at the joint points
        (``self.after``): then only arithmetic is left here; else it is evaluated now."""
        if after is not None and after[0] == "ok":
            (bad, most, _), (_, _, tr), (_, _, ho) = after[1].tolist()
            why = self._off(bad, most)
            return (why, None) if why is not None else (None, self._errors(tr, ho))
        values = self.values(prog, params)
        why = self.off_domain(prog, params, values)
        if why is not None:
            return why, None
        try:  # (the data points may raise where the probe points between them do not)
            return None, self.score(prog, params, values)
        except Exception as e:  # noqa: BLE001 - a model that cannot run on the data is unusable
            return f"fails at the data points: {str(e).splitlines()[0] if str(e) else e}", None

    def validate(self, src):
        """(program, params) or raises: parse, allowed free names, a probe evaluation."""
        prog = ndvm.parse(src, name="<candidate>")
        bad = [n for n in prog.free_names if n not in self.allowed]
        if bad:
            raise ValueError(f"free name(s) not allowed by the task: {', '.join(bad)}")
        params = tuple(n for n in prog.free_names if n in self.task.params)
        data = named_in(self.train[0], prog)
        consts = named_in(self.task.consts, prog)
        probe = {n: (self.task.init or {}).get(n, 0.5) for n in params}
        self.probe_ev.evaluate(prog, params=probe, data=data, consts=consts)
        return prog, params

    def predict(self, prog, params, inputs):
        data = named_in(inputs, prog)
        consts = named_in(self.task.consts, prog)
        n = next(iter(inputs.values())).size if inputs else 1
        v = self.ev.evaluate(prog, params=params, data=data, consts=consts).value[0]
        return np.broadcast_to(v, (n,)) if v.size == 1 else v

    def score(self, prog, params, values=None):
        """(train error, held-out error, R^2) of fitted params (mse), or (nll, nll, None).
        ``values``: what ``values`` gave, when the caller has it."""
        if self.task.objective == "nll":
            consts = named_in(self.task.consts, prog)
            v = float(self.ev.evaluate(prog, params=params, consts=consts).value.sum())
            return v, v, None
        with np.errstate(all="ignore"):
            if isinstance(values, tuple):
                fit, held = values[1], values[2]
            else:
                fit = self.predict(prog, params, self.train[0])
                held = self.predict(prog, params, self.held[0])
            tr = float(np.sum((fit - self.train[1]) ** 2))
            ho = float(np.sum((held - self.held[1]) ** 2))
        return self._errors(tr, ho)

    def _errors(self, train_sse, held_sse):
        """``score`` from the sums of squared errors on the training and held-out points (a
        sum over n divided by n: np.mean's own arithmetic)."""
        n, m = self.train[1].size, self.held[1].size
        tr = float(train_sse) / n if n else math.nan
        ho = float(held_sse) / m if m else math.nan
        tr = tr if math.isfinite(tr) else math.inf
        ho = ho if math.isfinite(ho) else math.inf
        return tr, ho, r_squared(ho, self.held_var)

    def refit(self, prog, names, params, seed, starts=REFIT_STARTS):
        """Parameters of ``prog`` refitted by LM from ``starts`` starts: its current fit and
        draws at three scales (normal with sd 0.3, 1 and 3), so that shifts and rates far from
        the default start's reach are found; a failed fit gives an exception."""
        init = starts_around(params, names, starts, seed)
        try:
            r = ndvm.fit(prog, data=named_in(self.train[0], prog),
                         target=self.train[1], params=names, init=init, starts=starts,
                         optimizer="lm", steps=self.fit.steps, evaluator=self.refit_ev,
                         scaling=self.fit.scaling,
                         consts=named_in(self.task.consts, prog) or None)
        except Exception as e:  # noqa: BLE001 - a failed refit is recorded as failed
            return e
        return dict(r.params) if math.isfinite(r.loss) else ValueError("no finite refit")

    def begin(self, items, recorded=None):
        """The calibration of the (prog, params) ``items``, begun (their starts drawn, in the
        order batches are begun): ``drain()`` lends a thread to it, ``finish(lent)`` runs it on
        the calling thread too and returns the fitted params (or the error) of each item.
        ``recorded``: the outcome of each item as an earlier session of the run wrote it (a
        resumed run replays it): the starts are drawn all the same, nothing is fitted."""
        return _Calibration(self, items, recorded)


class _Calibration:
    """A batch's calibrations (``_Scorer.begin``). Likelihood tasks' run in ``finish`` alone."""

    def __init__(self, scorer, items, recorded=None):
        self.scorer, self.items, self.recorded = scorer, items, recorded
        self.todo = [i for i, (_, ps) in enumerate(items) if ps]
        self.fits = None
        if scorer.task.objective == "nll" or not self.todo:
            return
        where = {}
        if scorer.start_scales is not None:  # (drawn here, in batch order, on the caller)
            where["per_candidate"] = [
                {"init": {n: scorer.draws.normal(0.0, scorer.start_scales) for n in items[i][1]}}
                for i in self.todo]
        if recorded is None:
            self.fits = scorer.fitting().begin([items[i][0] for i in self.todo], **where)

    def drain(self, limit=None):
        """Lend the calling thread to the calibrations until none is left to start (or ``limit``
        are run); how many it ran."""
        return self.fits.drain(limit) if self.fits is not None else 0

    def cancel(self):
        """Calibrations begun but not to be finished (the search stopped): none starts any more."""
        if self.fits is not None:
            self.fits.cancel()

    def finish(self, lent=0, meanwhile=None):
        """Fitted params (or an error) for each item, once all are done (``meanwhile()`` is
        called once this thread has none left to start)."""
        scorer, items, todo = self.scorer, self.items, self.todo
        out = [None if ps else {} for _, ps in items]
        self.after = [None] * len(items)  # (EvaluateAfter.read of each fit, when it has one)
        if self.recorded is not None:
            if meanwhile is not None:
                meanwhile()
            for i in todo:
                out[i] = _recorded_fit(self.recorded[i])
            return out
        if self.fits is not None:
            for i, r in zip(todo, self.fits.finish(lent, meanwhile)):
                if succeeded(r):
                    out[i] = dict(r.params)
                    self.after[i] = EvaluateAfter.read(r)
                else:
                    out[i] = getattr(r, "error", r)
            return out
        if meanwhile is not None:
            meanwhile()
        for i in todo:  # a likelihood: the program's value minimized, one candidate at a time
            prog, ps = items[i]
            init = {n: (scorer.task.init or {}).get(n, 1.0) for n in ps}
            try:
                out[i] = minimize_value(prog, ps, init, consts=named_in(scorer.task.consts, prog),
                                        positive=[n for n in ps if n in scorer.task.positive],
                                        evaluator=scorer.fit_ev).params
            except Exception as e:  # noqa: BLE001 - a failed candidate is recorded
                out[i] = e.with_traceback(None)  # (its frames would hold ``out``: a cycle)
        return out


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

    def advance(self, done, current=None, staged=None, wake=None):
        """Score the batch ``done`` (when there is one), propose the next and begin its
        calibrations: (the next _Batch or why there is none, its calibrations or None). With
        ``staged`` (a Future given that pair as soon as it exists), this thread is then lent to
        the ``current`` batch's calibrations until none is left to start, and then to the next
        batch's, one fit at a time, until ``wake`` is set (the caller's thread, done with the
        current batch, hands this thread its next job): no thread idles while the current
        batch's last fits end."""
        try:
            if done is not None:
                self.finish(done)
            following = self.next()
            fits = self.begin(following) if isinstance(following, _Batch) else None
        except BaseException as e:
            if staged is not None:
                staged.set_exception(e.with_traceback(None))
            raise
        if staged is None:
            return following, fits
        staged.set_result((following, fits))
        if current is not None:
            current.drain()
        while fits is not None and not wake.is_set() and fits.drain(1):
            pass
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
        if self.max_candidates is not None:  # (a whole round is proposed all the same: a run
            # of n candidates is the first n of a longer one, which a resumed run can extend)
            srcs = srcs[:self.max_candidates - self.n_proposed]
        self.n_proposed += len(srcs)
        b = self.prepare(srcs)
        b.refits = self.leaders()
        return b

    def leaders(self):
        """Up to ``refits`` population members, lowest held-out error first, not yet refitted
        from many starts: a right structure stuck in a poor local optimum of its few default
        starts gets a second, wider calibration (``_Scorer.refit``)."""
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
        simplified (unless the proposer did), validated and queued for calibration."""
        task, state, scorer, prop = self.task, self.state, self.scorer, self.prop
        records, items, slots = [], [], []
        made = getattr(prop, "made", None) or {}  # (tree, source, size, skeleton) it built
        for src in srcs:
            rec = {"id": self.next_id, "proposer": getattr(prop, "name", "custom"),
                   "proposed": src, "model": None, "status": "invalid", "params": {}, "train_error": math.inf,
                   "heldout_error": math.inf, "r2": None, "size": None, "skeleton": None,
                   "error": None}
            self.next_id += self.id_step
            records.append(rec)
            old = self.recorded.get(rec["id"])
            if old is not None and old["proposed"] != src:
                raise ResumeMismatch(
                    f"cannot resume: candidate {rec['id']} was {old['proposed']!r} in the earlier "
                    f"session and is {src!r} now (resume needs the same task, proposer, seed and "
                    f"batch)")
            if not state.seen.add_new(src):
                rec["status"] = "duplicate"
                continue
            try:
                canon = made.get(src)
                tree = to_tree(src) if canon is None else canon[0]
                if task.objective == "mse" and not getattr(prop, "canonical", False):
                    # (likelihood programs' literals are constants, never fitted)
                    try:
                        tree = self.simplifier.canonicalize(tree)
                    except TooManyParameters:
                        raise
                    except Exception:  # noqa: BLE001 - an unusual form is calibrated as is
                        pass
                model = to_source(tree) if canon is None else src
                rec["model"] = model
                if model != src and not state.seen.add_new(model):
                    rec["status"] = "duplicate"
                    continue
                rec["size"] = size(tree) if canon is None else canon[2]
                rec["skeleton"] = skeleton(tree, task.params) if canon is None else canon[3]
                prog, params = scorer.validate(model)
            except Exception as e:  # noqa: BLE001 - an invalid candidate is a record
                rec["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
                continue
            items.append((prog, params))
            slots.append(rec)
        replayed = all(rec["id"] in self.recorded for rec in records)
        return _Batch(records, items, slots, replayed=replayed)

    def begin(self, b):
        """Begin the batch's calibrations (their starts are drawn here, one batch after the
        other); what ``calibrate`` and ``advance`` take."""
        recorded = [self.recorded[rec["id"]] for rec in b.slots] if b.replayed else None
        return self.scorer.begin(b.items, recorded)

    def calibrate(self, b, fits, lent=0, meanwhile=None):
        """Fit the batch's programs on the caller's thread, the pool's and ``lent`` more (the
        proposer thread, once it has proposed; ``meanwhile()`` runs on the caller's once it has
        none left to start); then the batch's refits."""
        began = time.perf_counter()
        b.fitted = fits.finish(lent, meanwhile)
        b.after = fits.after
        b.fit_each = (time.perf_counter() - began) / max(1, len(b.items))
        # (a replayed batch's refits are read back, or run, when their records are made)
        b.refitted = [None if b.replayed else self._refit(rec, prog, names)
                      for rec, prog, names in b.refits]

    def _refit(self, rec, prog, names):
        return self.scorer.refit(prog, names, rec["params"], seed=rec["id"])

    def finish(self, b):
        """Score the calibrated batch and fold its records into the front and population."""
        task, state, scorer = self.task, self.state, self.scorer
        for (prog, _), rec, p, after in zip(b.items, b.slots, b.fitted, b.after):
            rec["fit_seconds"] = round(b.fit_each, 6)
            why, scores = scorer.assess(prog, p, after) if isinstance(p, dict) else (None, None)
            if why is not None:
                rec.update(status="failed", params=p, error=why)
            elif isinstance(p, dict):
                tr, ho, r2 = scores
                rec.update(status="ok", params=p, train_error=tr, heldout_error=ho, r2=r2)
            else:
                rec["status"] = "failed"
                rec["error"] = str(p).splitlines()[0] if str(p) else type(p).__name__
            rec["time"] = round(time.perf_counter() - self.t0, 4)
            if self.first_good is None and _good(task, rec):
                self.first_good = rec
        for (old, prog, names), p in zip(b.refits, b.refitted or []):
            if p is None:  # replayed: as recorded, or run now if the record was never written
                again = self.recorded.get(self.next_id)
                p = (_recorded_fit(again) if again is not None
                     else self._refit(old, prog, names))
            b.records.append(self.refit_record(old, prog, p))
        stamp = round(time.perf_counter() - self.t0, 4)
        for rec in b.records:
            rec.setdefault("time", stamp)
            old = self.recorded.get(rec["id"])
            if old is not None:  # read back from an earlier session: it must score the same
                _same_outcome(old, rec)
                rec["time"] = old.get("time", rec["time"])
                if "fit_seconds" in old:
                    rec["fit_seconds"] = old["fit_seconds"]
        ok = [r for r in b.records if r["status"] == "ok"]
        self.front = pareto_front(self.front + ok)
        pool = state.population + [r for r in ok if math.isfinite(r["heldout_error"])]
        state.population = _fittest(pool)
        state.front = self.front
        b.finished = True

    def refit_record(self, old, prog, p):
        """The record of a refit of ``old`` (proposer "refit"): ok when it scores, else
        failed."""
        model = old["model"]
        rec = {"id": self.next_id, "proposer": "refit", "proposed": model, "model": model,
               "refit_of": old["id"], "status": "failed", "params": {},
               "train_error": math.inf, "heldout_error": math.inf, "r2": None,
               "size": old["size"], "skeleton": old.get("skeleton"), "error": None,
               "time": round(time.perf_counter() - self.t0, 4)}
        self.next_id += self.id_step
        why, scores = self.scorer.assess(prog, p) if isinstance(p, dict) else (None, None)
        if isinstance(p, dict) and why is None:
            tr, ho, r2 = scores
            rec.update(status="ok", params=p, train_error=tr, heldout_error=ho, r2=r2)
        else:
            rec["error"] = why or (str(p).splitlines()[0] if str(p) else type(p).__name__)
        if self.first_good is None and _good(self.task, rec):
            self.first_good = rec
        return rec


class ResumeMismatch(ValueError):
    """A resumed run proposes or scores a candidate otherwise than its earlier session did."""


_OUTCOME = ("proposed", "model", "status", "params", "train_error", "heldout_error", "r2", "size",
            "error")


def _recorded_fit(rec):
    """The calibration outcome an earlier session recorded in ``rec``: the fitted parameters
    (of ``rec["model"]``), or the error that stopped it."""
    if rec.get("params"):
        return {k: math.nan if v is None else float(v) for k, v in rec["params"].items()}
    return ValueError(rec.get("error") or "calibration failed")


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


