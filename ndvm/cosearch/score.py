"""Validation, calibration and scoring of candidates against one task: ``Scorer``.

A candidate's source is parsed and checked (``validate``: allowed free names, one probe
evaluation), a round's programs are calibrated together (``begin`` -> ``_Calibration``: their
start draws, one shared native batch, or a likelihood's own minimizer), and each fit is scored
(``assess``: off-domain between the data points, or its training and held-out errors and R^2).
``refit`` fits a leading model again from many starts. The search's rounds (``rounds.py``)
drive it; an island carries its scorer as the arguments that made it (``_revive_scorer``).
"""
import math
import threading

import numpy as np

import ndvm
from ndvm._core._core import Scoring, round_fits, round_fitted, row_blocks, validate_each
from ndvm.cosearch._calibrate import minimize_value, setup, succeeded
from ndvm.cosearch.select import start_rows
from ndvm.cosearch.task import named_in, predict
from ndvm.fit import EvaluateAfter, _all_finite
from ndvm.fit_options import FitOptions
from ndvm.parallel import fit_outcome

__all__ = ["REFIT_STARTS", "Scorer", "lent_scorer"]

CANDIDATE = "<candidate>"  # the file name a candidate's errors give as where they are
_PROBE_STEPS = 2_000_000
# the probe evaluation runs on the first of the training points: it finds a program that cannot
# run (a type error, a name, a limit), which every point shows alike; a program that raises on
# a later point only fails its calibration instead (recorded failed, with the error)
_PROBE_ROWS = 64
_PROBE_BINDINGS = 1024  # orders of free names whose probe inputs a Scorer keeps bound
_DENSE_POINTS = 512  # the dense probe of the input box that catches poles between data points
REFIT_STARTS = 16  # LM starts when a leading population member is refitted (``refits``)


_REVIVED = threading.local()  # this thread's last revived scorer (_revive_scorer)


def _revive_scorer(task, client, workers, fit_options, executor, draws):
    """A Scorer made with these arguments whose start draws continue from ``draws`` (None: a
    new Scorer's): this thread's last revived one when it was made the same way for the same task
    object (a thread runs one island's epoch at a time: the scorer is lent to one island at a
    time), else a new one."""
    made = (task, client, workers, fit_options, executor)
    last = getattr(_REVIVED, "scorer", None)
    if last is None or last.made[0] is not task or last.made[1:] != made[1:]:
        last = _REVIVED.scorer = Scorer(*made)
    last.draws.bit_generator.state = _new_draws().bit_generator.state if draws is None else draws
    return last


def lent_scorer(task, client="dmci", workers=None, fit_options=None, executor=None):
    """``Scorer(...)`` for a user that is done with it before the thread's next (an island's
    first epoch, packed at its end as every epoch is): the thread's revived one when it was made
    the same way (``_revive_scorer``), its draws as a new Scorer's. Its plans, probes and joint
    points are then made once a thread, not again for each island's first epoch, and its
    candidates' free names staged once for all the islands."""
    return _revive_scorer(task, client, workers, fit_options, executor, None)


def _new_draws():
    """A new Scorer's start draws (the same calls in the same order: the same draws)."""
    return np.random.default_rng(0)


