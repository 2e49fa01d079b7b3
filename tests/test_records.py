"""A search's records kept compactly (Records) and packed where they are made (RecordBlock): the
same dicts, in the same order, as the list they stand for; the same lines as the record file
had; the front and first good record of a block those of its records."""
import json
import math
import pickle
import random

import numpy as np
import pytest

import ndvm
from ndvm.cosearch.records import ById, Front, RecordBlock, Records, _dump, _good, pareto_front


def _record(i, rng):
    status = rng.choice(["ok", "ok", "ok", "failed", "invalid", "duplicate"])
    ok = status == "ok"
    return {"id": i, "proposer": "mutate", "proposed": f"(* a (sin (* {i} x)))",
            "model": f"(* a (sin (* {i} x)))" if status != "invalid" else None,
            "status": status,
            "params": {"a": rng.uniform(-2, 2), "b": math.inf} if ok else {},
            "train_error": rng.uniform(0, 1) if ok else math.inf,
            "heldout_error": rng.choice([rng.uniform(0, 1), math.inf]) if ok else math.inf,
            "r2": rng.uniform(0, 1) if ok else None, "size": rng.randint(3, 30),
            "skeleton": "(* P (sin (* P x)))", "error": None if ok else "why\nnot"}


def _records(n, seed=0):
    rng = random.Random(seed)
    return [_record(i, rng) for i in range(n)]


def test_records_are_the_list_they_stand_for():
    recs = _records(1000)
    kept = Records(recs[:10], block=64)  # (a tail of dicts, sealed blocks, then blocks added)
    kept.extend(recs[10:700])
    kept.add(RecordBlock(recs[700:900]))
    kept.extend(recs[900:])
    assert len(kept) == 1000 and kept == recs and list(kept) == recs
    assert kept[0] == recs[0] and kept[-1] == recs[-1] and kept[np.int64(333)] == recs[333]
    assert kept[5:990:7] == recs[5:990:7] and kept[::-1] == recs[::-1] and kept[2000:] == []
    with pytest.raises(IndexError):
        kept[1000]
    with pytest.raises(IndexError):
        kept[-1001]
    for wrong in ("3", 3.0, None):
        with pytest.raises(TypeError):
            kept[wrong]
    odd = Records([{"id": 0, "status": "failed", "params": {"a": math.nan}}], block=1)
    assert math.isnan(odd[0]["params"]["a"])  # (not a null: pickled, not JSON)
    assert kept.counts() == {s: sum(r["status"] == s for r in recs)
                             for s in {r["status"] for r in recs}}
    assert kept.ids().tolist() == list(range(1000))
    assert pickle.loads(pickle.dumps(kept)) == recs
    fresh = Records(recs, block=64)
    assert list(fresh) == recs and not fresh._cache  # (a pass keeps no block unpacked)
    assert "1000" in repr(kept) and len(repr(kept)) < 200
    assert Records() == [] and len(Records()) == 0 and list(Records()) == []
    # (a thousand records take far less than their dicts)
    assert len(pickle.dumps(kept)) < len(pickle.dumps(recs)) / 2


def test_records_sorted_by_id_read_in_id_order_however_read():
    recs = _records(3000)
    kept = Records(block=50)
    for island in range(7):  # (an island search's blocks arrive island after island)
        mine = [r for r in recs if r["id"] % 7 == island]
        for k in range(0, len(mine), 40):
            kept.add(RecordBlock(mine[k:k + 40]))
    kept.sort_by_id()
    assert kept.ids().tolist() == list(range(3000))
    assert list(kept) == recs  # (iterating)
    assert [kept[i] for i in range(3000)] == recs  # (indexing)
    assert kept[100:2900:3] == recs[100:2900:3]
    more = [dict(recs[0], id=3001), dict(recs[1], id=3000)]
    kept.extend(more)  # (added after: at the end, as added)
    assert list(kept) == recs + more and kept[2999:] == recs[2999:] + more
    kept.add(RecordBlock(more))
    assert list(kept) == recs + more + more and len(kept) == 3004
    assert kept.ids().tolist() == [r["id"] for r in recs + more + more]


