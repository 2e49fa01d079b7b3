"""Benchmark configuration: one torch thread (the box has two shared cores and torch's threaded
kernels on tiny batches are slower, erratically so), and the cases as a fixture source."""
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)