class Scorer:
    """Validation, calibration and scoring of batches of sources against one task.

    Everything but its start draws is a function of how it was made (the task's splits, probe
    points, evaluators and calibration setup: megabytes on large data), so it pickles as those
    arguments and its draws' state, and is revived from the last scorer this thread revived for
    the same task object (an island's epochs in a worker process, whose task stays there)."""

    def __init__(self, task, client="dmci", workers=None, fit_options=None, executor=None):
        self.task, self.client, self.workers = task, client, workers
        self.fit_options, self.executor = fit_options, executor  # (fit_options: as given)
        # start_scales: the starts of each candidate drawn from normal(0, s) with s cycling
        # through these scales (ndvm.fit's own draws are all normal(0, 0.3)): one start near
        # zero and others far enough to reach a frequency of 2 or a shift of -3
        self.fit, scales = task.fit_options(fit_options, client)  # (a FitOptions)
        self.start_scales = np.resize(np.asarray(scales, dtype=np.float64),
                                      self.fit.starts) if scales else None
        self.draws = _new_draws()
        # validation and scoring run on the proposer thread while the calibrations run:
        # each side has its own evaluators
        self.probe_ev = ndvm.Evaluator(client=client, max_steps=_PROBE_STEPS)
        self.ev = ndvm.Evaluator(client=client)
        self.fit_ev = ndvm.Evaluator(client=client)
        self.allowed = task.allowed_names  # (a set built anew on every access)
        self._probes = {}  # free names -> what validate checks and binds for them (once)
        self.train = task.split("fit")  # (a subset of large data: Task.fit_points)
        self.probe_points = {k: v[:_PROBE_ROWS] for k, v in self.train[0].items()}
        self.held = task.split("heldout")
        self.held_var = float(np.var(self.held[1])) if task.objective == "mse" else None
        # (the training and held-out points' counts: what ``_errors`` divides by)
        self.counts = (np.size(self.train[1]), np.size(self.held[1]))
        self.dense = self._dense_probe() if task.objective == "mse" and task.inputs else None
        self.joint = self.cuts = None  # the probe, training and held-out points, end to end
        if self.dense is not None and set(self.train[0]) == set(self.dense) == set(self.held[0]):
            parts = (self.dense, self.train[0], self.held[0])
            sizes = [next(iter(d.values())).size for d in parts]
            if all(np.size(d[k]) == n for d, n in zip(parts, sizes) for k in d):
                self.joint = {k: np.concatenate([d[k] for d in parts]) for k in self.dense}
                self.cuts = (sizes[0], sizes[0] + sizes[1])
        self._fitting = self._refitting = None  # (fitting(), refitting())
        self.after = None  # what each fit's own native call evaluates and reduces after it
        spread = math.nan
        if self.dense is not None:
            y = task.target
            self.center = y.mean()  # (off_domain: a value's distance from the target's mean,
            spread = float(np.max(np.abs(y - self.center))) or 1.0  # against its spread)
            if self.joint is not None and self.fit.dtype == "float64":
                a, b = self.cuts
                self.after = EvaluateAfter(
                    self.joint, [(0, a, float(self.center)), (a, b, self.train[1]),
                                 (b, b + self.held[1].size, self.held[1])], task.consts)
        # (assess's rules, native: a round's records are scored by them in round_scored)
        self.scoring = Scoring(spread, *self.counts, self.held_var)

    @property
    def made(self):
        """The arguments that made it (everything but its draws is a function of them)."""
        return self.task, self.client, self.workers, self.fit_options, self.executor

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
        largest distance from the target's mean (``Scoring.off``)."""
        return self.scoring.off(bad, most)

    def assess(self, prog, params, after=None):
        """(why it is off-domain, None) or (None, ``score``) of fitted ``params``. ``after``:
        (status, numbers) of its fit's evaluation after the fit at the joint points
        (``self.after``; ``ndvm.parallel.fit_outcome``'s): when "ok" only arithmetic is left
        (``Scoring.assess``, natively); else it is evaluated now (``_assess_now``)."""
        return self.scoring.assess(prog, params, after, self._assess_now)

    def _assess_now(self, prog, params, after=None):
        """``assess`` of a fit whose evaluation after it is not "ok" (or not given): the fitted
        model evaluated now at the probe, training and held-out points."""
        values = self.values(prog, params)
        why = self.off_domain(prog, params, values)
        if why is not None:
            return why, None
        try:  # (the data points may raise where the probe points between them do not)
            return None, self.score(prog, params, values)
        except Exception as e:  # noqa: BLE001 - a model that cannot run on the data is unusable
            return f"fails at the data points: {str(e).splitlines()[0] if str(e) else e}", None

    def validate(self, src):
        """(program, params) or raises: ``validate_round`` of the one source."""
        got = self.validate_round([src])[0]
        if isinstance(got, Exception):
            raise got
        return got

    def validate_round(self, sources):
        """Per source: (program, params), or the exception that makes it invalid (without its
        traceback): it does not parse, its free names are not all allowed by the task, or its
        probe evaluation (on the first _PROBE_ROWS training points) raises. One native call for
        a round's sources (``ndvm._core.validate_each``)."""
        ev = self.probe_ev
        return validate_each(sources, CANDIDATE, self._probes, self._probe_entry, ev._machine(),
                             ev.client, ev.evaluate)

    def _probe_entry(self, prog):
        """``_probe_inputs`` of ``prog``, kept for its free names. (A search meets a few orders
        of free names: each is checked and its probe inputs bound once; they depend on the names
        alone.)"""
        if len(self._probes) >= _PROBE_BINDINGS:
            self._probes.clear()
        known = self._probes[prog.free_names] = self._probe_inputs(prog)
        return known

    def _probe_inputs(self, prog):
        """(why the task does not allow ``prog``'s free names, or None; the parameters; the
        probe's bound inputs) of its free names: the probe runs at the task's initial values
        (0.5 where it has none) on the first _PROBE_ROWS training points. In place of the
        inputs, evaluate's (params, data, consts) when they do not bind."""
        allowed, task = self.allowed, self.task
        bad = [n for n in prog.free_names if n not in allowed]
        why = f"free name(s) not allowed by the task: {', '.join(bad)}" if bad else None
        params = tuple(n for n in prog.free_names if n in task.params)
        probe = ({n: (task.init or {}).get(n, 0.5) for n in params},
                 named_in(self.probe_points, prog), named_in(task.consts, prog))
        try:
            return why, params, self.probe_ev.bind(prog, *probe)
        except Exception:  # noqa: BLE001 - raised again by the program's own probe
            return why, params, probe

    def predict(self, prog, params, inputs):
        return predict(self.ev, prog, params, inputs, self.task.consts)

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
        sum over n divided by n: np.mean's own arithmetic; ``Scoring.errors``)."""
        return self.scoring.errors(train_sse, held_sse)

    def refitting(self):
        """The refits' calibration (a FitSetup, checked once for the whole search): LM from
        REFIT_STARTS given starts with the batch's budget and scaling, and, like the batch's
        fits, each fitted model evaluated at the probe, training and held-out points in the
        fit's own native call (``after``). No covariance: a refit's is never read."""
        if self._refitting is None:
            options = FitOptions.of(optimizer="lm", starts=REFIT_STARTS, steps=self.fit.steps,
                                    scaling=self.fit.scaling, client=self.client,
                                    consts=self.task.consts or None, uncertainty=False,
                                    unused_data="ignore")
            self._refitting = setup(self.train[0], self.train[1], workers=1, options=options,
                                    after=self.after)
        return self._refitting

    def refit(self, prog, names, params, seed):
        """``prog`` refitted by LM from REFIT_STARTS starts: its current fit (``params``) and
        draws at three scales (normal with sd 0.3, 1 and 3, seeded by ``seed``), so that shifts
        and rates far from the default start's reach are found. Returns (fitted params, the
        fit's evaluation after it: ``fit_outcome``'s, for ``assess``), or (the exception, None)
        when it failed."""
        return self.finish_refit(self.begin_refit(prog, names, params, seed))

    def begin_refit(self, prog, names, params, seed):
        """``refit``'s calibration begun (its starts drawn, its fit staged), for
        ``finish_refit``."""
        rows = start_rows(params, names, REFIT_STARTS, seed)
        return self.refitting().begin([prog], **_given_starts([(tuple(names), rows)],
                                                              _all_finite(rows)))

    @staticmethod
    def finish_refit(begun):
        """What ``refit`` returns, of a calibration ``begin_refit`` began."""
        r = begun.finish()[0]
        if succeeded(r) and not math.isfinite(r.loss):
            return ValueError("no finite refit"), None
        return _outcome(r)

    def begin(self, items, recorded=None, deadline=None):
        """The calibration of the (prog, params) ``items``, begun (their starts drawn, in the
        order batches are begun): ``drain()`` lends a thread to it, ``finish(lent)`` runs it on
        the calling thread too and returns the fitted params (or the error) of each item.
        ``recorded``: the outcome of each item as an earlier session of the run wrote it (a
        resumed run replays it): the starts are drawn all the same, nothing is fitted.
        ``deadline``: ``FitSetup.begin``'s (the fits an executor has not run by then fail)."""
        return _Calibration(self, items, recorded, deadline)


