#version 450
#extension GL_GOOGLE_include_directive : require
// packed int8 -> float NCHW per tensor: x = float(q - zero_point) * scale.
// One invocation reads one int32 word and writes its (up to) four values.
// VEC (W % 4 == 0; ROW: numel % 4 == 0): one invocation reads one ivec4 block and writes its 16
// values as four vec4 stores (quantize.comp says why). 4 MiB, same run: 18-20 -> 5.4-5.5 ms.
// 4W4C: blocks along the width, GRID without divisions, as quantize.comp.
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

#ifdef VEC
IVEC4_INPUT(0, q)   // texel.glsl
layout(std430, binding = 1) writeonly buffer Out { vec4 x[]; };
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
    const int count = io_blocks(LAYOUT, SHAPE, ROWS, blk, stride, e);
    for (int i = 0; i < count; ++i, blk += stride, e = io_next(e, SHAPE)) {
        ivec4 words = LOAD4(q, blk);
        if (LAYOUT == LAYOUT_ROW) {
            int n4 = SHAPE.x * SHAPE.y * SHAPE.z * SHAPE.w / 4;
            for (int r = 0; r < 4; ++r)
                if (4 * blk + r < n4) x[4 * blk + r] = dequantize4(unpack_int8x4(words[r]));
        } else {
            for (int k = 0; k < 4; ++k) {
                ivec4 ek = LAYOUT == LAYOUT_4W4C ? e + ivec4(0, k, 0, 0) : e + ivec4(0, 0, k, 0);
                if (!in_bounds(ek, SHAPE)) continue;
                // 4W4C: byte k of each word is channel e.y + k at the word's width
                ivec4 v = LAYOUT == LAYOUT_4W4C ? (words << (24 - 8 * k)) >> 24 : unpack_int8x4(words[k]);
                x[nchw_offset(ek, SHAPE) / 4] = dequantize4(v);
            }
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
