"""Fixtures of the Python tests (helpers: compute_eval_support.py)."""

from __future__ import annotations

import os
import tempfile

import pytest

from compute_eval_support import FakeDaemon


@pytest.fixture
def short_tmp():
    """A short temporary directory: AF_UNIX socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="kv-", dir="/tmp") as d:
        yield d


@pytest.fixture
def fake_daemon(short_tmp):
    daemon = FakeDaemon(os.path.join(short_tmp, "fake.sock")).start()
    try:
        yield daemon
    finally:
        daemon.stop()


# The daemons of the client, builder, MCP and KernelBench tests exercise CPU kernel types, as the
# tests assert (gpu_type "cpu", tensors on the CPU): on a machine with a GPU they must not take it.
CPU_ONLY_ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="session")
def keval_daemon():
    """A real ``keval serve`` for the client tests, with TCP on a free loopback port
    (``tcp_url``, ``token_file``); skipped without KEVAL_BIN (CTest sets it)."""
    from keval._daemon import LocalDaemon

    keval_bin = os.environ.get("KEVAL_BIN")
    if not keval_bin:
        pytest.skip("KEVAL_BIN is not set (CTest sets it to the keval binary it built)")
    with LocalDaemon(keval_bin=keval_bin, extra_args=["--listen", "127.0.0.1:0"],
                     env=CPU_ONLY_ENV) as daemon:
        yield daemon