class _Calibration:
    """A batch's calibrations (``Scorer.begin``). Likelihood tasks' run in ``finish`` alone."""

    def __init__(self, scorer, items, recorded=None, deadline=None):
        self.scorer, self.items, self.recorded = scorer, items, recorded
        # (the items without parameters: evaluated at the joint points in the batch's native
        # call, as the fitted ones are after their fits, not on this thread by ``assess``; one
        # native pass: a round's Python runs cold)
        self.todo, self.bare, progs, bare, names, k = round_fits(items, scorer.after is not None)
        self.fits = None
        if scorer.task.objective == "nll" or not (self.todo or self.bare):
            return
        where = {}
        if scorer.start_scales is not None and self.todo:  # (drawn here, in batch order:
            # one call for the batch draws what one call per parameter drew, in the same order;
            # normal(0, s) is 0.0 + s * a standard normal, so the standard normals times the
            # scales are its numbers bit for bit, without a tiled array of scales)
            scales = scorer.start_scales
            rows = 0.0 + scales * scorer.draws.standard_normal((k, scales.size))
            # (each one's rows: a view, made natively)
            where = _given_starts(row_blocks(names, rows), _all_finite(rows))
        if recorded is None:
            self.fits = scorer.fitting().begin(progs, deadline=deadline, evaluated=bare, **where)

    def drain(self, limit=None, stop=None):
        """Lend the calling thread to the calibrations until none is left to start (or ``limit``
        are run, or ``stop`` is set: Begun.drain); how many it ran."""
        return self.fits.drain(limit, stop) if self.fits is not None else 0

    def finished(self):
        """Whether every calibration has finished (without waiting; True with none begun)."""
        return self.fits is None or self.fits.finished()

    def cancel(self):
        """Calibrations begun but not to be finished (the search stopped): none starts any more."""
        if self.fits is not None:
            self.fits.cancel()

    def finish(self, lent=0, meanwhile=None):
        """Fitted params (or an error) for each item, once all are done (``meanwhile()`` is
        called once this thread has none left to start)."""
        scorer, items, todo = self.scorer, self.items, self.todo
        if self.fits is not None:  # (each fit's evaluation after it: _outcome's)
            got = self.fits.finish(lent, meanwhile, outcomes=True)
            out, self.after = round_fitted(items, todo, self.bare, got, _outcome)
            return out
        out, self.after = round_fitted(items, [], [], [], None)  # ({} without params, else None)
        if self.recorded is not None:
            if meanwhile is not None:
                meanwhile()
            for i in todo:
                out[i] = _recorded_fit(self.recorded[i])
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


def _given_starts(pairs, finite):
    """``FitSetup.begin``'s keyword for programs' starts, (names, [P, S] float64 rows, a row a
    name) a program: ``starts``, staged as they are, when every value is ``finite``; else the
    same values as per_candidate's inits (ndvm.fit says which start is not finite)."""
    if finite:
        return {"starts": pairs}
    return {"per_candidate": [{"init": dict(zip(ns, rows))} for ns, rows in pairs]}


def _outcome(r):
    """(fitted params, its evaluation after the fit: ``fit_outcome``'s) of a calibration's
    result (a FitResult, or the pair ``Begun.finish(outcomes=True)`` gives for it), or (the error
    that stopped it, None)."""
    if type(r) is tuple:
        return r
    if succeeded(r):
        return fit_outcome(r)
    return getattr(r, "error", r), None


def _recorded_fit(rec):
    """The calibration outcome an earlier session recorded in ``rec``: the fitted parameters
    (of ``rec["model"]``), or the error that stopped it."""
    if rec.get("params"):
        return {k: math.nan if v is None else float(v) for k, v in rec["params"].items()}
    return ValueError(rec.get("error") or "calibration failed")
