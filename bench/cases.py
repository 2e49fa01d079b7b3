"""The benchmark programs: sources in bench/programs/, inputs, and lanes (= parameter vectors).

Every program is evaluated over S starts (params of shape [S]) and one data point, so lanes = S.
The two co-search candidates are the first line of each candidate file in ../shared/data (they are
the reference artifact's data, never copied into the repository); without it they are left out.
"""
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data"
LANES = (1, 8, 64, 256)


@dataclass
class Case:
    name: str
    src: str
    base: dict                       # parameter -> value (spread across the lanes)
    data: dict = field(default_factory=dict)
    consts: dict = field(default_factory=dict)
    heavy: bool = False              # seconds per call in the tagged baseline: fewer rounds

    def params(self, lanes):
        """params of shape [lanes]: the base values spread by +-5% across the lanes."""
        spread = 1.0 + 0.05 * np.linspace(-1.0, 1.0, lanes) if lanes > 1 else np.ones(1)
        return {k: v * spread for k, v in self.base.items()}


def program_path(name):
    """bench/programs/NAME.scm, or the package's example of that name (kalman2d_T80)."""
    path = HERE / "programs" / f"{name}.scm"
    return path if path.exists() else HERE.parent / "ndvm" / "examples" / f"{name}.scm"


def _program(name):
    return program_path(name).read_text()


def kalman_obs():
    """obs [80, 2]: the oracle's matrix when ../shared is present, else seeded normals."""
    path = SHARED / "oracle_refs.json"
    if path.exists():
        progs = {p["name"]: p for p in json.loads(path.read_text())["programs"]}
        m = progs["kalman2d_T80"]["matrix"]
        return np.array(m["data"], dtype=np.float64).reshape(m["rows"], m["cols"])
    return np.random.default_rng(0).standard_normal((80, 2))


def _first_candidate(fname):
    path = SHARED / fname
    if not path.exists():
        return None
    return json.loads(path.read_text().splitlines()[0])


def cases():
    """The benchmark cases, in report order."""
    out = [
        Case("scalar_mul_add", _program("scalar_mul_add"), {"alpha": 2.0, "beta": 1.0},
             {"x": 1.5}),
        Case("michaelis_menten", _program("michaelis_menten"), {"Vmax": 2.0, "Km": 0.5},
             {"S": 1.5}),
        Case("damped_oscillator", _program("damped_oscillator"),
             {"A": 1.0, "b": 0.3, "omega": 2.0}, {"t": 1.5}),
        Case("logistic_map_loop", _program("logistic_map_loop"), {"r": 3.2, "x0": 0.4}),
        Case("rec_sinsum10", _program("rec_sinsum10"), {"a": 1.5, "b": 0.3}),
        Case("kalman2d_T80", _program("kalman2d_T80"), {"q": 0.05, "r": 0.1}, {},
             {"obs": kalman_obs()}, heavy=True),
    ]
    for label, fname in (("cosearch_sr", "cosearch_candidates.jsonl"),
                         ("cosearch_rec", "cosearch_rec_candidates.jsonl")):
        cand = _first_candidate(fname)
        if cand is not None:
            base = {p: 0.5 + 0.25 * i for i, p in enumerate(cand["params"])}
            out.append(Case(label, cand["src"], base, {"x": 1.5}))
    return out
