#ifndef VKQ_INT8X4_GLSL
#define VKQ_INT8X4_GLSL
// Int8x4: one int32 holds four int8 values, element i in bits [8i, 8i+8):
//   word = q0 | q1 << 8 | q2 << 16 | q3 << 24   (two's-complement bytes)
// An ivec4 holds a 4x4 block of 16 int8 values; each int32 of it is one row.
// Tensors are (N, C, H, W); Cp, Hp, Wp are rounded up to multiples of 4, padding bytes 0.
//   4W4C: word (((n*H + h)*Wp/4 + w/4)*Cp/4 + c/4)*4 + w%4, byte c%4   (convolutions)
//   4H4W: word (((n*C + c)*Hp/4 + h/4)*Wp/4 + w/4)*4 + h%4, byte w%4   (matrix multiply)
//   ROW:  word f/4, byte f%4 with f = ((n*C + c)*H + h)*W + w, the row-major index; words
//         rounded up to whole ivec4s. A tensor of rank > 4 is passed as (1, 1, 1, numel).
// vkq/packing.py holds the same formulas for the host.

const int LAYOUT_4W4C = 0;
const int LAYOUT_4H4W = 1;
const int LAYOUT_ROW = 2;

int up4(int x) { return (x + 3) & ~3; }

// load for int8: sign_extend(word >> (8*i))
int int8_at(int word, int i) { return bitfieldExtract(word, 8 * i, 8); }

// all four values of a word, sign-extended: element i in component i
ivec4 unpack_int8x4(int word) { return (ivec4(word) << ivec4(24, 16, 8, 0)) >> 24; }

// four values (already in [-128, 127]) into one word
int pack_int8x4(ivec4 v) {
    v &= 0xFF;
    return v.x | (v.y << 8) | (v.z << 16) | (v.w << 24);
}

int nchw_offset(ivec4 e, ivec4 shape) { return ((e.x * shape.y + e.y) * shape.z + e.z) * shape.w + e.w; }

ivec4 unravel_nchw(int f, ivec4 shape) {  // row-major index -> (n, c, h, w)
    int w = f % shape.w; f /= shape.w;
    int h = f % shape.z; f /= shape.z;
    return ivec4(f / shape.y, f % shape.y, h, w);
}

int packed_words(int lay, ivec4 shape) {  // shape = (N, C, H, W)
    if (lay == LAYOUT_ROW) return (shape.x * shape.y * shape.z * shape.w + 15) / 16 * 4;
    if (lay == LAYOUT_4W4C) return shape.x * shape.z * up4(shape.w) / 4 * up4(shape.y);
    return shape.x * shape.y * up4(shape.z) / 4 * up4(shape.w);
}

// (word index, byte) of element (n, c, h, w)
ivec2 int8x4_locate(int lay, ivec4 e, ivec4 shape) {
    if (lay == LAYOUT_ROW) {
        int f = nchw_offset(e, shape);
        return ivec2(f / 4, f % 4);
    }
    int C4 = up4(shape.y) / 4, H4 = up4(shape.z) / 4, W4 = up4(shape.w) / 4;
    if (lay == LAYOUT_4W4C)
        return ivec2((((e.x * shape.z + e.z) * W4 + e.w / 4) * C4 + e.y / 4) * 4 + e.w % 4, e.y % 4);
    return ivec2((((e.x * shape.y + e.y) * H4 + e.z / 4) * W4 + e.w / 4) * 4 + e.z % 4, e.w % 4);
}