def test_a_block_packs_records_lines_front_and_first_good():
    task = ndvm.cosearch.get_task("damped")
    recs = _records(300, seed=1)
    for r in recs[::3]:
        r["r2"] = 0.95  # (good: damped's threshold is below)
    block = RecordBlock(recs, task, lines=True)
    assert block.records() == recs and len(block) == 300
    assert block.front == pareto_front(recs)
    assert block.good == next(r for r in recs if _good(task, r))
    assert block.counts == {s: sum(r["status"] == s for r in recs)
                            for s in {r["status"] for r in recs}}
    assert block.text() == "".join(_dump(r) + "\n" for r in recs)
    block.stamp(time=1.25, island=3)
    stamped = [dict(r, time=1.25, island=3) for r in recs]
    assert block.records() == stamped
    assert block.front == pareto_front(stamped) and block.good["island"] == 3
    assert block.text() == "".join(_dump(r) + "\n" for r in stamped)
    kept = Records()
    kept.add(block)  # (keeps its packed records, not its lines: they were written)
    assert kept == stamped and len(pickle.dumps(kept)) < len(block.lines) / 2
    plain = RecordBlock(recs)  # (no lines made: written from its records; no task: no front)
    assert plain.front == [] and plain.good is None
    plain.stamp(time=1.25, island=3)
    assert plain.text() == block.text()
    # (the record file is written the bytes, neither decoded nor encoded again)
    assert block.encoded() == plain.encoded() == block.text().encode()
    assert [json.loads(x) for x in block.text().splitlines()] == [json.loads(_dump(r))
                                                                  for r in stamped]


def test_stamped_lines_close_each_line_with_the_tail_as_replace_did():
    stamped_lines = ndvm._core._core.stamped_lines  # (RecordBlock.text's, native)
    recs = _records(50, seed=2)
    lines = "".join(_dump(r) + "\n" for r in recs).encode()
    tail = b', "time": 3.5, "island": 1}\n'
    assert stamped_lines(lines, tail) == lines.replace(b"}\n", tail)
    assert stamped_lines(b"", tail) == b""
    assert stamped_lines(b'{"a": {"b": 1}}\n{}\n', b', "c": 2}\n') == (
        b'{"a": {"b": 1}, "c": 2}\n{, "c": 2}\n')
    for bad in (b'{"a": 1}', b'{"a": 1}\n{"b": 2}', b'{"a": 1}\n\n', b'{"a": 1} \n'):
        with pytest.raises(ValueError, match="does not end with"):
            stamped_lines(bad, tail)


def test_the_front_read_in_chunks_is_the_front_of_all_records():
    rng = random.Random(2)
    recs = [{"id": i, "status": rng.choice(["ok", "ok", "failed"]), "size": rng.randint(1, 40),
             "heldout_error": rng.choice([rng.random(), 0.5, 0.25, math.inf])}
            for i in range(20_000)]  # (ties in size and error: the lower id is kept)
    whole = _front_by_sorting(recs)
    assert pareto_front(recs) == whole and pareto_front(Records(recs)) == whole
    assert pareto_front(reversed(recs)) == whole


def test_a_line_is_the_records_json_with_non_finite_numbers_as_null():
    rec = _records(1)[0]
    rec.update(status="ok", params={"a": 1.5, "b": -0.25}, train_error=0.5, heldout_error=0.75,
               r2=0.5)
    assert _dump(rec) == json.dumps(rec)
    for field, value in (("heldout_error", math.inf), ("r2", math.nan), ("params", {"a": -math.inf})):
        line = json.loads(_dump(dict(rec, **{field: value})))
        assert line[field] in (None, {"a": None})
        assert {k: v for k, v in line.items() if k != field} == {
            k: v for k, v in rec.items() if k != field}


def test_records_by_id_are_found_as_a_dict_of_them_would_find_them():
    recs = _records(2000)
    random.Random(3).shuffle(recs)
    as_dict = {r["id"]: r for r in recs}
    by_id = ById(Records(recs, block=100))
    assert len(by_id) == 2000 and sorted(by_id) == sorted(as_dict)
    for i in (0, 1, 999, 1999, np.int64(7)):
        assert by_id[i] == as_dict[i] and i in by_id and by_id.get(i) == as_dict[i]
    for missing in (-1, 2000, 10**12, "3", None):
        assert missing not in by_id and by_id.get(missing) is None
    with pytest.raises(KeyError):
        by_id[2000]
    assert len(ById(Records())) == 0 and 0 not in ById(Records())


