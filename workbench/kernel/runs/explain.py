"""``run.explain()`` and ``wb.predict(...)``: the cost model (``common/costmodel.py``) beside
what a run measured, and for runs not made.

A run is turned into the model's ``Scenario``: its strategy and topology, its model's
trainable bytes (from the placement its tasks reported) at its messages' precision, where
each task ran, each link it crossed (the rate the test bed set, the latency and framing
measured here) and what it measured of its own steps outside communication (compute,
input, waiting, the rest) past its first two calls (``warm``). The model predicts the
communication, the bytes on each link, each link's use and each parameter server's load;
``explain`` puts each figure beside the run's own measurement. What the model takes from
the run as it is, and what it predicts, is said in each row's ``source``.

``predict(calibration, workers=8, link="1gbit", ...)`` takes a finished run as the
calibration of compute (seconds per example and parameter of one worker, with the cores it
shared) and predicts a run of another shape. It refuses what one run cannot tell: another
device's compute.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workbench.common import costmodel, figures, strategies, validate
from workbench.common import placement as placement_of
from workbench.common.anatomy import traced
from workbench.common.costmodel import Link, without_pulls
from workbench.common.explanation import Explanation
from workbench.common.placement import (  # noqa: F401 - as explain.* too (calibrate, walkthrough 12)
    DENSE_BITS, sparse_bytes, tensor_bytes, trainable_bytes, value_bytes)
from workbench.common.rates import parse_rate
from workbench.errors import invalid
from workbench.store import calibration as stored_paths  # not predict()'s calibration run

if TYPE_CHECKING:
    import pandas as pd

# Links as measured on these machines (2 cores; bench/predict.py, bench/links.py):
# - a shaped link carries this share of its rate as payload (1448 of 1514 bytes a frame,
#   0.956; bench/links.py read 0.957 at 20 Mbit, 0.920 at 100 Mbit, 0.846 at 1 Gbit);
# - without a calibration of this machine (``wb.calibrate_links``), TF's collectives pay
#   2 ms per message between a bed's hosts and 1.5 ms over one machine's loopback, the
#   engines sharing 2 cores (a 10 KB all-reduce across 2, 3, 4 hosts: 4.4, 6.9, 12.6 ms for
#   2, 4, 6 messages; 2 local engines: 3.2 ms for 2), and gRPC moves 0.8 GB/s (DESIGN.md);
# - a calibrated path takes its measured alpha and CPU per byte; a shaped link the bed's
#   unshaped one's, its CPU per byte paid SHAPED_CPU_PASSES times in series with the wire
#   (9 rings at 100 Mbit, 2-4 hosts, 0.3-4 MB: median measured / predicted 0.985 at 1 pass,
#   1.01 at 1.5, 1.04 at 2; docs/performance.md: the whole grid).
SHAPED_EFFICIENCY = 0.95
SHAPED_CPU_PASSES = 1
LINK_ALPHA = 2.0e-3
LOOPBACK = Link(bytes_per_s=0.8e9, alpha=1.5e-3)
UNSHAPED_VETH = Link(bytes_per_s=0.8e9, alpha=2.0e-3)
BITS = {None: 32, "fp16": 16, "bf16": 16, "int8": 8}


def measured_paths() -> dict[str, Link]:
    """{"loopback", "veth": the path as this machine's calibration measured it}, read once
    (a run's explanation, redrawn every second on its dashboard, reads it once)."""
    return {name: Link(bytes_per_s=math.inf, alpha=float(f["alpha_s"]), cpu_per_byte=float(f["cpu_s_per_byte"]))
            for name, f in stored_paths.read().items()
            if all(float(f.get(k) or 0) > 0 for k in ("alpha_s", "cpu_s_per_byte"))}


def link_of(rate: int | None, measured: dict[str, Link] | None = None) -> Link:
    """A bed host's link at ``rate`` bits/s (None: unshaped), as the model takes it
    (``measured``: ``measured_paths()``, read here when not given)."""
    veth = (measured_paths() if measured is None else measured).get("veth")
    if rate is None:
        return veth or UNSHAPED_VETH
    if veth is not None:
        return Link(bytes_per_s=rate / 8 * SHAPED_EFFICIENCY, alpha=veth.alpha, rate=int(rate),
                    cpu_per_byte=SHAPED_CPU_PASSES * veth.cpu_per_byte)
    return Link(bytes_per_s=rate / 8 * SHAPED_EFFICIENCY, alpha=LINK_ALPHA, rate=int(rate))


def loopback(measured: dict[str, Link] | None = None) -> Link:
    """One machine's loopback, as the model takes it: calibrated, else ``LOOPBACK``."""
    return (measured_paths() if measured is None else measured).get("loopback") or LOOPBACK


# -- what a run is, as the model needs it ---------------------------------------------------

def _hosts(run: Any) -> dict[str, str]:
    return {t.name: (getattr(t, "host", None) or "local") for t in run.tasks}


def link_rates(run: Any) -> dict[str, int | None] | None:
    """{host: the rate its link had during the run} for a run on a test bed, else None."""
    watch = run.links
    if watch is not None and (state := watch.state(window=1e9)):
        return {h: s["rate"] for h, s in state.items()}
    rates = getattr(run, "link_rates", None)
    return rates() if callable(rates) else None


def warm(job: Any) -> int:
    """The first step the model's figures count, measured and predicted: past the newest
    attempt's first two calls, which trace the step (``anatomy.traced``; counted, a 40-step
    run's rest outside compute read 21 ms a step instead of 2.6). The anatomy starts there;
    steps/s and the links' bytes are read from the rows of the second call on
    (``timed_from``), whose stretch starts at that call's end or later."""
    return traced(job.first_step, job.steps_per_execution) + 1


def timed_from(job: Any) -> int:
    """The ``first_step`` of the rows a run's measured steps/s, link bytes and worker shares
    are read from (``figures.steady_stretch``: counted from the end of a step a fifth of the
    way through them, here the second call's end or later): ``warm``'s steps."""
    return job.first_step + (job.steps_per_execution or 1)


def _parts(run: Any) -> dict[str, float] | None:
    """A worker's mean seconds per step in each part of the anatomy, over the run's steps
    after its first two calls (``warm``; each worker's weighed by its steps, as the model's
    figures are: a parameter server's faster worker makes more of them); None without the
    anatomy, or before a step past those calls."""
    table = run.anatomy(skip=traced(run.job.first_step, run.job.steps_per_execution))
    if table.empty:
        return None

    def mean(x: pd.Series) -> float:  # over the workers that measured it, each by its steps
        known = x.notna()
        return float((x[known] * table.steps[known]).sum() / table.steps[known].sum()) if known.any() else math.nan

    out = {p: mean(table[p] * table.step_time) for p in ("input", "compute", "communication", "waiting", "other")}
    out["step_time"] = mean(table.step_time)
    out["bytes_per_step"] = mean(table.bytes_per_step) if "bytes_per_step" in table else math.nan
    return out


def _unexplained(run: Any) -> Exception:
    """The error for a run the model cannot read yet: no steps, or no anatomy."""
    return invalid("run", run.id, "a run that measured its steps' anatomy (anatomy=True, at least one step "
                   "past its first two calls)", f"Run {run.id} has {'no steps' if not run.step else 'no anatomy'}.")


def scenario(run: Any, parts: dict[str, float] | None = None, rate: float | None = None) -> costmodel.Scenario:
    """``run`` as the model's ``Scenario``: its compute, input, waiting and the rest measured
    (waiting counted with the rest: imbalance between workers, which the model does not
    predict), its communication left to the model. ``parts`` (``_parts``) and ``rate`` (its
    measured steps/s): when the caller has them already (``explain``), not read again."""
    job = run.job
    spec = strategies.spec(job.strategy)
    parts = _parts(run) if parts is None else parts
    if parts is None or not run.step:
        raise _unexplained(run)
    placement = run.placement
    bits = BITS.get(job.compression, 32)
    model_bytes, tensors = trainable_bytes(placement, split=spec.splits_model, bits=bits)
    hosts = _hosts(run)
    rates = link_rates(run)
    measured, (ps_shares, ps_variables, ps_sparse) = measured_paths(), placement_of.ps_tasks(placement)
    links = {h: link_of(r, measured) for h, r in rates.items()} if rates else {}
    if not links:  # one machine: every task on it, talking over its loopback
        hosts = dict.fromkeys(hosts, "local")
    # the pauses between calls (checkpoints, evaluations, the chief's dispatch) count in a
    # run's steps/s but in no step's time: measured, as the rest outside communication
    per_worker = job.workers if spec.has_ps else 1
    if rate is None:
        rate = figures.history_figures(run.history, job.global_batch_size, timed_from(job))["steps_per_s"]
    pauses = max(0.0, (per_worker / rate - parts["step_time"]) / per_worker) if rate == rate and rate > 0 else 0.0
    s = costmodel.Scenario(
        strategy=job.strategy, workers=job.workers, model_bytes=model_bytes, compute=parts["compute"], hosts=hosts,
        links=links, ps=job.ps, ps_shares=ps_shares, ps_variables=ps_variables, ps_sparse=ps_sparse, tensors=tensors,
        packs=placement_of.packs(placement, job.bytes_per_pack, bits), bits=bits, value_bytes=value_bytes(placement),
        sparse=sparse_bytes(placement, bits), global_batch_size=job.global_batch_size,
        input=parts["input"], other=parts["other"] + parts["waiting"], pauses=pauses, cores=os.cpu_count(),
        compute_workers=job.workers, average_every=getattr(job, "average_every", 1) or 1,
        loopback=loopback(measured), steps_per_call=job.steps_per_execution or 1)
    if spec.has_ps:  # the anatomy counts a worker's pulls of the variables in its compute
        s = replace(s, compute=without_pulls(s, parts["compute"]))
    if spec.splits_model:  # the stages compute one after the other: one step's compute, as timed
        s = replace(s, cuts=_cuts(job.model, job.global_batch_size), label_bytes=_label_bytes(job),
                    compute_workers=1)
    return s


def _cuts(model: Any, batch: int) -> tuple[float, ...]:
    """The activation bytes crossing each cut of a split model per step, forward (float32)."""
    return tuple(costmodel.cut_bytes(batch, w) / 2 for w in model.cut_widths())


def _label_bytes(job: Any) -> float:
    """The bytes of one step's labels (sent from the first stage, which reads the batches,
    to the last, which computes the loss); 0 when the data is not arrays the model knows."""
    y = getattr(job.data, "y_train", None)
    return float(job.global_batch_size * y[:1].nbytes) if y is not None and len(y) else 0.0


def explain(run: Any) -> Explanation:
    """``run.explain()``: see the module's docstring."""
    # one reading of each: a live dashboard redraws this every second
    parts, h, first_step = _parts(run), run.history, timed_from(run.job)  # past the tracing calls
    if parts is None:  # not read again below: a live run's anatomy can arrive in between (a dashboard crashed so)
        raise _unexplained(run)
    measured_rate = figures.history_figures(h, run.job.global_batch_size, first_step)["steps_per_s"]
    s = scenario(run, parts, measured_rate)
    p = costmodel.predict(s)
    rows = [("steps/s", p["steps_per_s"], measured_rate, "model"),
            ("step time per worker (ms)", p["step_time"] * 1e3, parts["step_time"] * 1e3, "model"),
            ("compute per step (ms)", p["compute_time"] * 1e3, parts["compute"] * 1e3,
             "model: pulls of the variables" if strategies.spec(s.strategy).has_ps else "measured (the model's input)"),
            ("communication per step (ms)", p["comm_time"] * 1e3, parts["communication"] * 1e3, "model"),
            ("input, waiting and other per step (ms)", (s.input + s.other) * 1e3,
             (s.input + s.other) * 1e3, "measured (the model's input)"),
            ("pauses between calls per step (ms)", s.pauses * 1e3, s.pauses * 1e3,
             "measured (the model's input): checkpoints, evaluations, dispatch")]
    if costmodel.ring(s.strategy) and s.workers > 1:
        sent = costmodel.message_bytes(s.model_bytes, s.bits, s.tensors, s.value_bytes) + s.sparse
        rows.append(("bytes handed to the all-reduce per step", sent, parts["bytes_per_step"],
                     "model" + (f" (sparse gradients: {s.sparse:,.0f} gathered)" if s.sparse else "")))
    if s.cuts:
        rows.append(("bytes across the cuts per step (activations, their gradients)", 2 * sum(s.cuts),
                     parts["bytes_per_step"], "model: 2 x batch x width x 4 per cut"))
    stretch = figures.steady_stretch(h, first_step) if len(h) else None
    steady = _steady(h, stretch)
    # each link's bytes over the stretch steps/s counts (row by row where its samples end early)
    moved = run.links.over_stretch(h, first_step, stretch) if run.links is not None and stretch else {}
    shares = _shares(s, p, h, first_step, stretch)
    for host, b in p["wire_bytes_per_step"].items():
        if host == "local":
            continue
        x, note = shares.get(host, (1.0, ""))
        for way in ("tx", "rx"):
            measured = moved[host][way] if host in moved else _median(steady, f"link_{way}_bytes_{host}")
            rows.append((f"{host} link bytes {'sent' if way == 'tx' else 'received'} per step", b[way] * x, measured,
                         f"model: {p['bytes_per_step'][host][way] * x:,.0f} payload, in frames with ACKs{note}"))
        if host in p["link_util"]:
            rows.append((f"{host} link use", p["link_util"][host] * x, _median(steady, f"link_util_{host}"),
                         "model" + note))
    for ps, load in p["ps_load"].items():
        measured, host, source = None, s.hosts.get(ps), "model"
        if host in moved or (host and f"link_tx_bytes_{host}" in steady):  # as its link's counters read it
            measured = (moved[host]["tx"] if host in moved else _median(steady, f"link_tx_bytes_{host}")) * measured_rate
            load *= p["wire_bytes_per_step"][host]["tx"] / (p["bytes_per_step"][host]["tx"] or 1.0)
            source = "model: in frames with ACKs"
        rows.append((f"{ps} load (bytes/s pulled)", load, measured, source))
    import pandas as pd

    table = pd.DataFrame(rows, columns=["figure", "predicted", "measured", "source"])
    table["ratio"] = [m / q if m is not None and q and math.isfinite(m) and math.isfinite(q) else float("nan")
                      for q, m in zip(table.predicted, table.measured)]
    table = table[["figure", "predicted", "measured", "ratio", "source"]]
    ratio = measured_rate / p["steps_per_s"] if p["steps_per_s"] else float("nan")
    sentence = f"{p['why']}, measured {measured_rate:.3g} ({ratio:.2f})."
    return Explanation(table, sentence, p, f"run {run.id}: {s.strategy}, {s.workers} worker(s), {s.ps} PS"
                       + _paths_note(s))


def _paths_note(s: costmodel.Scenario, latency: float | None = None) -> str:
    """Where the paths' latency (and CPU per byte) come from, for each kind of path crossed
    (a bed's veth, a host's loopback): this machine's calibration (a CPU per byte:
    ``link_of``), the model's constants or ``wb.predict(latency=)``; "" when nothing crosses."""
    if not (crossed := costmodel.paths(s)):
        return ""
    if latency is not None:
        return f"; latency {latency * 1e3:g} ms a message, as asked"
    calibrated: dict[str, bool] = {}
    for h in sorted(crossed, key=lambda h: not h.endswith(costmodel.LO)):  # loopback first
        kind = "loopback" if h.endswith(costmodel.LO) else "veth"
        calibrated[kind] = calibrated.get(kind, False) or costmodel.path_link(s, h).cpu_per_byte > 0
    said = {True: " latency and CPU per byte: this machine's wb.calibrate_links",
            False: " latency: the model's constant (wb.calibrate_links(cluster) measures this machine's)"}
    return "".join(f"; {' and '.join(k for k, c in calibrated.items() if c == known)}{said[known]}"
                   for known in (True, False) if known in calibrated.values())


def _shares(s: costmodel.Scenario, p: dict[str, Any], h: pd.DataFrame, first_step: int,
            stretch: tuple | None) -> dict[str, tuple[float, str]]:
    """{host of workers only: (its workers' share of the steps ``h`` measured over the share
    the model ``p`` predicted, said)} under a parameter server, whose workers each move their
    own steps' bytes: a link's bytes per step are then checked as bytes per worker step,
    whatever the shares. ``stretch``: ``figures.steady_stretch``'s of ``h``."""
    if not strategies.spec(s.strategy).has_ps or stretch is None:
        return {}
    shares, predicted = figures.worker_shares(h, first_step, stretch), p.get("worker_shares") or {}
    out = {}
    for host in set(s.hosts.values()):
        tasks = [t for t, where in s.hosts.items() if where == host]
        if all(t.startswith("worker:") and t in shares for t in tasks):
            x = sum(shares[t] for t in tasks) / sum(predicted.get(t, 1 / s.workers) for t in tasks)
            out[host] = (x, f"; x {x:.2f}, its worker's share of the steps, measured over predicted")
    return out


def _steady(h: pd.DataFrame, stretch: tuple | None) -> pd.DataFrame:
    """The rows of the stretch the run's steps/s counts (``figures.steady_stretch``'s ``stretch``)."""
    if stretch is None:
        return h
    first, _, last, _ = stretch
    return h[(h.step > first) & (h.step <= last)]


def _spread(base: costmodel.Scenario, k: int) -> dict[str, int]:
    """{PS task: its variables} for ``k`` tasks: the calibration's own at its ``k``, else its
    variables (a sharded one's shards each) dealt round-robin, as TF places them."""
    total = sum(base.ps_variables.values())
    return dict(base.ps_variables) if k == base.ps else {f"ps:{j}": total // k + (j < total % k) for j in range(k)}


def _tables(base: costmodel.Scenario, k: int, rows: float) -> dict[str, tuple[float, float]]:
    """``Scenario.ps_sparse`` for ``k`` PS tasks: the calibration's tables on task j mod k
    (TF deals variables round-robin in their order: a guess), rows a step x ``rows``."""
    out: dict[str, tuple[float, float]] = {}
    for task, (table, pushed) in base.ps_sparse.items():
        j = f"ps:{int(task.split(':')[1]) % k}"
        out[j] = tuple(a + b for a, b in zip(out.get(j, (0.0, 0.0)), (table, pushed * rows)))
    return out


def _median(df: pd.DataFrame, col: str) -> float | None:
    return float(df[col].median()) if col in df and df[col].notna().any() else None


# -- runs not made --------------------------------------------------------------------------

AS_CALIBRATED = "as calibrated"


def predict(calibration: Any, *, workers: int | None = None, ps: int | None = None, link: str | None = AS_CALIBRATED,
            model_bytes: float | None = None, compression: str | None = AS_CALIBRATED,
            global_batch_size: int | None = None, cores: int | None | str = AS_CALIBRATED,
            latency: float | None = None, bytes_per_pack: int | None = None, device: str = "cpu") -> Explanation:
    """``wb.predict(run, workers=8, link="1gbit", ...)``: the figures of a run like
    ``calibration`` (a finished run that measured its anatomy) but with another number of
    ``workers`` or ``ps`` tasks, another ``link`` rate for every host ("1gbit"; None:
    unshaped), another ``model_bytes`` (trainable bytes), ``compression`` (None, "fp16",
    "bf16", "int8") or ``global_batch_size``. Each worker runs on a host of its own, each
    PS task too; ``cores``: the cores all hosts share (default: as the calibration ran, on
    this machine; None: each host its own, as on real machines). Compute scales with the
    examples and parameters per worker (the calibration's seconds per example and parameter,
    at its share of the cores), its messages' codec apart (``costmodel.codec_time``).
    ``latency``: seconds each message waits before its bytes, on every link (default: this
    machine's ``wb.calibrate_links``, else ``LINK_ALPHA``; a data centre's RDMA or NCCL paths
    take tens of microseconds). ``bytes_per_pack``: the all-reduce's packing (None: as
    calibrated), the calibration's tensors scaled to ``model_bytes``."""
    if device != "cpu":
        raise invalid("device", device, "'cpu': the calibration measured this machine's CPU; a GPU's compute "
                      "cannot be derived from it (calibrate with a run on that GPU)")
    base = scenario(calibration)
    spec = strategies.spec(base.strategy)
    n = base.workers if workers is None else validate.positive_int("workers", workers)
    k = base.ps if ps is None else validate.positive_int("ps", ps, minimum=0)
    validate.topology(spec, n, k)
    if spec.splits_model and n != base.workers:
        raise invalid("workers", workers, f"{base.workers}: a split model has a worker per stage (its cuts are the "
                      "calibration's model's; predict another split from a run of that split)")
    bits = base.bits if compression == AS_CALIBRATED else BITS.get(compression)
    if bits is None:
        raise invalid("compression", compression, "None, 'fp16', 'bf16' or 'int8'")
    if bits != 32 and not spec.compressible:
        raise invalid("compression", compression, f"None with strategy={base.strategy!r} (nothing is all-reduced)")
    if base.sparse and bits != base.bits:
        raise invalid("compression", compression, f"the calibration's ({calibration.job.compression!r}): its model's "
                      "sparse gradients (an embedding's rows and indices) were measured at that precision only")
    size = base.model_bytes if model_bytes is None else validate.positive_float("model_bytes", model_bytes)
    batch = base.global_batch_size if global_batch_size is None else \
        validate.positive_int("global_batch_size", global_batch_size)
    alpha = None if latency is None else validate.positive_float("latency", latency)
    if bytes_per_pack is None:
        bytes_per_pack = calibration.job.bytes_per_pack
    else:
        validate.positive_int("bytes_per_pack", bytes_per_pack, minimum=0)
        if bytes_per_pack and not spec.compressible:
            raise invalid("bytes_per_pack", bytes_per_pack, f"0 with strategy={base.strategy!r} (nothing is "
                          "all-reduced)")
        if bytes_per_pack and bits == 8:
            raise invalid("bytes_per_pack", bytes_per_pack, "0 with 8-bit messages (gathered as one tensor, "
                          "not all-reduced in packs)")
    scale = size / base.model_bytes if base.model_bytes else 1.0  # a model of sparse gradients only: as it is
    packs = placement_of.packs(calibration.placement, bytes_per_pack, bits, scale)
    shared = base.cores if cores == AS_CALIBRATED else cores
    if shared is not None:
        shared = validate.positive_int("cores", shared)
    # one worker's compute alone, per example and parameter, its codec apart, then at the new shape; its
    # input and other (Python, dispatch: CPU too) alone, then as the new shape's workers share the cores
    crowded = max(1.0, base.compute_workers / base.cores) if base.cores else 1.0
    busy = (max(1.0, n / shared) if shared else 1.0) / crowded
    codec = costmodel.codec_time(base.model_bytes, base.bits, base.tensors, base.value_bytes)
    short = base.compute / crowded < codec  # the codec's estimate exceeds what the calibration computed
    alone = max(0.0, base.compute / crowded - codec)
    per_worker = batch / n if spec.synchronous else batch
    base_per_worker = base.global_batch_size / base.workers if spec.synchronous else base.global_batch_size
    compute = alone * (per_worker / base_per_worker) * scale + costmodel.codec_time(size, bits, base.tensors,
                                                                                     base.value_bytes)
    hosts = {f"worker:{i}": f"w{i}" for i in range(n)}
    hosts.update({f"ps:{j}": f"p{j}" for j in range(k)})
    if spec.has_ps:
        hosts["chief:0"] = "c0"
    measured = measured_paths()
    if link == AS_CALIBRATED and not base.links:  # calibrated on one machine: predicted on one machine
        hosts = dict.fromkeys(hosts, "local")
        host_link = {}
    else:
        rate = next(iter(base.links.values())).rate if link == AS_CALIBRATED else parse_rate(link, "link")
        host_link = {h: link_of(rate, measured) for h in set(hosts.values())}
    if alpha is not None:
        host_link = {h: replace(link, alpha=alpha) for h, link in host_link.items()}
    s = costmodel.Scenario(
        strategy=base.strategy, workers=n, model_bytes=size, compute=compute, hosts=hosts, links=host_link, ps=k,
        ps_shares=base.ps_shares if k == base.ps else {}, ps_variables=_spread(base, k),
        ps_sparse=_tables(base, k, per_worker / base_per_worker),
        tensors=base.tensors, packs=packs, bits=bits, value_bytes=base.value_bytes, global_batch_size=batch, input=base.input * busy,
        other=base.other * busy,
        pauses=base.pauses, cores=shared, compute_workers=1, average_every=base.average_every,
        loopback=loopback(measured) if alpha is None else replace(loopback(measured), alpha=alpha),
        cuts=tuple(c * batch / base.global_batch_size for c in base.cuts),
        sparse=base.sparse * per_worker / base_per_worker,  # a replica's rows: one per example it looks up
        label_bytes=base.label_bytes * batch / base.global_batch_size)
    p = costmodel.predict(s)
    one = costmodel.predict(costmodel.Scenario(
        strategy="single", workers=1, model_bytes=size, compute=alone * (batch / base_per_worker if spec.synchronous
                                                                      else 1) * scale,
        hosts={"worker:0": "local"}, global_batch_size=batch, input=base.input / crowded, other=base.other / crowded))
    examples = p["steps_per_s"] * batch
    speedup = examples / (one["steps_per_s"] * batch) if one["steps_per_s"] else float("nan")
    rows = [("steps/s", p["steps_per_s"]), ("examples/s", examples),
            ("speed-up over one worker with the same global batch", speedup),
            ("scaling efficiency (speed-up / workers)", speedup / n),
            ("step time per worker (ms)", p["step_time"] * 1e3), ("compute per step (ms)", p["compute_time"] * 1e3),
            ("communication per step (ms)", p["comm_time"] * 1e3)]
    for host, b in p["bytes_per_step"].items():
        if host != "local":
            rows.append((f"{host} link bytes per step", max(b.values()),
                         f"model: payload; {max(p['wire_bytes_per_step'][host].values()):,.0f} in frames with ACKs"))
    for host, u in p["link_util"].items():
        rows.append((f"{host} link use", u))
    for ps_task, load in p["ps_load"].items():
        rows.append((f"{ps_task} load (bytes/s pulled)", load))
    import pandas as pd

    table = pd.DataFrame([(r[0], r[1], float("nan"), float("nan"), r[2] if len(r) > 2 else "model") for r in rows],
                         columns=["figure", "predicted", "measured", "ratio", "source"])
    if not host_link:
        where = "one machine"
    else:
        rate = next(iter(host_link.values())).rate
        where = f"a host each, links at {rate / 1e6:g} Mbit/s" if rate else "a host each, links unshaped"
    cores_note = f", all sharing {shared} cores" if shared else ", each host its own cores"
    title = (f"predicted from run {calibration.id}: {s.strategy}, {n} worker(s), {k} PS, global batch {batch}, "
             f"{where}{cores_note}{_paths_note(s, alpha)}")
    if short:
        title += (f"; the calibration computed {base.compute / crowded * 1e3:.2f} ms a step, less than its "
                  f"{base.bits}-bit messages' codec alone ({codec * 1e3:.2f} ms, costmodel.CODEC): its compute "
                  "is taken as 0")
    return Explanation(table, p["why"] + ".", p, title)
