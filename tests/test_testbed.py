"""``wb.testbed``: emulated hosts that are really separate on the network, reached over
SSH by name, and that leave nothing behind however their owner ends."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import workbench as wb
from workbench.kernel.testbed import bed as tb
from workbench.kernel.engines.processes import alive
from checks import wait_for

pytestmark = pytest.mark.hosts


def leftovers(tag):
    """Namespaces, links and processes of bed ``tag`` still on this machine."""
    netns = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if n.startswith(f"wb-{tag}-")]
    links = [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
             if f"wb{tag}" in line]
    sshd = subprocess.run(["pgrep", "-f", f"wb-bed-{tag}-"], capture_output=True, text=True).stdout.split()
    return {"netns": netns, "links": links, "processes": sshd}


def test_hosts_have_their_own_name_address_and_sshd_and_leave_nothing():
    with wb.testbed(hosts=3) as bed:
        assert list(bed.hosts) == ["h1", "h2", "h3"]
        assert all(a.startswith("198.18.") for a in [*bed.hosts.values(), bed.controller_ip])
        assert bed.startup_seconds < 20
        for host, address in bed.hosts.items():
            out = bed.ssh(host, "hostname; ip -4 -o addr show eth0; ip -o link | wc -l")
            assert out.returncode == 0, out.stderr
            name, addr_line, links = out.stdout.splitlines()
            assert name == host and f"inet {address}/24" in addr_line
            assert int(links) == 2  # lo and eth0: a host of its own on the network
        # hosts reach each other and this machine (the bridge), and nothing else
        probe = ("python3 -c \"import socket, sys; s = socket.create_connection((sys.argv[1], 22), 5); "
                 "print(s.getsockname()[0])\" ")
        out = bed.ssh("h1", probe + bed.hosts["h2"])
        assert out.stdout.strip() == bed.hosts["h1"], out.stderr
        assert bed.ssh("h1", "ip route").stdout.split()[0] != "default"
        tag = bed.tag
        assert leftovers(tag)["netns"] and leftovers(tag)["processes"]
    assert leftovers(tag) == {"netns": [], "links": [], "processes": []}
    assert not os.path.exists(bed.dir)


def test_an_error_while_building_tears_down_what_was_made(monkeypatch):
    made = {}

    def fail(self):
        made["tag"] = self.tag
        raise wb.TestbedError("sshd would not start")

    monkeypatch.setattr(tb.Testbed, "_start_sshds", fail)
    with pytest.raises(wb.TestbedError, match="sshd would not start"):
        wb.testbed(hosts=2)
    assert leftovers(made["tag"]) == {"netns": [], "links": [], "processes": []}


def test_a_killed_owner_leaves_nothing(tmp_path):
    """SIGKILL of the process that made the bed: its reaper tears the bed down."""
    code = ("import json, os, sys, workbench as wb; bed = wb.testbed(hosts=2); "
            "print(json.dumps([bed.tag, bed.dir]), flush=True); sys.stdin.readline(); os.kill(os.getpid(), 9)")
    owner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        tag, folder = json.loads(owner.stdout.readline())
        assert leftovers(tag)["processes"]
        owner.stdin.write("\n")
        owner.stdin.flush()
        assert owner.wait(30) == -signal.SIGKILL
        wait_for(lambda: leftovers(tag) == {"netns": [], "links": [], "processes": []}, 30, lambda: leftovers(tag))
        wait_for(lambda: not os.path.exists(folder), 10, lambda: os.listdir(folder))
    finally:
        if owner.poll() is None:
            owner.kill()


def test_without_root_or_packages_it_says_what_to_do(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(wb.TestbedError, match="needs root"):
        wb.testbed(hosts=1)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if p == "/usr/sbin/sshd" else real(p))
    with pytest.raises(wb.TestbedError, match="apt-get install -y --no-install-recommends openssh-server"):
        wb.testbed(hosts=1)


@pytest.mark.parametrize("hosts", [0, ["h1", "h1"], ["bad name"], True])
def test_host_arguments_are_checked(hosts):
    with pytest.raises(wb.ConfigError, match="Invalid value for argument 'hosts'"):
        wb.testbed(hosts=hosts)


@pytest.mark.parametrize("private", ["/root/.workbench", ["relative/dir"], ["/"], [3]])
def test_private_directories_are_checked(private):
    with pytest.raises(wb.ConfigError, match=r"argument 'private'. Received: private=.*Expected a list of absolute"):
        wb.testbed(hosts=2, private=private)


def test_the_reaper_leaves_a_bed_alone_while_its_owner_lives(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"bridge": "wbnone", "netns": {}, "dir": str(tmp_path / "x"), "ssh_config": "/dev/null",
                                 "hosts": []}))
    reaper = subprocess.Popen([sys.executable, "-m", "workbench.kernel.testbed.teardown", "reap", str(os.getpid()), str(state)])
    try:
        time.sleep(1.0)  # a stretch of the owner's life: the reaper must do nothing in it
        assert reaper.poll() is None and state.exists()
        state.unlink()  # the owner closed the bed
        assert reaper.wait(10) == 0
    finally:
        if alive(reaper.pid):
            reaper.kill()
