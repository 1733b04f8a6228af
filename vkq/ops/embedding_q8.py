"""embedding_q8rows: an embedding table as int8 rows with a float32 scale per row.

  embedding_q8rows(ids int32 (*S), table int8 (V, H) constant, scale float32 (V,) constant)
                                                                     -> float32 (*S, H)
      out[..., :] = float32(table[id, :]) * scale[id]      (one float32 multiply per element)

A decoder's token embedding (SmolLM2: 49152 x 576, tied to its lm_head) as a quarter of the float
table's bytes. vkq.quantizer.quantize_rows gives the rows the int8 values and scales that the
linear-only schemes give the same matrix as a linear weight, so a table tied to its lm_head and
that lm_head's weight are one constant of the program (vkq.lower keeps equal constants once).
vkq.lower(..., int8_embeddings=True) makes this op (vkq/passes/int8_embeddings.py).

The reference raises ValueError naming an id outside [0, V), as torch's embedding raises; the
kernel clamps the id into the table, so that no read leaves the buffer.

On the device (shaders/embedding_q8rows.comp) the table is packed by build() into rows of
ceil(H / 4) int32 words, Int8x4 (value j of a row at byte j % 4 of the row's word j // 4; a row
padded to whole words with zero bytes): the row-major ROW packing of the table padded to H rounded
up to 4 (vkq.packing). An invocation writes blocks of 4 consecutive output floats as one vec4;
where H % 4 == 0 a block is one table word and one scale. Exact on every device: an int8 value is
exact in float32 and the product is one correctly rounded IEEE multiply.
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..registry import register_op
from ..vkinfo import DeviceLimit

LOCAL = 64      # workgroup width
PER = 4         # vec4 blocks an invocation
# the kernel splits output indices with div_exact (shaders/include/common.glsl), exact below 2^30
MAX_OUTPUT = 1 << 30


def _check(table, scale) -> tuple[np.ndarray, np.ndarray]:
    table, scale = np.asarray(table), np.asarray(scale)
    if table.dtype != np.int8 or table.ndim != 2 or scale.shape != table.shape[:1]:
        raise ValueError(f"embedding_q8rows takes an int8 table (V, H) and float32 scales (V,), "
                         f"got {table.dtype} {table.shape} and {scale.dtype} {scale.shape}")
    return table, scale.astype(np.float32, copy=False)


def embedding_q8rows(ids, table, scale) -> np.ndarray:
    """float32(table[id, :]) * scale[id] for every id of ids (any shape): (*ids.shape, H)."""
    table, scale = _check(table, scale)
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise ValueError(f"embedding_q8rows: ids must be integers, got {ids.dtype}")
    rows = table.shape[0]
    bad = (ids < 0) | (ids >= rows)
    if bad.any():
        raise ValueError(f"embedding_q8rows: id {int(ids[bad].reshape(-1)[0])} is outside the table's "
                         f"rows [0, {rows})")
    return table[ids].astype(np.float32) * scale[ids][..., None]


def pack_rows(table) -> np.ndarray:
    """int8 (V, H) -> the kernel's int32 words: each row ceil(H / 4) words, value j at byte j % 4
    of word j // 4, zero bytes after the row's last value (then zero words to a whole ivec4)."""
    table = np.asarray(table)
    v, h = table.shape
    padded = np.zeros((v, -(-h // 4) * 4), np.int8)
    padded[:, :h] = table
    return packing.pack(padded, "ROW")


def _decline(node, tensors):
    ids, table, scale = (tensors[t] for t in node.inputs)
    out = tensors[node.outputs[0]]
    if ids.dtype != "int32" or table.dtype != "int8" or len(table.shape) != 2 or scale.dtype != "float32" \
            or tuple(scale.shape) != tuple(table.shape[:1]) or out.dtype != "float32":
        return (f"embedding_q8rows: {ids.dtype} ids into a {table.dtype} table {table.shape} with {scale.dtype} "
                f"scales {scale.shape} -> {out.dtype} (the kernel takes int32 ids, an int8 (V, H) table, float32 (V,) "
                f"scales)")
    return None


def _build(ctx, node):
    ids, table, scale = node.inputs
    out = node.outputs[0]
    rows, h = ctx.spec(table).shape
    shape = ctx.spec(out).shape
    n = int(np.prod(shape, dtype=np.int64))
    if tuple(shape) != tuple(ctx.spec(ids).shape) + (h,):
        raise ValueError(f"{node.name}: ids {ctx.spec(ids).shape} into a table {(rows, h)} give "
                         f"{tuple(ctx.spec(ids).shape) + (h,)}, not {shape}")
    if n == 0:
        return []
    if n >= MAX_OUTPUT:
        raise DeviceLimit(f"{node.name}: {n} output values (the kernel indexes fewer than {MAX_OUTPUT})")
    blocks = -(-n // 4)
    buffers = [ctx.const_buffer(pack_rows(ctx.constant(table))), ctx.buffer(ids), ctx.buffer(scale), ctx.buffer(out)]
    return [ctx.device.dispatch("embedding_q8rows", buffers, grid_1d(-(-blocks // PER), LOCAL), local=(LOCAL,),
                                spec=(PER, int(h % 4 == 0)), push=(n, h, -(-h // 4), rows, n // h))]


@register_op
class EmbeddingQ8Rows:
    """Rows of an int8 table by int32 ids, each times its float32 scale (a decoder's token
    embedding stored as int8: tied to the lm_head, the same constant as its weight)."""
    name = "embedding_q8rows"
    shaders = ("embedding_q8rows",)
    layouts = packing.ALL_LAYOUTS      # (the table is a constant build() packs itself)
    reference = staticmethod(embedding_q8rows)
    build = staticmethod(_build)
    decline = staticmethod(_decline)
