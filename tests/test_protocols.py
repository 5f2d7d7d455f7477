"""The typed protocols (workbench.common.protocols) say what engines really send."""

import json
import subprocess
import sys
import typing

from workbench.common import protocols


def _keys(cls):
    return set(typing.get_type_hints(cls))


def _required(cls):
    return set(cls.__required_keys__)


def test_protocols_import_without_tensorflow():
    code = ("import sys, workbench.common.protocols, workbench.engine.entry; "
            "print('tensorflow' in sys.modules, 'keras' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_an_engines_inventory_has_exactly_the_keys_of_its_protocol():
    from workbench.engine.startup import inventory

    assert set(inventory.report()) == _keys(protocols.Inventory)


def test_published_rows_and_events_have_the_keys_of_their_protocols(tmp_path):
    from workbench.engine.metrics import Publisher

    pub = Publisher(str(tmp_path), "worker:0")
    pub.add(step=1, worker="worker:0", loss=0.5, accuracy=0.25, step_time=0.01, examples_per_s=100.0,
            replicas=1, mae=0.1)
    pub.event("checkpoint", step=1)
    pub.event("eval", step=1, test_loss=0.4, test_accuracy=0.5)
    pub.close()
    row, *events = [json.loads(line) for line in (tmp_path / "metrics" / "worker:0.jsonl").read_text().splitlines()]
    assert _required(protocols.StepRow) <= set(row) <= _keys(protocols.StepRow) | {"mae"}
    (checkpoint,), (evaluation,) = [e.values() for e in events]
    assert set(checkpoint) == _required(protocols.CheckpointEvent)
    assert set(evaluation) == _keys(protocols.EvalEvent)
    assert {checkpoint["kind"], evaluation["kind"]} <= set(typing.get_args(protocols.EventKind))


def test_a_published_window_unpacks_to_the_newest_rows_with_their_own_keys(tmp_path):
    """Windows travel packed (engine/metrics.py): the kernel unpacks the same rows, each
    with its own keys, through the window's trimming of older packed rows."""
    from workbench.engine.metrics import Publisher, WINDOW_FLUSHES, pack, unpack

    pub = Publisher(str(tmp_path), "worker:0", window=16)
    sent = []
    pub._publish = sent.append
    for step in range(1, 101):
        extra = {"staleness": step % 3} if step % 7 == 0 else {}  # some rows with one key more
        pub.add(step=step, worker="worker:0", loss=1.0 / step, accuracy=0.5, step_time=0.01,
                examples_per_s=100.0, replicas=1, **extra)
        if step % 5 == 0:
            pub.flush(force=True)
    pub.close()
    assert len(sent) == 21 and WINDOW_FLUSHES > 21  # every window is the newest 16 rows
    for window in sent:
        n = window["n"]
        assert unpack(window["packed"]) == pub.rows[max(0, n - 16):n]
    assert len(pub._packed) < 2 * 16  # older packed rows are dropped, the rows kept whole
    assert unpack(pack(pub.rows)) == pub.rows
    # one key tuple object per distinct set of keys: pickle writes it once
    assert len({id(keys) for keys, _ in sent[-1]["packed"]}) == 2
