"""What the cost model (``costmodel.predict``) takes: a run's shape as a ``Scenario``, each
host's path as a ``Link``. Plain data; ``costmodel`` re-exports both."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Link:
    """A host's link: payload ``bytes_per_s`` each way (the set rate x the framing's
    efficiency, what an unshaped path measured, or inf for a calibrated unshaped path, whose
    bytes cost only ``cpu_per_byte``), its per-message latency ``alpha`` (s),
    ``rate``, the bits/s it was set to (None: unshaped), and ``cpu_per_byte``: seconds of a
    core its messages' ends spend per byte (gRPC's copies, the network stack), in series
    with the wire (``seconds``; measured by ``wb.calibrate_links``, else 0)."""

    bytes_per_s: float
    alpha: float
    rate: int | None = None
    cpu_per_byte: float = 0.0

    def payload_rate(self, share: float = 1.0) -> float:
        """Bytes/s a message's bytes go at: the wire and the ends' CPU (x ``share``), in series."""
        per_byte = 1.0 / self.bytes_per_s + self.cpu_per_byte * share
        return 1.0 / per_byte if per_byte > 0 else math.inf


@dataclass(frozen=True)
class Scenario:
    """One run's shape, as the model needs it.

    ``hosts``: {task name: host} of every task ("worker:0", "ps:1", "chief:0"); tasks on
    one host talk over its ``loopback`` (None: free), which no host link carries. ``links``:
    {host: Link} of the hosts whose links the run crosses.
    ``compute``: one worker's seconds per step for its forward and backward passes and its
    update, measured with ``compute_workers`` workers computing at once on ``cores`` shared
    cores (None: each host its own cores); ``input`` and ``other`` the rest of its step
    outside communication (waiting for a batch; Python, dispatch); ``pauses``: seconds per
    global step outside every step (checkpoints, evaluations, the chief's dispatch between
    calls), which slow steps/s but no step. ``ps_shares``: {PS task: its share of the
    variables' bytes}; ``ps_variables``: {PS task: its variables, the optimizer's too, each
    read or written every worker step (``PS_VARIABLE_BYTES``)}. ``bits``: the precision of
    synchronous messages. ``packs``: the all-reduces a step's gradients are packed into.
    ``cuts``: a model split into stages (one per worker, ``worker:i`` holding stage i): the
    activation bytes crossing each cut per step, stage i to i+1, forward (their gradients
    come back as many); ``label_bytes``: the labels stage 0 reads and the last stage's loss
    needs, sent with the forward pass. ``value_bytes``: the bytes of one of the model's
    values (4: float32; 8: float64, which 16- and 8-bit messages send as 2 and 1).
    ``sparse``: the bytes of one replica's sparse gradients (an embedding's rows and their
    indices, as sent), which TF all-gathers (``SPARSE_GATHERS``) instead of all-reducing.
    ``ps_sparse``: {PS task: (the bytes of the variables it holds whose gradients are sparse,
    an embedding's table, which a worker's step pulls whole; the bytes of their rows and
    indices the step pushes back)}; ``ps_shares`` then share the other variables' bytes.
    ``steps_per_call``: the steps of each call a worker runs (``steps_per_execution``)."""

    strategy: str
    workers: int
    model_bytes: float
    compute: float
    hosts: dict[str, str]
    links: dict[str, Link] = field(default_factory=dict)
    ps: int = 0
    ps_shares: dict[str, float] = field(default_factory=dict)
    ps_variables: dict[str, int] = field(default_factory=dict)
    tensors: int = 1
    bits: int = 32
    global_batch_size: int = 0
    input: float = 0.0
    other: float = 0.0
    cores: int | None = None
    compute_workers: int = 1
    average_every: int = 1
    loopback: Link | None = None
    packs: int = 1
    pauses: float = 0.0
    cuts: tuple[float, ...] = ()
    label_bytes: float = 0.0
    value_bytes: float = 4.0
    sparse: float = 0.0
    ps_sparse: dict[str, tuple[float, float]] = field(default_factory=dict)
    steps_per_call: int = 10