def test_records_past_the_spill_bound_go_to_a_file_and_read_back_the_same(tmp_path, monkeypatch):
    """Past SPILL_BYTES of packed records, a Records given a folder keeps them in a temporary
    file there (unlinked: nothing left behind) and reads them back as they are read; pickled,
    it is whole."""
    import pickle

    from ndvm.cosearch import records as R

    monkeypatch.setattr(R, "SPILL_BYTES", 2_000)
    recs = _records(3_000)
    random.Random(1).shuffle(recs)  # (ids out of order: sort_by_id has work)
    kept = Records(block=64, spill=str(tmp_path))
    kept.extend(recs[:1_000])
    kept.add(RecordBlock(recs[1_000:2_000]))
    kept.extend(recs[2_000:])
    spilled = [b for b in kept._blocks if type(b.data) is not bytes]
    assert spilled and kept._held <= 2_000 + max(len(b.data) for b in kept._blocks)
    assert list(tmp_path.iterdir()) == []  # (an unlinked temporary file)
    assert list(kept) == recs and kept[1_234] == recs[1_234] and kept[-1] == recs[-1]
    assert kept.counts() == Records(recs).counts()
    kept.sort_by_id()
    assert [r["id"] for r in kept] == sorted(r["id"] for r in recs)
    back = pickle.loads(pickle.dumps(kept))
    assert all(type(b.data) is bytes for b in back._blocks) and list(back) == list(kept)
    back.extend([{**recs[0], "id": 5_000}])  # (a Records unpickled keeps all in memory)
    assert len(back) == 3_001


def test_a_folder_that_cannot_take_the_records_keeps_them_in_memory(tmp_path, monkeypatch):
    from ndvm.cosearch import records as R

    monkeypatch.setattr(R, "SPILL_BYTES", 2_000)
    recs = _records(1_000)
    with pytest.warns(RuntimeWarning, match="stay in memory"):
        kept = Records(recs, block=64, spill=str(tmp_path / "not-there"))
    assert all(type(b.data) is bytes for b in kept._blocks) and list(kept) == recs


def test_a_search_whose_records_spill_writes_and_keeps_the_same_records(tmp_path, monkeypatch):
    from ndvm.cosearch import records as R

    run = {"max_candidates": 600, "budget": None, "seed": 3}
    whole = ndvm.search("damped", out=tmp_path / "a", **run)
    isl_whole = ndvm.search("damped", islands=2, workers=1, **run)
    monkeypatch.setattr(R, "SPILL_BYTES", 4_000)
    spilled = ndvm.search("damped", out=tmp_path / "b", **run)
    isl_spilled = ndvm.search("damped", islands=2, workers=1, **run)
    assert any(type(b.data) is not bytes for b in spilled.records._blocks)
    assert any(type(b.data) is not bytes for b in isl_spilled.records._blocks)
    rows = [(r["id"], r["model"], r["status"], r["params"]) for r in spilled.records]
    assert rows == [(r["id"], r["model"], r["status"], r["params"]) for r in whole.records]
    assert [r["model"] for r in isl_spilled.records] == [r["model"] for r in isl_whole.records]
    assert spilled.best["model"] == whole.best["model"]
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        p.name for p in (tmp_path / "a").iterdir())


def test_a_front_folded_a_few_records_at_a_time_is_the_front_of_all_of_them():
    rng = np.random.default_rng(3)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        recs = [{"id": i, "status": str(rng.choice(["ok", "ok", "ok", "failed"])),
                 "size": int(rng.integers(1, 8)),
                 "heldout_error": float(rng.choice([rng.integers(0, 6) / 4, math.inf, math.nan]))}
                for i in rng.permutation(n).tolist()]
        front, at = Front(), 0
        while at < n:
            step = int(rng.integers(1, 17))
            front.add(recs[at:at + step])
            at += step
            assert front.records == pareto_front(recs[:at]), trial
        assert Front(front.records).records == front.records


