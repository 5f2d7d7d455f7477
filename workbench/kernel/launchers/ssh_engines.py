"""ipyparallel's SSH engine-set launcher, starting its engines all at once, with fewer
remote Pythons.

ipyparallel's starts them one after the other, each with ~6 ssh/scp calls, and most of
them run a remote Python that imports ipyparallel (0.6 CPU-s each here) or IPython (the
profile creation, 0.9 CPU-s); the thread that watches each engine imports ipyparallel again
every 60 s. On a 2-core machine 4 engines then took 15 s to register. This one makes the
same per-engine launchers and runs their starts in threads; its remote commands send
ipyparallel's small receiver code instead of importing ipyparallel
(``ShellCommandSend(send_receiver_code=True)``), the profile directory is made with
``mkdir`` (its ``log`` and ``security`` folders are all the engine's start needs; the
engine fills in the rest), and the watch needs only psutil. Its config sections are
ipyparallel's (``SSHEngineSetLauncher``, ``SSHLauncher``): it is a subclass.
"""

import inspect
import posixpath
from concurrent.futures import ThreadPoolExecutor

from ipyparallel.cluster.launcher import SSHEngineLauncher, SSHEngineSetLauncher, _ssh_outputs, ssh_waitpid
from ipyparallel.cluster.shellcmd import ShellCommandSend

_WAITPID = "import psutil\n" + inspect.getsource(ssh_waitpid)


class _DeferredSSHEngineLauncher(SSHEngineLauncher):
    """Records its start; ``ParallelSSHEngineSetLauncher`` runs it (``_start_now``)."""

    def start(self, hostname=None, user=None, port=None):
        self.loop  # noqa: B018 - ipyparallel: the loop must be taken on the main thread
        self._deferred = (hostname, user, port)

    @property
    def ssh_sender(self):
        if self._ssh_sender is None:
            self._ssh_sender = ShellCommandSend(self.ssh_cmd, self.ssh_args + [self.location], self.remote_python,
                                                log=self.log, send_receiver_code=True)
        return self._ssh_sender

    def _start_now(self):
        """``SSHLauncher.start``, less its unused Python check and its profile creation."""
        hostname, user, port = self._deferred
        if hostname is not None:
            self.hostname = hostname
        if user is not None:
            self.user = user
        if port is not None:
            if "-p" not in self.ssh_args:
                self.ssh_args += ["-p", str(port)]
            if "-P" not in self.scp_args:
                self.scp_args += ["-P", str(port)]
        for folder in ("log", "security"):  # where the engine's output and connection file go
            self.ssh_sender.cmd_mkdir(posixpath.join(self.remote_profile_dir, folder))
        self.send_files()
        self.pid = self.ssh_sender.cmd_start(self.program + self.program_args, env=self.get_env(),
                                             output_file=self.remote_output_file)
        self.notify_start({"host": self.location, "pid": self.pid})
        self._start_waiting()
        self.fetch_files()

    def wait_one(self, timeout):
        """ipyparallel's ``ssh_waitpid`` on the engine's host, without importing ipyparallel there."""
        out = self.ssh_sender.check_output_python_code(f"{_WAITPID}\nssh_waitpid({self.pid}, timeout={timeout})\n")
        values = _ssh_outputs(out)
        if "process_running" not in values:
            raise RuntimeError(out)
        if int(values.get("process_running", 0)):
            raise TimeoutError("still running")
        return int(values.get("exit_code", -1))


class ParallelSSHEngineSetLauncher(SSHEngineSetLauncher):
    launcher_class = _DeferredSSHEngineLauncher

    def start(self, n: int) -> list[str]:
        keys = super().start(n)
        launchers = [self.launchers[k] for k in keys]
        if launchers:
            with ThreadPoolExecutor(len(launchers)) as pool:
                done = [pool.submit(l._start_now) for l in launchers]
            for future in done:
                future.result()  # the first failure, with ssh's message
        return keys
