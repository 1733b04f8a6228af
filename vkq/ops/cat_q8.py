"""Concatenation of int8 tensors: cat_q8 (each input requantized to the output's qparams, exactly
a copy where they are equal), cat_q8_params (its attrs) and fold_cat_prefixes (the program
rewrite by which a copying cat reads its prefix from the cat that made it: DenseNet). It sat
beside the pools in vkq/ops/pool.py; a module of its own so that pool.py stays under 800 lines.

  cat_q8                  attrs dim, in_zps, multipliers, shifts, out_zp
                          out = concatenate(requantize(q_k - in_zps[k], m[k], s[k], out_zp))
"""
from __future__ import annotations

import numpy as np

from .. import packing
from ..device import grid_1d
from ..quant import quantize_multiplier, requant_tie_free, requantize
from ..registry import register_op
from .eltwise import IDENTITY, _check_zp, _requant_consts
from .pool import LOCAL


def cat_q8_params(inputs, out_scale, out_zp, dim=1) -> dict:
    """Attrs of cat_q8; inputs = [(scale, zero_point), ...] in order."""
    _check_zp(out_zp, *(zp for _, zp in inputs))
    pairs = [quantize_multiplier(float(sc) / float(out_scale)) for sc, _ in inputs]
    return {"dim": int(dim), "in_zps": [int(zp) for _, zp in inputs],
            "multipliers": [m for m, _ in pairs], "shifts": [s for _, s in pairs], "out_zp": int(out_zp)}


def _copies(node) -> bool:
    """A cat_q8 whose every input is copied (the output's qparams: no requantization)."""
    a = node.attrs
    return all((m, s) == IDENTITY and zp == a["out_zp"] for zp, m, s in zip(a["in_zps"], a["multipliers"], a["shifts"]))


def fold_cat_prefixes(program, keep=frozenset()) -> int:
    """cat_q8(a0, .., ak) where an earlier copying cat_q8 along the same dim made cat(a0, ..,
    a_{j-1}) -> cat_q8(that, a_j, .., ak), the longest such prefix: DenseNet's layers each
    concatenate every feature map before them (the quantizer shares one qparams across a cat,
    so they are copies), k + 1 dispatches a cat, 597 for DenseNet-121; now 2 a cat. The same
    bytes move; what goes is the dispatches (and the block of the earlier cat is read whole).
    Returns the cats rewritten."""
    made, rewritten = {}, 0
    for idx, node in enumerate(program.nodes):
        if node.op != "cat_q8" or not _copies(node):
            continue
        ins, rank = tuple(node.inputs), len(program.tensors[node.outputs[0]].shape)
        dim = node.attrs["dim"] % rank
        for j in range(len(ins) - 1, 1, -1):
            prev = made.get((dim, ins[:j]))
            if prev is not None:
                parts = [prev, *ins[j:]]
                out_zp = node.attrs["out_zp"]
                attrs = {**node.attrs, "in_zps": [out_zp] * len(parts), "multipliers": [IDENTITY[0]] * len(parts),
                         "shifts": [IDENTITY[1]] * len(parts)}
                program.nodes[idx] = type(node)("cat_q8", parts, list(node.outputs), attrs, name=node.name)
                rewritten += 1
                break
        made[(dim, ins)] = node.outputs[0]
    return rewritten


@register_op
class CatQ8:
    """Concatenation of int8 tensors along `dim`, each requantized to the output's qparams
    (exactly a copy when they are equal: M = 1). On the device one dispatch per input writes
    its part; 4W4C along channels moves whole blocks, other cases go byte by byte."""
    name = "cat_q8"
    shaders = ("cat_channels", "cat_generic")

    def reference(*qs, dim, in_zps, multipliers, shifts, out_zp):
        parts = [requantize(np.asarray(q).astype(np.int64) - zp, m, s, out_zp)
                 for q, zp, m, s in zip(qs, in_zps, multipliers, shifts)]
        return np.concatenate(parts, axis=dim)

    def build(ctx, node):
        a, so = node.attrs, ctx.spec(node.outputs[0])
        out_shape = packing.as_nchw(so.shape)
        dim4 = a["dim"] % len(so.shape) + 4 - len(so.shape)
        dst, steps, off = ctx.buffer(node.outputs[0]), [], 0
        parts = [i for i, t in enumerate(node.inputs) if 0 not in ctx.spec(t).shape]
        byte_dim = 1 if so.layout == "4W4C" else 3      # the dim a word's four bytes run along
        # cat_generic.comp INPUT: each input's words (padding included) are whole output words
        blocked = {"4W4C": (1, 3), "4H4W": (2, 3)}.get(so.layout)
        by_input = blocked is not None and all(
            packing.as_nchw(ctx.spec(node.inputs[i]).shape)[dim4] % (4 if dim4 in blocked else 1) == 0 for i in parts)
        for i, (t, zp, m, s) in enumerate(zip(node.inputs, a["in_zps"], a["multipliers"], a["shifts"])):
            si = ctx.spec(t)
            if i not in parts:
                continue        # an empty part (Phi-3's pass-through half of a full rotary) adds nothing
            if si.layout != so.layout:
                raise ValueError(f"{node.name}: input {t!r} is {si.layout}, the output {so.layout}")
            in_shape = packing.as_nchw(si.shape)
            requant = ["REQUANT"] if (m, s) != IDENTITY or zp != a["out_zp"] else None
            if so.layout == "4W4C" and dim4 == 1:
                n, c, h, w = out_shape
                c4_lo, c4_hi = off // 4, -(-(off + in_shape[1]) // 4)
                positions = n * h * -(-w // 4)
                ties = requant is not None and not requant_tie_free(m, s)
                steps.append(ctx.device.dispatch(
                    "cat_channels", [ctx.buffer(t), dst], grid_1d(positions * (c4_hi - c4_lo), LOCAL),
                    local=(LOCAL,), spec=(off % 4, int(ties)), defines=requant,
                    push=(positions, w, c, off, in_shape[1], c4_lo, c4_hi - c4_lo, zp,
                          _requant_consts(m, s), a["out_zp"])))
            elif by_input:
                steps.append(ctx.device.dispatch(
                    "cat_generic", [ctx.buffer(t), dst], grid_1d(si.device_words() // 4, LOCAL),
                    local=(LOCAL,), spec=(packing.LAYOUT_IDS[so.layout], dim4), defines=["INPUT"] + (requant or []),
                    push=(out_shape, in_shape, off, zp, m, s, a["out_zp"])))
            else:
                # each output word one input's (cat_generic.comp WORDS): moved whole
                words = dim4 != byte_dim or (off % 4 == 0 and (in_shape[dim4] % 4 == 0 or i == parts[-1]))
                steps.append(ctx.device.dispatch(
                    "cat_generic", [ctx.buffer(t), dst], grid_1d(so.device_words(), LOCAL),
                    local=(LOCAL,), spec=(packing.LAYOUT_IDS[so.layout], dim4),
                    defines=(["WORDS"] if words else []) + (requant or []),
                    push=(out_shape, in_shape, off, zp, m, s, a["out_zp"])))
            off += in_shape[dim4]
        if off != out_shape[dim4]:
            raise ValueError(f"{node.name}: inputs give {off} along dim {a['dim']}, the output has {out_shape[dim4]}")
        return steps
