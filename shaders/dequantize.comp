#version 450
#extension GL_GOOGLE_include_directive : require
// packed int8 -> float NCHW per tensor: x = float(q - zero_point) * scale.
// One invocation reads one int32 word and writes its (up to) four values.
// VEC (W % 4 == 0; ROW: numel % 4 == 0): one invocation reads one ivec4 block and writes its 16
// values as four vec4 stores (quantize.comp says why). 4 MiB, same run: 18-20 -> 5.4-5.5 ms.
// 4W4C: blocks along the width, GRID without divisions, as quantize.comp. The block's four
// rows are one offset and a step apart, bounded by the channels (4W4C) or rows (4H4W) left:
// one nchw_offset and in_bounds a row took 1.86-2.02 ms on 4 MiB, this 1.62-1.68 (A-B-A-B,
// 2026-11-24; four contiguous stores of the raw words, the floor, 1.52-1.57).
//! variant
//! variant VEC
//! variant VEC GRID
//! variant VEC TEXEL
//! variant VEC GRID TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int LAYOUT = LAYOUT_4W4C;
layout(constant_id = 4) const int ROWS = 1;   // GRID: rows an invocation runs down (int8x4.glsl: io_blocks)
// GRID, 4W4C, W % 8 == 0 (vkq/ops/io.py: from 16 columns): two width blocks an invocation, each
// channel's 8 floats one STORE_VEC4_PAIR (Device.wide_stores: one 32-byte store, where a store
// costs its passes over the lanes, not its bytes). A-B on lavapipe, GPU time, 2026-11-27: 4 MiB
// 0.86x / 0.82x in two runs, 64 @56 0.83x, 32 @112 0.86x, W = 32 0.83x, W = 16 1.00x, W = 8 1.11-1.21x.
layout(constant_id = 5) const int PAIR = 0;

#ifdef VEC
IVEC4_INPUT(0, q)   // texel.glsl
VEC4_PAIR_OUTPUT(1, x)
#else
layout(std430, binding = 0) readonly buffer In { int q[]; };
layout(std430, binding = 1) writeonly buffer Out { float x[]; };
#endif
layout(push_constant) uniform Params {
    ivec4 shape;  // N, C, H, W
    float scale;
    int zero_point;
} p;

#ifdef VEC
vec4 dequantize4(ivec4 v) {
    precise vec4 t = vec4(v - p.zero_point) * p.scale;
    return t;
}

void main() {
    ivec4 SHAPE = p.shape;
    int blk, stride;
    ivec4 e;                                  // the block's first element (4W4C, 4H4W)
    const int count = io_blocks(LAYOUT, SHAPE, ROWS, PAIR, blk, stride, e);
    const int C4 = up4(SHAPE.y) / 4;
    for (int i = 0; i < count; ++i, blk += stride, e = io_next(e, SHAPE)) {
        ivec4 words = LOAD4(q, blk);
        if (PAIR != 0) {           // 4W4C: blocks blk and blk + C4, width blocks 2x and 2x + 1
            const ivec4 next = LOAD4(q, blk + C4);
            const int step = SHAPE.z * SHAPE.w / 4, left = SHAPE.y - e.y;
            int o = nchw_offset(e, SHAPE) / 4;     // even: W / 4 and the first width block are
            for (int k = 0; k < 4; ++k, o += step)
                if (k < left) STORE_VEC4_PAIR(x, o, dequantize4((words << (24 - 8 * k)) >> 24),
                                              dequantize4((next << (24 - 8 * k)) >> 24));
            continue;
        }
        if (LAYOUT == LAYOUT_ROW) {
            int n4 = SHAPE.x * SHAPE.y * SHAPE.z * SHAPE.w / 4;
            for (int r = 0; r < 4; ++r)
                if (4 * blk + r < n4) STORE_VEC4(x, 4 * blk + r, dequantize4(unpack_int8x4(words[r])));
        } else {   // the block's 4 rows: channels e.y + k (4W4C) or rows e.z + k (4H4W), `step` vec4s apart
            const bool wc = LAYOUT == LAYOUT_4W4C;
            const int step = wc ? SHAPE.z * SHAPE.w / 4 : SHAPE.w / 4, left = wc ? SHAPE.y - e.y : SHAPE.z - e.z;
            int o = nchw_offset(e, SHAPE) / 4;
            for (int k = 0; k < 4; ++k, o += step)    // 4W4C: byte k of each word is channel e.y + k
                if (k < left) STORE_VEC4(x, o, dequantize4(wc ? (words << (24 - 8 * k)) >> 24 : unpack_int8x4(words[k])));
        }
    }
}
#else
void main() {
    ivec4 SHAPE = p.shape;
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, SHAPE)) return;
    ivec4 v = unpack_int8x4(q[i]);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(LAYOUT, i, b, SHAPE);
        if (in_bounds(e, SHAPE)) {
            precise float t = float(v[b] - p.zero_point) * p.scale;
            x[nchw_offset(e, SHAPE)] = t;
        }
    }
}
#endif
