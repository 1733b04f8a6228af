"""Int8x4 packing: four int8 values in one int32, sixteen (a 4x4 block) in one ivec4.

The blocked layouts read every tensor as 4-D (N, C, H, W), lower ranks padded with leading
1s. Cp, Hp, Wp are C, H, W rounded up to a multiple of 4; padding bytes are 0.
Byte i of an int32 holds element i of its four: q0 | q1<<8 | q2<<16 | q3<<24.

  4W4C (convolutions):  int32 index (((n*H + h)*Wp/4 + w/4)*Cp/4 + c/4)*4 + w%4,  byte c%4
      one ivec4 = 4 widths x 4 channels at fixed (n, h); channel blocks run fastest.
  4H4W (matrix multiply): int32 index (((n*C + c)*Hp/4 + h/4)*Wp/4 + w/4)*4 + h%4, byte w%4
      one ivec4 = a 4x4 tile, int32 j is row 4*(h/4)+j holding 4 consecutive columns.
  ROW (any rank): element f of the row-major order is byte f%4 of int32 f/4; the word count
      is rounded up to whole ivec4s (16 values), padding bytes 0. A row-major reshape changes
      no byte. The layout of int8 tensors of rank 5 and 6 (channel shuffle's (N, g, C/g, H, W),
      a window partition's (B, H/w, w, W/w, w, C)); convolutions and linear layers never read
      it: a `repack` (vkq/ops/io.py, a gather from any layout into any other, through a strided
      view) moves a tensor into 4W4C / 4H4W where they need it. For a tensor of rank <= 4 the
      ROW formula is the one of its (N, C, H, W) reading: index = ((n*C + c)*H + h)*W + w.

The same formulas are in shaders/include/int8x4.glsl.
"""
from __future__ import annotations

import numpy as np

LAYOUTS = ("4W4C", "4H4W")            # the blocked layouts, read as (N, C, H, W): rank <= 4
ALL_LAYOUTS = LAYOUTS + ("ROW",)
LAYOUT_IDS = {"4W4C": 0, "4H4W": 1, "ROW": 2}   # the LAYOUT spec constant of shaders/include/int8x4.glsl


def _up4(n: int) -> int:
    return (n + 3) // 4 * 4


def as_nchw(shape) -> tuple[int, int, int, int]:
    """A shape of rank <= 4 as (N, C, H, W) with leading 1s."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 4:
        raise ValueError(f"the blocked int8 layouts {LAYOUTS} take rank <= 4, got shape {shape} (use ROW)")
    if any(d < 1 for d in shape):
        raise ValueError(f"packed int8 tensors need every dimension >= 1, got shape {shape}")
    return (1,) * (4 - len(shape)) + shape


def shader_nchw(shape, layout: str) -> tuple[int, int, int, int]:
    """The (N, C, H, W) a shader indexes a tensor of this layout with: its own for rank <= 4;
    for ROW of higher rank (1, 1, 1, numel), which has the same row-major order."""
    if layout == "ROW" and len(tuple(shape)) > 4:
        return (1, 1, 1, _numel(shape))
    return as_nchw(shape)


def _check_layout(layout: str) -> None:
    if layout not in ALL_LAYOUTS:
        raise ValueError(f"unknown packed layout {layout!r}; expected one of {ALL_LAYOUTS}")


def _numel(shape) -> int:
    shape = tuple(int(d) for d in shape)
    if any(d < 1 for d in shape):
        raise ValueError(f"packed int8 tensors need every dimension >= 1, got shape {shape}")
    return int(np.prod(shape, dtype=np.int64))


def packed_size(shape, layout: str) -> int:
    """Number of int32 words a tensor of this logical shape takes in `layout`."""
    _check_layout(layout)
    if layout == "ROW":
        return (_numel(shape) + 15) // 16 * 4
    n, c, h, w = as_nchw(shape)
    if layout == "4W4C":
        return n * h * _up4(w) // 4 * _up4(c) // 4 * 4
    return n * c * _up4(h) // 4 * _up4(w) // 4 * 4


def byte_positions(flat: np.ndarray, shape, layout: str) -> np.ndarray:
    """Byte offsets in the packed buffer of the elements at these row-major indices."""
    if layout == "ROW":
        return flat
    n, c, h, w = as_nchw(shape)
    n_, c_, h_, w_ = np.unravel_index(flat, (n, c, h, w))
    if layout == "4W4C":
        word = (((n_ * h + h_) * (_up4(w) // 4) + w_ // 4) * (_up4(c) // 4) + c_ // 4) * 4 + w_ % 4
        return word * 4 + c_ % 4
    word = (((n_ * c + c_) * (_up4(h) // 4) + h_ // 4) * (_up4(w) // 4) + w_ // 4) * 4 + h_ % 4
    return word * 4 + w_ % 4


def same_image(shape_a, layout_a: str, shape_b, layout_b: str, chunk: int = 1 << 20) -> bool:
    """Whether the packed words of an int8 tensor of shape_a in layout_a are, byte for byte,
    those of its row-major reshape to shape_b in layout_b (padding included: the word counts
    match and every element sits at the same byte). Then a repack between the two moves
    nothing: (1, C, 1, 1) 4W4C is (1, C) 4H4W, a ROW reshape is always its input."""
    _check_layout(layout_a)
    _check_layout(layout_b)
    numel = _numel(shape_a)
    if numel != _numel(shape_b) or packed_size(shape_a, layout_a) != packed_size(shape_b, layout_b):
        return False
    if layout_a == layout_b == "ROW":
        return True
    for start in range(0, numel, chunk):      # bounded memory on large tensors
        flat = np.arange(start, min(start + chunk, numel), dtype=np.int64)
        if not np.array_equal(byte_positions(flat, shape_a, layout_a), byte_positions(flat, shape_b, layout_b)):
            return False
    return True


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
    """int8 array -> int32 words in `layout` (rank <= 4 for the blocked layouts, any for ROW)."""
    _check_layout(layout)
    q = np.asarray(q)
    if q.dtype != np.int8:
        raise TypeError(f"pack expects an int8 array, got {q.dtype}")
    if layout == "ROW":
        flat = np.zeros(packed_size(q.shape, layout) * 4, np.int8)
        flat[:q.size] = q.reshape(-1)
        return flat.view("<i4").astype(np.int32, copy=False)
    q4 = q.reshape(as_nchw(q.shape))
    return np.ascontiguousarray(_blocks(q4, layout)).reshape(-1).view("<i4").astype(np.int32, copy=False)


def unpack(packed, layout: str, shape) -> np.ndarray:
    """int32 words in `layout` -> int8 array of `shape` (padding dropped)."""
    _check_layout(layout)
    packed = np.asarray(packed)
    if packed.dtype not in (np.int32, np.uint32):
        raise TypeError(f"unpack expects int32 words, got {packed.dtype}")
    shape = tuple(int(d) for d in shape)
    want = packed_size(shape, layout)
    if packed.size != want:
        raise ValueError(f"{layout} tensor of shape {shape} needs {want} int32 words, got {packed.size}")
    b = np.ascontiguousarray(packed).astype("<i4", copy=False).view(np.int8)
    if layout == "ROW":
        return b[:_numel(shape)].reshape(shape).copy()
    n, c, h, w = as_nchw(shape)
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
