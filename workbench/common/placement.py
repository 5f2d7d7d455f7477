"""What the cost model reads off a run's placement (``run.placement``: each task's variables,
their shapes and bytes, their sparse gradients as traced): one replica's trainable bytes and
tensors, their value size, TF's packs of them, and what each parameter-server task holds.
Pure pandas; ``kernel/runs/explain.py`` turns a run into the model's ``Scenario`` with them."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from workbench.common import costmodel

if TYPE_CHECKING:
    import pandas as pd

DENSE_BITS = 8  # 8-bit messages quantize every gradient dense, an embedding's too (engine/compression.py)


def trainable(placement: pd.DataFrame, split: bool = False, bits: int | None = None) -> pd.DataFrame:
    """One replica's trainable variables' rows of ``run.placement``: under MWMS every worker
    reports its own copy (the first one's kept); ``split``: the model's stages are on the
    workers, each variable once, all kept. Runs recorded before placement said which
    variables train keep every model variable. ``bits``: only those whose gradients are
    all-reduced, not the sparse ones (``sparse_bytes``), unless ``DENSE_BITS``."""
    v = placement[placement.variable.notna() & (placement.kind == "model")]
    if "trainable" in v and v.trainable.notna().any():
        v = v[v.trainable.fillna(False).astype(bool)]
    if len(v) and (v.role == "worker").all() and not split:  # mirrored on every worker: one copy
        v = v[v.task == v.task.min()]
    if bits is not None and bits != DENSE_BITS and "sparse_bytes" in v:
        v = v[v.sparse_bytes.isna()]
    return v


def trainable_bytes(placement: pd.DataFrame, split: bool = False, bits: int | None = None) -> tuple[float, int]:
    """(bytes, tensors) of one replica's trainable variables, from ``run.placement``, shards
    summed (``trainable``; ``bits``: the all-reduced ones)."""
    v = trainable(placement, split, bits)
    return float(v["bytes"].sum()), int(v.variable.nunique())


def sparse_bytes(placement: pd.DataFrame, bits: int = 32) -> float:
    """The bytes of one replica's sparse gradients (an embedding's ``IndexedSlices``: its
    rows and their indices, as traced) that TF all-gathers each step at ``bits`` (32, 16:
    as sent; 8: none, quantized dense)."""
    v = trainable(placement)
    if bits == DENSE_BITS or "sparse_bytes" not in v:
        return 0.0
    return float(v.sparse_bytes.dropna().sum())


def value_bytes(placement: pd.DataFrame) -> float:
    """The bytes of one value of the model's trainable variables (4: float32, 8: float64),
    from their bytes and shapes; 4 when the placement has no shapes."""
    v = trainable(placement)
    values = sum(math.prod(s) for s in v["shape"]) if "shape" in v and v["shape"].notna().all() else 0
    return float(v["bytes"].sum()) / values if values else 4.0


def tensor_bytes(placement: pd.DataFrame, bits: int = 32) -> list[float]:
    """The bytes of each trainable variable of one replica (``trainable``) as ``bits``-per-
    value messages send it (32: as it is, whatever its dtype), in the model's order: what
    TF's packing groups (``costmodel.packs``)."""
    v = trainable(placement, bits=bits)
    if bits == 32:
        return [float(b) for b in v["bytes"]]
    return [math.prod(s) * bits / 8 for s in v["shape"]]


def packs(placement: pd.DataFrame, bytes_per_pack: int, bits: int, scale: float = 1.0) -> int:
    """The all-reduces TF makes of the trainable variables at ``bits`` (``costmodel.packs``), each
    ``scale`` times as large."""
    return costmodel.packs([b * scale for b in tensor_bytes(placement, bits)], bytes_per_pack)


def ps_tasks(placement: pd.DataFrame) -> tuple[dict[str, float], dict[str, int], dict[str, tuple[float, float]]]:
    """({PS task: its share of the model's dense bytes}, {PS task: its variables, the
    optimizer's too}, {PS task: (its tables' bytes, their rows' a step)}: ``Scenario.ps_sparse``)."""
    v = placement[placement.variable.notna() & (placement.role == "ps")]
    sparse = (v.kind == "model") & (v.sparse_bytes.notna() if "sparse_bytes" in v else False)
    model = v[(v.kind == "model") & ~sparse].groupby("task")["bytes"].sum()
    shares = {f"ps:{int(t)}": float(b) / float(model.sum()) for t, b in model.items()} if model.sum() else {}
    tables = {f"ps:{int(t)}": (float(g["bytes"].sum()), float(g.sparse_bytes.sum()))
              for t, g in v[sparse].groupby("task")}
    return shares, {f"ps:{int(t)}": int(c) for t, c in v.groupby("task").size().items()}, tables
