# A round's records made from its proposals (included by _core.pyx): ``_Rounds.prepare``'s loop
# over a round's sources, one native call a round instead of some forty bytecodes a source.


def first_line(e):
    """What a record says of the exception ``e`` that made it invalid or failed: its message's
    first line, or its type's name when it has none."""
    cdef str text = str(e)
    return text.splitlines()[0] if text else type(e).__name__


def round_records(list srcs not None, dict blank not None, Py_ssize_t next_id,
                  Py_ssize_t id_step, recorded, Seen seen not None, made,
                  bint simplify, tree_of, to_source, size, skeleton, params, mismatch):
    """The records of a round's sources ``srcs`` (``_Rounds.prepare``'s rules), numbered from
    ``next_id`` by ``id_step``: (records in proposal order, the records to validate, their
    models, the next id). Each record is a copy of ``blank`` (its fields in the records' order)
    with its id, its source and no params. A source ``recorded`` (an earlier session's records
    by id) as another source raises ``mismatch(id, recorded source, source)``. A source met
    before (``seen``) is a duplicate. Else its model is the proposer's canonical entry in
    ``made`` (tree, source, size, skeleton) when it has one: the source itself, with the
    entry's size and skeleton; else it is read from its tree, ``tree_of(source, entry,
    simplify)`` (the source read, or the entry's tree, simplified when ``simplify``):
    ``to_source(tree)``, a duplicate when that model was met before, with ``size(tree)`` and
    ``skeleton(tree, params)``. A source whose model cannot be made is invalid, its record's
    error the first line of why (an exception other than ``Exception`` ends the round)."""
    cdef list records = [], todo = [], models = []
    cdef dict rec
    cdef object src, old, canon, tree, model
    for src in srcs:
        rec = blank.copy()
        rec["id"] = next_id
        rec["proposed"] = src
        rec["params"] = {}
        records.append(rec)
        if recorded:
            old = recorded.get(next_id)
            if old is not None and old["proposed"] != src:
                raise mismatch(next_id, old["proposed"], src)
        next_id += id_step
        if not seen._add_new(src):
            rec["status"] = "duplicate"
            continue
        try:
            canon = ((<dict>made).get(src) if type(made) is dict else made.get(src)) if made \
                else None
            # (a proposer's canonical entry: its tree, made when read, is read only to simplify
            # it)
            tree = tree_of(src, canon, simplify) if canon is None or simplify else None
            model = to_source(tree) if canon is None else src
            rec["model"] = model
            if model is not src and model != src and not seen._add_new(model):
                rec["status"] = "duplicate"
                continue
            rec["size"] = size(tree) if canon is None else canon[2]
            rec["skeleton"] = skeleton(tree, params) if canon is None else canon[3]
        except Exception as e:  # (an invalid candidate is a record)
            rec["error"] = first_line(e)
            continue
        todo.append(rec)
        models.append(model)
    return records, todo, models, next_id


def round_validated(list todo not None, list got not None):
    """The records ``todo`` of a round with what validating their models gave, ``got`` (per
    model: (program, params), or the exception that makes it invalid): (the valid ones' (program,
    params) items, their records), the others' records given their error's first line."""
    cdef list items = [], slots = []
    cdef Py_ssize_t k, n = min(len(todo), len(got))
    for k in range(n):
        g = got[k]
        if isinstance(g, Exception):
            (<dict>todo[k])["error"] = first_line(g)
        else:
            items.append(g)
            slots.append(todo[k])
    return items, slots


def round_scored(list items not None, list slots not None, list fitted not None, list after,
                 assess, fit_seconds, stamp, good):
    """Score a round's calibrated records ``slots`` (``_Rounds.finish``'s rules): each is
    stamped with ``fit_seconds`` and the time ``stamp``; one whose calibration ``fitted`` gave
    no params (an exception) failed with its first line; else ``assess(program, params, its
    fit's evaluation after it)`` (of ``items``' program and ``after``) says why it failed, or
    its (train error, held-out error, R^2): it is ok with them. Returns the first ok record
    that ``good`` accepts (None without ``good``, or when none is)."""
    cdef Py_ssize_t k, n = min(len(items), len(slots), len(fitted), len(after))
    cdef dict rec
    first = None
    for k in range(n):
        prog, _ = items[k]
        rec = slots[k]
        p = fitted[k]
        rec["fit_seconds"] = fit_seconds
        rec["time"] = stamp
        if not isinstance(p, dict):
            rec["status"] = "failed"
            rec["error"] = first_line(p)
            continue
        why, scores = assess(prog, p, after[k])
        rec["params"] = p
        if why is not None:
            rec["status"] = "failed"
            rec["error"] = why
        else:
            rec["status"] = "ok"
            rec["train_error"], rec["heldout_error"], rec["r2"] = scores
            if first is None and good is not None and good(rec):
                first = rec
    return first


def round_kept(list records not None, stamp, recorded, replayed):
    """A round's ``records`` read once at its end (``_Rounds.finish``'s rules): each without a
    time given ``stamp``; each that ``recorded`` (an earlier session's records by id) holds
    checked and given its times by ``replayed(recorded record, record)``. Returns the ok ones
    whose held-out error is finite (those a front or population may keep), in order."""
    cdef list ok = []
    cdef dict rec
    for r in records:
        rec = r
        if "time" not in rec:
            rec["time"] = stamp
        if recorded:
            old = recorded.get(rec["id"])
            if old is not None:
                replayed(old, rec)
        if rec["status"] == "ok" and _isfinite(<double>rec["heldout_error"]):
            ok.append(rec)
    return ok
