"""ipyparallel's SSH engine-set launcher, starting its engines all at once.

ipyparallel's starts them one after the other, each with ~6 ssh/scp calls and three
remote Pythons (shell check, Python check, profile creation) before the engine itself:
6-7 s an engine here, so 26 s for 4. This one makes the same per-engine launchers and
runs their starts in threads. Its config sections are ipyparallel's (``SSHEngineSetLauncher``,
``SSHLauncher``): it is a subclass.
"""

from concurrent.futures import ThreadPoolExecutor

from ipyparallel.cluster.launcher import SSHEngineLauncher, SSHEngineSetLauncher


class _DeferredSSHEngineLauncher(SSHEngineLauncher):
    """Records its start; ``ParallelSSHEngineSetLauncher`` runs it."""

    def start(self, hostname=None, user=None, port=None):
        self.loop  # noqa: B018 - ipyparallel: the loop must be taken on the main thread
        self._deferred = (hostname, user, port)


class ParallelSSHEngineSetLauncher(SSHEngineSetLauncher):
    launcher_class = _DeferredSSHEngineLauncher

    def start(self, n: int) -> list[str]:
        keys = super().start(n)
        launchers = [self.launchers[k] for k in keys]
        if launchers:
            with ThreadPoolExecutor(len(launchers)) as pool:
                done = [pool.submit(SSHEngineLauncher.start, l, *l._deferred) for l in launchers]
            for future in done:
                future.result()  # the first failure, with ssh's message
        return keys
