"""Fixtures shared by the indexer's tests (the bf16 branch, the capture, their mutation survivors)."""

import pytest
import torch

from tests.support import indexer_doubles as dbl


@pytest.fixture
def stubs(ext_active, monkeypatch):
    """The CUDA-only launches the indexer reaches, stubbed (tests/support/indexer_doubles.py, CudaStubs)."""
    return dbl.CudaStubs(monkeypatch).install()


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(20240505)
