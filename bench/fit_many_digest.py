"""A digest of every field of ``ndvm.fit_many``'s results, to check a change leaves them bit for
bit as they were: the co-search candidates (the first ``--n``) with Adam, LM and L-BFGS with
bounds, on 1 and 2 pool workers and (``--dask``) on a 2-worker Dask LocalCluster of processes.

    python bench/fit_many_digest.py --out before.json [--dask]
    python bench/fit_many_digest.py --out after.json [--dask]; cmp before.json after.json

Every run's digest must equal the first run's (results do not depend on where they ran); the
file maps each optimizer to its digest (one sha256 over every candidate's fields, floats and
arrays as their bytes, a failed candidate as its error's text) and each candidate's.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import ndvm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parallel_scaling import protocol  # noqa: E402

FIELDS = ("params", "loss", "all_params", "all_losses", "history", "n_evals", "converged",
          "optimizer", "names", "status", "covariance", "stderr", "all_covariance",
          "all_stderr", "stop_info", "message", "best_start", "success")
RUNS = {"adam": dict(optimizer="adam", steps=50, lr=0.05, starts=2),
        "lm": dict(optimizer="lm", steps=40, starts=2),
        "lbfgs_bounds": dict(optimizer="lbfgs", steps=40, starts=2,
                             bounds={"a": (-2.0, 2.0), "b": (-3.0, None)})}


def _bytes(v):
    """Exact bytes of a field's value."""
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{v.shape}".encode() + v.tobytes()
    if isinstance(v, float):
        return v.hex().encode()
    if isinstance(v, dict):
        return b"{" + b",".join(k.encode() + b":" + _bytes(x) for k, x in v.items()) + b"}"
    if isinstance(v, (tuple, list)):
        return b"(" + b",".join(_bytes(x) for x in v) + b")"
    return repr(v).encode()


def digest(r):
    if isinstance(r, ndvm.CandidateError):
        return "E" + hashlib.sha256(f"{r.kind} {r.error}".encode()).hexdigest()[:15]
    h = hashlib.sha256()
    for f in FIELDS:
        h.update(f.encode() + _bytes(getattr(r, f)))
    h.update(repr(r).encode())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=247)
    ap.add_argument("--dask", action="store_true")
    args = ap.parse_args()
    progs, data, target = protocol()
    progs = progs[:args.n]
    where = {"1 worker": dict(workers=1), "2 workers": dict(workers=2, chunk_size=7)}
    cluster = client = None
    if args.dask:
        from distributed import Client, LocalCluster
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
        where["dask"] = dict(executor=client.get_executor())
    out = {}
    try:
        for name, opts in RUNS.items():
            digests = None
            for how, kw in where.items():
                got = [digest(r) for r in ndvm.fit_many(progs, data=data, target=target,
                                                        **kw, **opts)]
                if digests is None:
                    digests = got
                assert got == digests, f"{name}: {how} differs from {list(where)[0]}"
            out[name] = {"all": hashlib.sha256("".join(digests).encode()).hexdigest(),
                         "candidates": digests}
            print(f"{name}: {out[name]['all'][:16]} ({len(digests)} candidates, "
                  f"{sum(d.startswith('E') for d in digests)} failed; the same on "
                  f"{', '.join(where)})")
    finally:
        if client is not None:
            client.close()
            cluster.close()
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
