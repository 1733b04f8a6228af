#version 450
#extension GL_GOOGLE_include_directive : require
// float NCHW -> packed int8 per tensor, as quantized_decomposed.quantize_per_tensor:
//   q = clamp(roundEven(x * inv_scale) + zero_point, qmin, qmax)   (a NaN x: 0, as torch's cast)
// One invocation writes one int32 word (four values); padding bytes are 0.
// VEC (W % 4 == 0; ROW: numel % 4 == 0): one invocation writes one ivec4 block (16 values) from
// four vec4 loads, so every float is read once as part of a vec4, every block stored whole and
// the word -> element divisions done once per 16 values (4W4C transposes the four channels'
// vec4s into the block's four words). On lavapipe a buffer access costs ~150 instructions per 8
// lanes for a word and ~340 for a vec4, and a division by a push constant runs lane by lane.
// 4 MiB (4W4C), same run: 14.4-20 -> 7.3-7.9 ms. The shape as specialization constants gave the
// same with VEC (10.2 ms without it), at the price of a pipeline per shape in a dynamic program.
// 4W4C takes its blocks along the width (int8x4.glsl: io_blocks): the block order put the 8 lanes
// of a lavapipe vector in 8 channel planes each: 6.2 -> 4.9 ms on 4 MiB (one interleaved run);
// GRID reads the blocks off a (width blocks, channel blocks, N*H / ROWS) grid, each invocation
// running down ROWS rows, instead of dividing; ROWS > 1 on CPU drivers (int8x4.glsl: io_blocks).
//! variant
//! variant VEC
//! variant VEC GRID
//! variant VEC TEXEL
//! variant VEC GRID TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "fake_quant.glsl"

layout(constant_id = 3) const int LAYOUT = LAYOUT_4W4C;
layout(constant_id = 4) const int ROWS = 1;   // GRID: rows an invocation runs down (int8x4.glsl: io_blocks)

#ifdef VEC
IVEC4_INPUT(0, x)   // floats as their bits (texel.glsl)
#define X4(i) intBitsToFloat(LOAD4(x, i))
IVEC4_OUTPUT(1, q)
#else
layout(std430, binding = 0) readonly buffer In { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { int q[]; };
#endif
layout(push_constant) uniform Params {
    ivec4 shape;  // N, C, H, W
    float inv_scale;  // float32(1 / scale), as PyTorch forms it
    int zero_point, qmin, qmax;
} p;

#ifdef VEC
ivec4 quantize4(vec4 v) { return quantize_vec4(v, p.inv_scale, p.zero_point, p.qmin, p.qmax); }

void main() {
    ivec4 SHAPE = p.shape;
    int blk, stride;
    ivec4 e;                                  // the block's first element (4W4C, 4H4W)
    const int count = io_blocks(LAYOUT, SHAPE, ROWS, 0, blk, stride, e);
    for (int i = 0; i < count; ++i, blk += stride, e = io_next(e, SHAPE)) {
        ivec4 words = ivec4(0);
        if (LAYOUT == LAYOUT_ROW) {               // words 4blk..4blk+3 hold floats 16blk..16blk+15
            int n4 = SHAPE.x * SHAPE.y * SHAPE.z * SHAPE.w / 4;
            for (int r = 0; r < 4; ++r)
                if (4 * blk + r < n4) words[r] = pack_int8x4(quantize4(X4(4 * blk + r)));
        } else {   // 4W4C: channel e.y + k, 4 widths = byte k of the 4 words; 4H4W: row e.z + k = word k
            const bool wc = LAYOUT == LAYOUT_4W4C;   // the rows are `step` vec4s apart (dequantize.comp)
            const int step = wc ? SHAPE.z * SHAPE.w / 4 : SHAPE.w / 4, left = wc ? SHAPE.y - e.y : SHAPE.z - e.z;
            int o = nchw_offset(e, SHAPE) / 4;
            for (int k = 0; k < 4; ++k, o += step) {
                if (k >= left) continue;
                ivec4 v = quantize4(X4(o));
                if (wc)
                    words |= (v & 0xFF) << (8 * k);
                else
                    words[k] = pack_int8x4(v);
            }
        }
        STORE4(q, blk, words);
    }
}
#else
void main() {
    ivec4 SHAPE = p.shape;
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, SHAPE)) return;
    ivec4 v = ivec4(0);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(LAYOUT, i, b, SHAPE);
        if (in_bounds(e, SHAPE)) {
            precise float t = roundEven(x[nchw_offset(e, SHAPE)] * p.inv_scale) + float(p.zero_point);
            v[b] = isnan(t) ? 0 : int(clamp(t, float(p.qmin), float(p.qmax)));
        }
    }
    q[i] = pack_int8x4(v);
}
#endif
