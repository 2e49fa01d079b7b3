"""Benchmark configuration: torch (when installed) runs on one thread — the box has two shared
cores, and torch's threaded kernels on tiny batches are slower there, erratically so."""
try:
    import torch
except ImportError:  # the eager baselines are skipped (bench/test_speed.py)
    torch = None
else:
    torch.set_num_threads(1)