// element (n, c, h, w) held by byte b of word i; components may lie in the padding
ivec4 int8x4_element(int lay, int i, int b, ivec4 shape) {
    if (lay == LAYOUT_ROW) {  // past the end: n = N, out of bounds
        int f = 4 * i + b, total = shape.x * shape.y * shape.z * shape.w;
        return f < total ? unravel_nchw(f, shape) : ivec4(shape.x, 0, 0, 0);
    }
    int C4 = up4(shape.y) / 4, H4 = up4(shape.z) / 4, W4 = up4(shape.w) / 4;
    int r = i % 4, blk = i / 4;
    if (lay == LAYOUT_4W4C) {  // blk = ((n*H + h)*W4 + w4)*C4 + c4
        int c4 = blk % C4; blk /= C4;
        int w4 = blk % W4; blk /= W4;
        return ivec4(blk / shape.z, c4 * 4 + b, blk % shape.z, w4 * 4 + r);
    }
    // blk = ((n*C + c)*H4 + h4)*W4 + w4
    int w4 = blk % W4; blk /= W4;
    int h4 = blk % H4; blk /= H4;
    return ivec4(blk / shape.y, blk % shape.y, h4 * 4 + r, w4 * 4 + b);
}

// The ivec4 blocks that an invocation of a block-per-invocation float <-> int8 kernel
// (quantize.comp, dequantize.comp: VEC) owns: `count` of them (0 past the end), blk, blk +
// stride, ..., with first elements e, io_next(e), ... (GRID: one per row, else 1).
// ROW and 4H4W: block linear_invocation(). 4W4C: consecutive invocations (the SIMD lanes of a
// CPU driver, a GPU warp's threads) take consecutive width blocks of one channel block, so
// their float rows are read or written contiguously (the block order, channel blocks fastest,
// put each lane in another channel plane). GRID: the dispatch is a grid of (width blocks,
// channel blocks, ceil(N*H / rows)) (vkq/ops/io.py) and each invocation runs down `rows`
// consecutive rows of the N*H (image, row) pairs, so the block is read off its coordinates;
// without GRID, off the linear index by divisions by the shape, which a CPU driver runs lane by
// lane (a fifth of a 4 MiB quantize on lavapipe). rows > 1 spreads an invocation's fixed cost
// (its coordinates, bounds, constants) over several blocks: on lavapipe a 4 MiB quantize took
// 11.1 ms at 1 row, 4.0 at 16 and 3.9 at 32 (vkq/device.py: invocation_rows chooses per device).
// pair (GRID only): the invocation takes width blocks 2x and 2x + 1 (blk is the first).
int io_blocks(int lay, ivec4 shape, int rows, int pair, out int blk, out int stride, out ivec4 e) {
    e = ivec4(0);
    stride = 0;
    if (lay != LAYOUT_4W4C) {
        blk = linear_invocation();
        if (lay == LAYOUT_4H4W) e = int8x4_element(lay, 4 * blk, 0, shape);
        return 4 * blk < packed_words(lay, shape) ? 1 : 0;
    }
    const int C4 = up4(shape.y) / 4, W4 = up4(shape.w) / 4;
#ifdef GRID
    const int w4 = int(gl_GlobalInvocationID.x) << pair, c4 = int(gl_WorkGroupID.y), r = int(gl_WorkGroupID.z) * rows;
    e = ivec4(r / shape.z, 4 * c4, r % shape.z, 4 * w4);   // r = n*H + h
    blk = (r * W4 + w4) * C4 + c4;
    stride = W4 * C4;
    return w4 < W4 ? min(rows, shape.x * shape.z - r) : 0;
#else
    const int j = linear_invocation();
    const int w4 = j % W4, c4 = (j / W4) % C4, r = j / (W4 * C4);   // r = n*H + h
    e = ivec4(r / shape.z, 4 * c4, r % shape.z, 4 * w4);
    blk = (r * W4 + w4) * C4 + c4;
    return 4 * j < packed_words(lay, shape) ? 1 : 0;
#endif
}

// the first element of io_blocks' next block: one row down, into the next image after the last
ivec4 io_next(ivec4 e, ivec4 shape) {
    return e.z + 1 < shape.z ? ivec4(e.x, e.y, e.z + 1, e.w) : ivec4(e.x + 1, e.y, 0, e.w);
}

bool in_bounds(ivec4 e, ivec4 shape) { return all(lessThan(e, shape)); }
#endif
