"""ExaBGP supervisor pieces that need no namespace: config rendering (checked by ExaBGP's own
validator), child environment, command coalescing."""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from pathlib import Path

from glbd.exabgp import api
from glbd.exabgp.supervisor import (
    ExabgpNeighbor,
    ExabgpParams,
    ExabgpSupervisor,
    default_exabgp,
    exabgp_env,
    render_config,
)

PARAMS = ExabgpParams(
    "10.0.0.11",
    65100,
    (
        ExabgpNeighbor("172.16.11.1", "172.16.11.2", 65001, 9),
        ExabgpNeighbor("172.16.12.1", "172.16.12.2", 65002, 30),
    ),
)


def test_render_config_is_valid_for_exabgp(tmp_path: Path) -> None:
    text = render_config(PARAMS, [sys.executable, "-m", "glbd.exabgp.bridge", "/x/api.sock"])
    assert "neighbor 172.16.12.1 {" in text and "hold-time 30;" in text
    assert "receive {" in text and "open;" in text and "neighbor-changes;" in text
    assert "group-updates false;" in text
    conf = tmp_path / "exabgp.conf"
    conf.write_text(text)
    env = exabgp_env({"PATH": "/usr/bin:/bin"}, tmp_path / "log")
    res = subprocess.run(
        [*default_exabgp(), "validate", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_child_env_strips_systemd_and_sets_exabgp() -> None:
    env = exabgp_env(
        {
            "PATH": "/bin",
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WATCHDOG_USEC": "1",
            "WATCHDOG_PID": "1",
            "LISTEN_FDS": "1",
            "LISTEN_PID": "1",
        },
        Path("/tmp/x.log"),
    )
    assert env["PATH"] == "/bin"
    assert not [k for k in env if k.startswith(("NOTIFY", "WATCHDOG", "LISTEN"))]
    assert env["exabgp.daemon.user"] == "root"
    assert env["exabgp.api.cli"] == "false"
    assert env["exabgp.daemon.daemonize"] == "false"


def test_send_coalesces_per_neighbor_and_prefix() -> None:
    sup = ExabgpSupervisor(
        PARAMS, netns=None, on_line=lambda s: None, on_lost=lambda: None, on_ready=lambda: None
    )
    nb = ipaddress.ip_address("172.16.11.1")
    p = ipaddress.ip_network("10.1.0.0/24")
    sup.send(api.Announce(nb, p, None))
    sup.send(api.Withdraw(nb, p))
    sup.send(api.Teardown(nb, 10))
    assert sup.stats.coalesced == 1
    assert list(sup._pending.values()) == [api.Withdraw(nb, p), api.Teardown(nb, 10)]
    sup.dir.rmdir()
