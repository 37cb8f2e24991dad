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
