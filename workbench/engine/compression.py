"""Gradient communication at 32, 16 or 8 bits: the all-reduce a synchronous step runs,
taken over from Keras so that it can be timed (the step anatomy's "communication") and,
with ``train(compression=...)``, compressed. TF's collectives have no compression of their
own (``CommunicationOptions`` has only packing, timeout and implementation).

- ``None``: float32 (the gradients' own dtype), summed with one batched all-reduce, as
  Keras would;
- ``"fp16"`` / ``"bf16"``: cast before the all-reduce, summed in 16 bits, cast back after
  (Horovod's ``Compression.fp16``);
- ``"int8"``: every tensor quantized with its own scale (max |value| / 127) after adding
  the error the last quantization left (error feedback: what rounding drops in one step is
  sent in a later one, so the sum of what is sent follows the sum of the gradients). A sum
  of int8 values overflows, so the quantized tensors are *gathered* (int8 packed four to an
  int32, the collectives' smallest type, with the float32 scales beside them) and each worker
  sums the dequantized contributions itself. With 2 workers an all-gather moves the same
  bytes per worker as an all-reduce of the same tensors.

``bytes`` is counted from the tensors actually handed to the collectives, in the step's
own graph: float32 = 4 bytes per value, fp16 and bf16 = 2, int8 = 1 (padded to a multiple
of 4) plus 4 per tensor for its scale.

``codec`` is the seconds the step spent on its CPU casting or quantizing before the
collectives and casting back or dequantizing after them, read with ``tf.timestamp`` like
the step's anatomy: the anatomy counts them as compute, not communication (8-bit messages of
a 4 MB model: 18 ms a step on an idle 2-core machine, both workers' together; 5.5-10 ms a
worker alone on a core on the bed, ``costmodel.CODEC``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from workbench.engine.step import after, gated

if TYPE_CHECKING:
    import tensorflow as tf



def _bytes(tensors):
    """The bytes of ``tensors`` as the collectives take them: a sparse gradient
    (``IndexedSlices``: an embedding's) its rows and their indices, which TF all-gathers
    (``cross_device_utils.all_reduce_indexed_slices``), not its dense shape."""
    import tensorflow as tf

    parts = [p for t in tensors for p in ((t.values, t.indices) if isinstance(t, tf.IndexedSlices) else (t,))]
    return tf.add_n([tf.cast(tf.size(t), tf.float32) * t.dtype.size for t in parts])


def sparse_gradients(tensors: list, variables: list) -> list[dict]:
    """``{"variable", "bytes"}`` of each gradient in ``tensors`` that is sparse (an
    embedding's ``IndexedSlices``), as traced: its rows and indices, the bytes one replica
    hands TF's all-gathers per step (None where its rows are not known when traced). The
    engine reports them once (``placement`` event's companion, ``sparse_gradients``): the
    cost model all-gathers them instead of all-reducing their variables' dense bytes."""
    import tensorflow as tf

    out = []
    for t, v in zip(tensors, variables):
        if isinstance(t, tf.IndexedSlices):
            rows, width = t.indices.shape[0], t.values.shape[1:].num_elements()
            size = None if rows is None or width is None else rows * (width * t.values.dtype.size + t.indices.dtype.size)
            out.append({"variable": getattr(v, "path", None) or v.name, "bytes": size})
    return out


def _clock(deps):
    """A clock read after every tensor in ``deps``."""
    import tensorflow as tf

    return after(deps, tf.timestamp)


def _gate(clock, tensors):
    """``tensors`` (one op) that run only after ``clock`` was read."""
    return after(clock, lambda: gated(tensors))


def reducer(kind: str | None, variables: list, op: str = "SUM",
            bytes_per_pack: int = 0) -> Callable[[list], tuple[list, tf.Tensor, tf.Tensor]]:
    """``reduce(tensors) -> (summed tensors, bytes handed to the collectives, codec seconds)``,
    run in a replica context. ``variables``: the tensors' shapes and dtypes (int8 keeps one error
    feedback variable per tensor, created now, outside any ``tf.function``). ``op``: "SUM"
    or "MEAN" over the replicas. ``bytes_per_pack``: TF's packing of the all-reduce (32 and
    16 bits): the tensors, last first, each pack taking tensors until it holds more than that
    many bytes as sent, one all-reduce each (``cross_device_utils.group_by_size``; 0: one pack)."""
    import tensorflow as tf

    reduce_op = getattr(tf.distribute.ReduceOp, op)
    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=bytes_per_pack)

    def replicas():
        return tf.cast(tf.distribute.get_replica_context().num_replicas_in_sync, tf.float32)

    if kind is None:
        def reduce(tensors):
            ctx = tf.distribute.get_replica_context()
            reduce.sparse = sparse_gradients(tensors, variables)
            return list(ctx.all_reduce(reduce_op, list(tensors), options)), _bytes(tensors), tf.constant(0.0, tf.float64)
        return reduce

    if kind in ("fp16", "bf16"):
        low = tf.float16 if kind == "fp16" else tf.bfloat16

        def reduce(tensors):
            ctx = tf.distribute.get_replica_context()
            began = _clock(tensors)
            sent = [tf.cast(t, low) for t in _gate(began, tensors)]
            reduce.sparse = sparse_gradients(sent, variables)
            cast = _clock(sent)
            summed = ctx.all_reduce(reduce_op, _gate(cast, sent), options)
            arrived = _clock(summed)
            out = [tf.cast(s, t.dtype) for s, t in zip(_gate(arrived, summed), tensors)]
            ended = _clock(out)  # read before the caller's next clock: its outputs wait for it
            return _gate(ended, out), _bytes(sent), (cast - began) + (ended - arrived)
        return reduce

    if kind != "int8":
        raise ValueError(f"unknown compression {kind!r}")
    errors = [tf.Variable(tf.zeros(tuple(v.shape), tf.float32), trainable=False, name="int8_error")
              for v in variables]
    sizes = [int(tf.size(e)) for e in errors]
    total = sum(sizes)
    padded = -(-total // 4) * 4

    def reduce(tensors):
        ctx = tf.distribute.get_replica_context()
        began = _clock(tensors)
        values = [tf.cast(t, tf.float32) + e for t, e in zip(_gate(began, tensors), errors)]
        scales = tf.stack([tf.maximum(tf.reduce_max(tf.abs(v)), 1e-30) / 127.0 for v in values])
        qs = [tf.cast(tf.clip_by_value(tf.round(v / scales[i]), -127, 127), tf.int8) for i, v in enumerate(values)]
        updates = [e.assign(v - tf.cast(q, tf.float32) * scales[i])
                   for i, (e, v, q) in enumerate(zip(errors, values, qs))]
        flat = tf.concat([tf.reshape(q, [-1]) for q in qs] + [tf.zeros([padded - total], tf.int8)], 0)
        packed = tf.bitcast(tf.reshape(flat, [-1, 4]), tf.int32)  # [padded / 4]
        quantized = _clock([packed, scales] + updates)
        with tf.control_dependencies([quantized]):
            gathered = ctx.all_gather(packed[None], axis=0)  # [workers, padded / 4]
            all_scales = ctx.all_gather(scales[None], axis=0)  # [workers, tensors]
        arrived = _clock([gathered, all_scales])
        gathered, all_scales = _gate(arrived, [gathered, all_scales])
        q_all = tf.cast(tf.reshape(tf.bitcast(gathered, tf.int8), [-1, padded])[:, :total], tf.float32)
        out, offset = [], 0
        for i, (t, size) in enumerate(zip(tensors, sizes)):
            part = q_all[:, offset:offset + size] * all_scales[:, i:i + 1]
            summed = tf.reduce_sum(part, axis=0)
            if op == "MEAN":
                summed = summed / replicas()
            out.append(tf.cast(tf.reshape(summed, tf.shape(t)), t.dtype))
            offset += size
        ended = _clock(out)
        return _gate(ended, out), _bytes([packed, scales]), (quantized - began) + (ended - arrived)
    return reduce
