"""pytest plugin for lab tests. Loaded from ``tests/conftest.py``::

    pytest_plugins = ["glbdlab.pytest_plugin"]

Fixtures:

* ``netns_lab`` -- a fresh :class:`glbdlab.netns.Lab` (own random tag) per test, closed after the
  test (processes stopped by PID, namespaces deleted). Skips with the reason when the run is not
  root or the kernel has no namespaces.
* ``lab_fabric`` -- a factory ``lab_fabric(spines=2, leaves=2, hosts=True) -> Fabric`` building a
  leaf-spine fabric (:mod:`glbdlab.topology`) inside that test's ``netns_lab``.

Markers: a test marked ``netns`` is skipped (with the reason) when namespaces are unavailable,
and one marked ``frr`` when the FRR 10.x chroot is not provisioned (``glbd-lab provision``), so
they can be collected anywhere. Example::

    @pytest.mark.netns
    def test_ping(netns_lab):
        a, b = netns_lab.pair()                    # 198.18.0.1/30 <-> 198.18.0.2/30
        assert a.ping("198.18.0.2")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from glbdlab.netns import Lab, LabError, require_netns
from glbdlab.topology import Fabric, leaf_spine

__all__ = ["lab_fabric", "netns_lab"]


def _netns_skip_reason() -> str | None:
    try:
        require_netns()
    except LabError as exc:
        return str(exc)
    return None


def _frr_skip_reason() -> str | None:
    from glbdlab.provision import require_chroot

    try:
        require_chroot()
    except LabError as exc:
        return str(exc)
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("netns") is not None or item.get_closest_marker("frr"):
        reason = _netns_skip_reason()
        if reason:
            pytest.skip(reason)
    if item.get_closest_marker("frr") is not None:
        reason = _frr_skip_reason()
        if reason:
            pytest.skip(reason)


@pytest.fixture
def netns_lab() -> Iterator[Lab]:
    """A Lab whose namespaces, links and processes are removed after the test."""
    reason = _netns_skip_reason()
    if reason:
        pytest.skip(reason)
    lab = Lab()
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def lab_fabric(netns_lab: Lab) -> Callable[..., Fabric]:
    """``lab_fabric(spines=2, leaves=2, hosts=True)``: a built Fabric in this test's Lab."""

    def make(spines: int = 2, leaves: int = 2, *, hosts: bool = True) -> Fabric:
        return Fabric(leaf_spine(spines, leaves, hosts=hosts), lab=netns_lab).build()

    return make
