"""A script (or kernel) that exits with a cluster running and a run training stops both,
quietly: no tracebacks from ipyparallel's or pyzmq's sockets, no process left."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from workbench.kernel.engines.processes import alive

pytestmark = pytest.mark.cluster

SCRIPT = textwrap.dedent("""
    import json
    import workbench as wb

    cluster = wb.Cluster(engines=2).start()
    run = cluster.train(wb.models.mlp((16,)), wb.datasets.digits(), strategy="multi_worker_mirrored",
                        workers=2, steps=10**6, global_batch_size=64, dashboard=False)
    while run.step < 20:
        pass
    print(json.dumps({"run_dir": str(run.run_dir), "pids": [e.pid for e in cluster.engine_info.values()]}))
""")  # ends here, with the cluster up and the run at step 20 or more


def test_a_script_exiting_with_a_cluster_running_stops_it_without_a_traceback(tmp_path):
    env = dict(os.environ, WORKBENCH_HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr == "", f"the exit printed:\n{out.stderr[-3000:]}"
    seen = json.loads(out.stdout.splitlines()[-1])
    end = time.monotonic() + 30
    while [p for p in seen["pids"] if alive(p)]:
        assert time.monotonic() < end, f"engines still running after exit: {[p for p in seen['pids'] if alive(p)]}"
        time.sleep(0.1)
    result = json.loads(open(os.path.join(seen["run_dir"], "result.json")).read())
    assert "the cluster was stopped" in result["error"], result
