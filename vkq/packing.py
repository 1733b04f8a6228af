"""Int8x4 packing: four int8 values in one int32, sixteen (a 4x4 block) in one ivec4.

Every tensor is read as 4-D (N, C, H, W), lower ranks padded with leading 1s.
Cp, Hp, Wp are C, H, W rounded up to a multiple of 4; padding bytes are 0.
Byte i of an int32 holds element i of its four: q0 | q1<<8 | q2<<16 | q3<<24.

  4W4C (convolutions):  int32 index (((n*H + h)*Wp/4 + w/4)*Cp/4 + c/4)*4 + w%4,  byte c%4
      one ivec4 = 4 widths x 4 channels at fixed (n, h); channel blocks run fastest.
  4H4W (matrix multiply): int32 index (((n*C + c)*Hp/4 + h/4)*Wp/4 + w/4)*4 + h%4, byte w%4
      one ivec4 = a 4x4 tile, int32 j is row 4*(h/4)+j holding 4 consecutive columns.

The same formulas are in shaders/include/int8x4.glsl.
"""
from __future__ import annotations

import numpy as np

LAYOUTS = ("4W4C", "4H4W")


def _up4(n: int) -> int:
    return (n + 3) // 4 * 4


def as_nchw(shape) -> tuple[int, int, int, int]:
    """A shape of rank <= 4 as (N, C, H, W) with leading 1s."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise ValueError(f"packed int8 tensors have rank <= 4, got shape {shape}")
    if any(d < 1 for d in shape):
        raise ValueError(f"packed int8 tensors need every dimension >= 1, got shape {shape}")
    return (1,) * (4 - len(shape)) + shape


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown packed layout {layout!r}; expected one of {LAYOUTS}")


def packed_size(shape, layout: str) -> int:
    """Number of int32 words a tensor of this logical shape takes in `layout`."""
    _check_layout(layout)
    n, c, h, w = as_nchw(shape)
    if layout == "4W4C":
        return n * h * _up4(w) // 4 * _up4(c) // 4 * 4
    return n * c * _up4(h) // 4 * _up4(w) // 4 * 4


def _blocks(q4: np.ndarray, layout: str) -> np.ndarray:
    """Padded int8 (N, C, H, W) -> int8 array whose C-order bytes are the packed buffer."""
    n, c, h, w = q4.shape
    cp, hp, wp = _up4(c), _up4(h), _up4(w)
    if layout == "4W4C":
        p = np.zeros((n, cp, h, wp), np.int8)
        p[:, :c, :, :w] = q4
        # (n, c4, ci, h, w4, wi) -> (n, h, w4, c4, wi, ci)
        return p.reshape(n, cp // 4, 4, h, wp // 4, 4).transpose(0, 3, 4, 1, 5, 2)
    p = np.zeros((n, c, hp, wp), np.int8)
    p[:, :, :h, :w] = q4
    # (n, c, h4, hi, w4, wi) -> (n, c, h4, w4, hi, wi)
    return p.reshape(n, c, hp // 4, 4, wp // 4, 4).transpose(0, 1, 2, 4, 3, 5)


def pack(q, layout: str) -> np.ndarray:
    """int8 array (rank <= 4, read as NCHW) -> int32 words in `layout`."""
    _check_layout(layout)
    q = np.asarray(q)
    if q.dtype != np.int8:
        raise TypeError(f"pack expects an int8 array, got {q.dtype}")
    q4 = q.reshape(as_nchw(q.shape))
    return np.ascontiguousarray(_blocks(q4, layout)).reshape(-1).view("<i4").astype(np.int32, copy=False)


def unpack(packed, layout: str, shape) -> np.ndarray:
    """int32 words in `layout` -> int8 array of `shape` (padding dropped)."""
    _check_layout(layout)
    packed = np.asarray(packed)
    if packed.dtype not in (np.int32, np.uint32):
        raise TypeError(f"unpack expects int32 words, got {packed.dtype}")
    shape = tuple(int(d) for d in shape)
    n, c, h, w = as_nchw(shape)
    want = packed_size(shape, layout)
    if packed.size != want:
        raise ValueError(f"{layout} tensor of shape {shape} needs {want} int32 words, got {packed.size}")
    b = np.ascontiguousarray(packed).astype("<i4", copy=False).view(np.int8)
    cp, hp, wp = _up4(c), _up4(h), _up4(w)
    if layout == "4W4C":
        q = b.reshape(n, h, wp // 4, cp // 4, 4, 4).transpose(0, 3, 5, 1, 2, 4).reshape(n, cp, h, wp)
        q = q[:, :c, :, :w]
    else:
        q = b.reshape(n, c, hp // 4, wp // 4, 4, 4).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, hp, wp)
        q = q[:, :, :h, :w]
    return np.ascontiguousarray(q).reshape(shape)


def convert(packed, src: str, dst: str, shape) -> np.ndarray:
    """Re-pack int32 words from layout `src` to layout `dst` (the reference for the GPU copy)."""
    return pack(unpack(packed, src, shape), dst)