def _front_by_sorting(records):
    """The Pareto front by its definition: the ok records of finite held-out error sorted by
    (size, held-out error, id), each kept when its error is below every one before it."""
    ok = sorted((r for r in records if r["status"] == "ok" and math.isfinite(r["heldout_error"])),
                key=lambda r: (r["size"], r["heldout_error"], r["id"]))
    out, best = [], math.inf
    for r in ok:
        if r["heldout_error"] < best:
            out.append(r)
            best = r["heldout_error"]
    return out


def test_a_front_placed_by_size_then_error_then_id_is_the_front_by_sorting():
    # (Front finds a record's place among its members' sizes and compares (error, id) only
    # within its own size: records of one size, equal errors, ids in any order, a front given
    # to Front() and folded into further)
    rng = np.random.default_rng(5)
    for trial in range(300):
        n = int(rng.integers(1, 80))
        recs = [{"id": i, "status": str(rng.choice(["ok", "ok", "ok", "failed"])),
                 "size": int(rng.integers(1, 4 if trial % 3 == 0 else 9)),
                 "heldout_error": float(rng.choice([rng.integers(0, 4) / 4, math.inf]))}
                for i in rng.permutation(n).tolist()]
        cut = int(rng.integers(0, n + 1))
        front = Front(_front_by_sorting(recs[:cut]))
        at = cut
        while at < n:
            step = int(rng.integers(1, 17))
            front.add(recs[at:at + step])
            at += step
            assert front.records == _front_by_sorting(recs[:at]), trial
            assert front.sizes == [r["size"] for r in front.records]
            assert front.errors == [r["heldout_error"] for r in front.records]


def test_a_front_refuses_a_held_out_error_that_is_not_a_number_as_before():
    front = Front()
    with pytest.raises(TypeError, match="must be real number, not NoneType"):
        front.add([{"id": 0, "status": "ok", "size": 3, "heldout_error": None}])
    front.add([{"id": 1, "status": "failed", "size": 3, "heldout_error": None}])  # (not ok)
    assert front.records == [] and front.sizes == [] and front.errors == []


def _structures_unpacked(records):
    """The count conclude made before blocks kept their structures: every record read."""
    return len({r.get("skeleton") or r["model"] for r in records if r["status"] == "ok"})


def test_records_count_their_structures_without_unpacking_a_block(monkeypatch):
    rng = random.Random(5)
    recs = _records(3000)
    for r in recs:  # (a few hundred skeletons, some records without one: their model counts)
        r["skeleton"] = rng.choice([None, f"(* P (sin (* {rng.randrange(300)} x)))"])
    kept = Records(recs[:100], block=64)  # (blocks sealed here, blocks added, a tail of dicts)
    kept.add(RecordBlock(recs[100:1000]))
    kept.extend(recs[1000:])
    want = _structures_unpacked(recs)
    assert 300 < want < len(recs)
    whole = pickle.loads(pickle.dumps(kept))
    old = pickle.loads(pickle.dumps(kept))  # (a block pickled without its structures: read)
    del old._blocks[3].structures
    monkeypatch.setattr(RecordBlock, "records", lambda self: pytest.fail("a block unpacked"))
    assert kept.structures() == whole.structures() == want
    assert Records().structures() == 0
    monkeypatch.undo()
    assert old.structures() == want


def test_a_search_counts_its_structures_as_its_records_say_resumed_too(tmp_path):
    # (the count its selection reads, summary.json's, is the one every record read back makes)
    for islands in (1, 2):
        out = tmp_path / f"run{islands}"
        run = {"seed": 2, "budget": None, "out": out, "islands": islands, "workers": 1}
        if islands > 1:
            run["migration_every"] = 32
        first = ndvm.search("damped", max_candidates=64, **run)
        again = ndvm.search("damped", max_candidates=160, resume=True, **run)
        for result in (first, again):
            want = _structures_unpacked(result.records)
            assert result.best["selection"]["structures"] == want > 10
        summary = json.loads((out / "summary.json").read_text())
        assert summary["best"]["selection"]["structures"] == want
