"""Find the live ``Run`` behind a run directory, for ``wb.load``: one this kernel is
watching already."""

from pathlib import Path


def find(run_dir):
    from workbench.kernel.cluster import _LIVE

    run_dir = Path(run_dir).resolve()
    for cluster in list(_LIVE):
        for run in reversed(cluster.runs):
            if Path(run.run_dir).resolve() == run_dir:
                return run
    return None
