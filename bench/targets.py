"""The performance targets of issue 5, measured side by side in one run, printed as a table.

    python bench/targets.py            (needs g++; torch for the S x N comparison)

Native figures come from bench/native/driver.cpp (the core's C++ API, no Python, as the
reference runtime's figures were measured); the Kalman ceiling from bench/native/kalman_hand.cpp;
the Python boundary and the S x N comparison from ndvm.Evaluator against PyTorch eager.
Machines here are shared and noisy: read the ratios, rerun when in doubt.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ndvm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.cases import program_path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT.parent / "shared" / "data" / "oracle_refs.json"

# the reference runtime on this machine (µs per warm fwd+grad call), from the SPEC
REFERENCE = {"damped_oscillator": (0.79, 10.8), "rec_sinsum10": (5.6, 88.0),
             "logistic_map_loop": (6.9, 113.0), "kalman2d_T80": (481.0, 12043.0)}
SPEEDUP_256 = {"damped_oscillator": 3.0, "rec_sinsum10": 3.0, "logistic_map_loop": 3.0,
               "kalman2d_T80": 5.0}


def build(tmp):
    """Compile the native driver and the hand-written Kalman filter; returns their paths."""
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        sys.exit("targets.py needs a C++ compiler (g++)")
    core, clients = ROOT / "ndvm" / "_core", ROOT / "clients"
    mvec = Path("/usr/lib/x86_64-linux-gnu/libmvec.so").exists()
    flags = ["-O3", "-std=c++17", "-fno-math-errno", "-fno-trapping-math",
             f"-I{core}", f"-I{clients / 'dmci'}", f"-I{clients / 'bytecode'}"]
    if mvec:
        flags.append("-DNDVM_HAVE_LIBMVEC")
        glibc = (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0.0").split()[-1]
        if tuple(int(p) for p in glibc.split(".")[:2]) >= (2, 35):  # (libmvec's tanh)
            flags.append("-DNDVM_HAVE_LIBMVEC_TANH")
    driver = tmp / "driver"
    subprocess.run([cxx, *flags, str(ROOT / "bench/native/driver.cpp"), str(core / "reader.cpp"),
                    str(core / "expand.cpp"), str(core / "expand_forms.cpp"),
                    str(core / "prelude.cpp"), str(core / "kernels.cpp"),
                    str(clients / "bytecode/compile.cpp"), "-o", str(driver), "-lpthread"]
                   + (["-lmvec"] if mvec else []), check=True)
    hand = tmp / "kalman_hand"
    subprocess.run([cxx, "-O3", "-std=c++17", str(ROOT / "bench/native/kalman_hand.cpp"), "-o",
                    str(hand)], check=True)
    return driver, hand


def obs_file(tmp):
    if ORACLE.exists():
        m = {p["name"]: p for p in json.loads(ORACLE.read_text())["programs"]}["kalman2d_T80"]
        m = m["matrix"]
        data = m["data"]
    else:
        data = list(np.random.default_rng(0).standard_normal(160))
    path = tmp / "obs.txt"
    path.write_text("obs 80 2 " + " ".join(repr(float(v)) for v in data))
    return path


def native(driver, program, lanes, client, dtype, obs):
    args = [str(driver), str(program_path(program)), str(lanes), client, dtype]
    if program == "kalman2d_T80":
        args.append(str(obs))
    runs = [float(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
            for _ in range(3)]
    return min(runs)


def python_boundary():
    prog = ndvm.parse("(* A (* (exp (- 0 (* b t))) (cos (* omega t))))")
    ev = ndvm.Evaluator()
    p = {"A": 1.0, "b": 0.3, "omega": 2.0, "t": 1.5}
    for _ in range(2000):
        ev.evaluate(prog, params=p, grad=True)
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20000):
            ev.evaluate(prog, params=p, grad=True)
        best.append((time.perf_counter() - t0) / 20000 * 1e6)
    return min(best)


def s_by_n():
    """Loss and gradient of a*exp(-b*x)*cos(c*x+d) over 256 starts x 200 points."""
    S, N = 256, 200
    rng = np.random.default_rng(0)
    x = np.linspace(0.1, 6.0, N)
    y = np.exp(-0.3 * x) * np.cos(2 * x + 0.1)
    params = {k: rng.normal(0.5, 0.2, S) for k in "abcd"}
    prog = ndvm.parse("(* a (exp (- 0 (* b x))) (cos (+ (* c x) d)))")
    ev = ndvm.Evaluator()

    def ndvm_call():  # the native loss mode: the sweep is seeded with d loss / d value
        return ev.mse(prog, y, params=params, data={"x": x})

    out = {"ndvm": timed(ndvm_call)}
    try:
        import torch
    except ImportError:
        return out, None
    torch.set_num_threads(1)
    tp = {k: torch.tensor(v[:, None], requires_grad=True) for k, v in params.items()}
    tx, ty = torch.tensor(x[None, :]), torch.tensor(y[None, :])

    def torch_call():
        for t in tp.values():
            t.grad = None
        f = tp["a"] * torch.exp(-tp["b"] * tx) * torch.cos(tp["c"] * tx + tp["d"])
        loss = ((f - ty) ** 2).mean(dim=1)
        loss.sum().backward()
        return loss

    out["torch"] = timed(torch_call)
    loss_n, g_n = ndvm_call()
    loss_t = torch_call()
    np.testing.assert_allclose(loss_n, loss_t.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(g_n["b"], tp["b"].grad.numpy()[:, 0], rtol=1e-8, atol=1e-12)
    return out, True


def timed(fn, reps=200):
    fn()
    best = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best.append((time.perf_counter() - t0) / reps * 1e6)
    return min(best)


def main():
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        driver, hand = build(tmp)
        obs = obs_file(tmp)
        for prog, (ref1, ref256) in REFERENCE.items():
            for client in ndvm.clients():
                for dtype in ("f64", "f32"):
                    t1 = native(driver, prog, 1, client, dtype, obs)
                    t256 = native(driver, prog, 256, client, dtype, obs)
                    goal = ref256 / SPEEDUP_256[prog]
                    rows.append((f"{prog} 1 lane ({client}, {dtype})", ref1, t1, t1 <= ref1))
                    rows.append((f"{prog} 256 lanes ({client}, {dtype})", goal, t256, t256 <= goal))
        hand_us = float(subprocess.run([str(hand), str(obs), "256"], check=True,
                                       capture_output=True, text=True).stdout.split()[0])
        best_k = min(t for name, _, t, _ in rows if name.startswith("kalman2d_T80 256")
                     and "f64" in name)
        rows.append(("kalman 256 lanes vs hand-written C++ (ratio, <= 3)", 3.0,
                     best_k / hand_us, best_k / hand_us <= 3.0))
    boundary = python_boundary()
    rows.append(("Python evaluate(grad=True), damped, 1 lane", 5.0, boundary, boundary <= 5.0))
    sn, _ = s_by_n()
    if "torch" in sn:
        rows.append(("S*N=256x200 loss+grad: ndvm / torch eager (ratio, <= 1)", 1.0,
                     sn["ndvm"] / sn["torch"], sn["ndvm"] <= sn["torch"]))
    print(f"{'target':<58} {'goal':>10} {'measured':>10}  met")
    for name, goal, got, ok in rows:
        print(f"{name:<58} {goal:>10.3g} {got:>10.3g}  {'yes' if ok else 'NO'}")
    print(f"(µs unless a ratio; hand-written Kalman: {hand_us:.0f} µs for 256 lanes; S x N: "
          + ", ".join(f"{k} {v:.0f} µs" for k, v in sn.items()) + ")")


if __name__ == "__main__":
    main()
