"""The headless CLI: same runs as the notebook, a progress bar, a summary, clear errors."""

import codecs
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios

import psutil
import pytest
from checks import wait_for


def run_cli(tmp_path, *args):
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"))
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True, text=True,
                          env=env, timeout=600)


class Terminal:
    """``python -m workbench ARGS`` in a real terminal, as a shell runs a job: a pty of
    ``columns`` columns is its controlling terminal, and the command leads its own session,
    so its process group is the terminal's foreground group, which the terminal's interrupt
    character (Ctrl-C) signals. ``output``: everything the terminal showed; ``started``:
    every process the command started, as seen while reading."""

    def __init__(self, tmp_path, *args, columns=120):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
        env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"), TERM="xterm")
        env.pop("COLUMNS", None)
        self.proc = subprocess.Popen([sys.executable, "-m", "workbench", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=env, start_new_session=True,
                                     preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.output = ""
        self.closed = False  # every process that had the terminal open has closed it
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self.started: dict[int, psutil.Process] = {}

    def read(self, seconds=0.1):
        """What the terminal shows within ``seconds``; notes the command's processes."""
        try:
            self.started.update((p.pid, p) for p in psutil.Process(self.proc.pid).children(recursive=True))
        except psutil.Error:
            pass
        if not self.closed and select.select([self.master], [], [], seconds)[0]:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: no process has the terminal open any more
                data = b""
            self.closed = not data
            self.output += self._decode(data)
        return self.output

    def interrupt(self):
        """Type the terminal's interrupt character (Ctrl-C)."""
        os.write(self.master, termios.tcgetattr(self.master)[6][termios.VINTR])

    def foreground(self):
        """The PIDs of the command's processes in the terminal's foreground process group."""
        group = os.tcgetpgrp(self.master)
        out = set()
        for pid, p in self.started.items():
            try:
                if p.is_running() and os.getpgid(pid) == group:
                    out.add(pid)
            except ProcessLookupError:
                pass
        return out

    def wait(self, timeout):
        """The command's exit code, once it exited and the terminal showed all it wrote."""
        def ended():
            self.read()
            return self.closed and self.proc.poll() is not None

        wait_for(ended, timeout, lambda: f"the command to exit; the terminal shows:\n{self.output[-3000:]}")
        os.close(self.master)
        return self.proc.returncode


@pytest.mark.cluster
def test_ctrl_c_in_the_terminal_stops_the_run_at_an_agreed_step_and_ends_every_process(tmp_path):
    """As a notebook's interrupt does (``Run.wait``): the run stops at an agreed step with a
    checkpoint, its status "stopped"; no traceback, exit code 130, and nothing the command
    started is left. The engines never see the Ctrl-C: they are outside the terminal's
    foreground process group."""
    import workbench as wb

    term = Terminal(tmp_path, "train", "--strategy", "multi_worker_mirrored", "--workers", "2",
                    "--steps", "100000", "--global-batch-size", "64", "--checkpoint-every", "0")
    try:
        wait_for(lambda: re.search(r"\| [1-9][\d,]*/100000 ", term.read()), 300,
                 lambda: f"the progress bar to count steps; the terminal shows:\n{term.output[-3000:]}")
        # engines, zygote and controller are outside the group the terminal signals
        assert not term.foreground(), {p: term.started[p].cmdline()[-3:] for p in term.foreground()}
        term.interrupt()
        code = term.wait(120)
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
    assert code == 130, term.output[-3000:]
    assert "Traceback" not in term.output, term.output[-5000:]
    # the progress bar, as the 120-column terminal showed it: every rendering with the loss,
    # narrower than the terminal, with no empty field in its brackets
    bars = [line.replace("^C", "") for line in re.split(r"[\r\n]", term.output)  # less the Ctrl-C's echo
            if "/100000 [" in line and "steps/s" in line]
    assert bars and all(len(line) < 120 and "loss " in line and ", ," not in line for line in bars), bars
    run_id = re.search(r"run (\S+) started", term.output).group(1)
    run = wb.load(run_id, home=tmp_path / "home")
    assert run.status == "stopped", (run.status, run.error)
    assert 0 < run.final_step < 100000 and run.checkpoint == run.final_step, (run.final_step, run.checkpoint)
    assert f"stopped at step {run.final_step}" in term.output, term.output[-3000:]
    wait_for(lambda: not [p for p in term.started.values() if p.is_running()], 30,
             lambda: f"every process the command started to end: {[p.cmdline() for p in term.started.values() if p.is_running()]}")


@pytest.mark.cluster
def test_cli_trains_headless_and_prints_a_summary(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "multi_worker_mirrored", "--workers", "2",
                  "--steps", "40", "--global-batch-size", "64")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "steps          40/40" in out.stdout
    assert "test accuracy" in out.stdout and "worker:1" in out.stdout
    # progress from the first line: the cluster starting, engines ready, the first step, the bar
    lines = out.stdout.splitlines()
    assert lines[0].startswith("starting a local cluster: a controller and 2 engines"), lines[:3]
    assert lines[1].startswith("2 engines ready in ") and "first step after" in out.stdout
    assert "40/40" in out.stdout.split("steps          ")[0]  # the progress bar reached the end
    summary = out.stdout.split("steps          40/40")[1]
    for figure in ("steps/s", "examples/s", "wall time"):
        assert f"  {figure}" in summary, summary
    # the bar ends on the summary's steps/s, not on tqdm's own count of its updates
    bar_rate = re.findall(r"40/40 \[[^\]]*?([\d,.]+) steps/s \(whole run\)", out.stdout)
    summary_rate = re.search(r"  steps/s +([\d,.]+) ", summary)
    assert bar_rate and summary_rate, out.stdout[-2000:]
    assert bar_rate[-1] == summary_rate.group(1), (bar_rate, summary_rate.group(1))
    assert "step/s" not in out.stdout, out.stdout[-2000:]  # tqdm's own rate is not shown


def test_cli_refuses_bad_arguments_before_starting_a_cluster(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "paramserver")
    assert out.returncode == 2
    assert "Invalid value for argument '--strategy'. Received: --strategy='paramserver'" in out.stderr
    assert "Did you mean 'parameter_server'" in out.stderr
    assert not (tmp_path / "home" / "ipython").exists(), "a cluster was started for a bad argument"
    out = run_cli(tmp_path, "train", "--ps", "1")  # the API's 'ps' is the option the user typed
    assert out.returncode == 2 and "argument '--ps'. Received: --ps=1. Expected 0" in out.stderr, out.stderr


def test_cli_help_is_plain_text():
    out = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "``" not in out.stdout and "'python -m workbench train ...'" in out.stdout


def test_train_help_offers_only_what_a_command_line_can_pass_and_every_default():
    out = subprocess.run([sys.executable, "-m", "workbench", "train", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    entries = [" ".join(e.split()) for e in re.split(r"\n  (?=-)", out.stdout.split("\noptions:\n", 1)[1])]
    assert len(entries) > 20 and entries[-1].startswith("--no-progress"), entries
    for entry in entries[1:-1]:  # those of --help and --no-progress say what they do
        assert "(default: " in entry, entry
        python_only = [word for word in ("object", "callable", "wb.", "Keras", "None") if word in entry]
        assert not python_only, entry


@pytest.mark.cluster
def test_cli_lists_shows_and_resumes_a_run_with_another_number_of_workers(tmp_path):
    out = run_cli(tmp_path, "train", "--strategy", "multi_worker_mirrored", "--workers", "2", "--steps", "40",
                  "--global-batch-size", "64", "--checkpoint-every", "20", "--no-progress")
    assert out.returncode == 0, out.stderr[-3000:]
    run_id = re.search(r"^run (\S+): ", out.stdout, re.M).group(1)  # the summary's first line
    listed = run_cli(tmp_path, "runs")
    assert listed.returncode == 0 and run_id in listed.stdout and "finished" in listed.stdout, listed.stderr
    # refused before any engine starts
    refused = run_cli(tmp_path, "resume", run_id[:-3], "--steps", "60", "--workers", "3")
    assert refused.returncode == 2 and "Invalid value for argument '--workers'" in refused.stderr, refused.stderr
    assert "starting a local cluster" not in refused.stdout, refused.stdout
    refused = run_cli(tmp_path, "resume", run_id[:-3], "--steps", "30")
    assert refused.returncode == 2 and "argument '--steps'. Received: --steps=30. Expected at least 40" in refused.stderr
    assert "starting a local cluster" not in refused.stdout, refused.stdout
    resumed = run_cli(tmp_path, "resume", run_id[:-3], "--steps", "60", "--workers", "1", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "steps          60/60" in resumed.stdout and "workers=1" in resumed.stdout
    shown = run_cli(tmp_path, "show", run_id)
    assert shown.returncode == 0 and "status         finished" in shown.stdout and "steps          60/60" in shown.stdout
    assert "checkpoint     step 60" in shown.stdout, shown.stdout
    import workbench as wb

    h = wb.history(tmp_path / "home" / "runs" / run_id)
    assert list(h[h.worker == "worker:0"].step) == list(range(1, 61))
    assert list(h[h.worker == "worker:1"].step) == list(range(1, 41)), "the second worker left at the resume"
