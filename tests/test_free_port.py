"""The test servers' port rule: each xdist worker draws from its own block below the kernel's ephemeral range,
so a slow-starting server's probe is never answered by another worker's server on the same port."""

from __future__ import annotations

import socket

import pytest

from umind_core.testing import server


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(server, "_next_port", [])
    monkeypatch.setattr(server, "_ephemeral_floor", lambda: 32768)
    return monkeypatch


def _ports(monkeypatch, worker: str, n: int) -> list[int]:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setattr(server, "_next_port", [])
    return [server.free_port() for _ in range(n)]


def test_workers_draw_from_disjoint_blocks_below_the_ephemeral_range(fresh):
    zero, one = _ports(fresh, "gw0", 5), _ports(fresh, "gw1", 5)
    assert all(10000 <= p < 12000 for p in zero) and all(12000 <= p < 14000 for p in one)
    assert len(set(zero)) == 5  # walking forward: a port just released is not handed out again at once


def test_a_port_someone_holds_is_skipped(fresh):
    fresh.setenv("PYTEST_XDIST_WORKER", "gw2")
    first = server.free_port()
    fresh.setattr(server, "_next_port", [first - 14000])  # the block of gw2 starts at 14000: ask for `first` again
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))
        assert server.free_port() == 14000 + (first - 14000 + 1) % 2000


def test_a_low_ephemeral_range_falls_back_to_the_kernels_pick(monkeypatch):
    real_floor = server._ephemeral_floor()
    monkeypatch.setattr(server, "_ephemeral_floor", lambda: 11000)  # no room for one block below it
    assert server.free_port() >= real_floor
