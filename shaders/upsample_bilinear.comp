#version 450
#extension GL_GOOGLE_include_directive : require
// Bilinear upsampling of (N, C, H, W) to (N, C, Ho, Wo) (vkq/ops/resize.py). The taps are
// computed on the host as PyTorch does (source rows y0, y1 and weights per output row, the
// same per output column) and read from `taps`: y0[Ho] y1[Ho] wy0[Ho] wy1[Ho] x0[Wo] x1[Wo] wx0[Wo] wx1[Wo].
// FLOAT: float32 NCHW in and out, weights float32 bits,
//   out = (x00 * wx0 + x01 * wx1) * wy0 + (x10 * wx0 + x11 * wx1) * wy1    (each op rounded once)
// INT8: packed int8 in layout SRC -> DST (one quantization), weights in Q11 (wy0 + wy1 = 2048),
//   acc = wy0 * (wx0 * q00 + wx1 * q01) + wy1 * (wx0 * q10 + wx1 * q11);  out = acc / 2^22 rounded
//   half to even (as PT2E's quantize rounds the float result; ties are common at scale 2)
//   (a convex combination: the zero point passes through, no clamp needed). One word per invocation.
//! variant FLOAT
//! variant INT8
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4W4C;

#ifdef FLOAT
layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
#else
layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
#endif
layout(std430, binding = 2) readonly buffer Taps { int taps[]; };
layout(push_constant) uniform Params { ivec4 in_shape, out_shape; } p;

#ifdef INT8
int at(ivec4 e) {
    ivec2 w = int8x4_locate(SRC, e, p.in_shape);
    return int8_at(src[w.x], w.y);
}
#endif

void main() {
    int i = linear_invocation();
    int Ho = p.out_shape.z, Wo = p.out_shape.w;
#ifdef FLOAT
    if (i >= p.out_shape.x * p.out_shape.y * Ho * Wo) return;
    ivec4 e = unravel_nchw(i, p.out_shape);
    int row = (e.x * p.in_shape.y + e.y) * p.in_shape.z;
    int y0 = taps[e.z], y1 = taps[Ho + e.z], x0 = taps[4 * Ho + e.w], x1 = taps[4 * Ho + Wo + e.w];
    float wy0 = intBitsToFloat(taps[2 * Ho + e.z]), wy1 = intBitsToFloat(taps[3 * Ho + e.z]);
    float wx0 = intBitsToFloat(taps[4 * Ho + 2 * Wo + e.w]), wx1 = intBitsToFloat(taps[4 * Ho + 3 * Wo + e.w]);
    int W = p.in_shape.w;
    precise float top = src[(row + y0) * W + x0] * wx0 + src[(row + y0) * W + x1] * wx1;
    precise float bot = src[(row + y1) * W + x0] * wx0 + src[(row + y1) * W + x1] * wx1;
    precise float r = top * wy0 + bot * wy1;
    dst[i] = r;
#else
    if (i >= packed_words(DST, p.out_shape)) return;
    ivec4 v = ivec4(0);
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(DST, i, b, p.out_shape);
        if (!in_bounds(e, p.out_shape)) continue;
        int y0 = taps[e.z], y1 = taps[Ho + e.z], wy0 = taps[2 * Ho + e.z], wy1 = taps[3 * Ho + e.z];
        int x0 = taps[4 * Ho + e.w], x1 = taps[4 * Ho + Wo + e.w];
        int wx0 = taps[4 * Ho + 2 * Wo + e.w], wx1 = taps[4 * Ho + 3 * Wo + e.w];
        int top = wx0 * at(ivec4(e.x, e.y, y0, x0)) + wx1 * at(ivec4(e.x, e.y, y0, x1));
        int bot = wx0 * at(ivec4(e.x, e.y, y1, x0)) + wx1 * at(ivec4(e.x, e.y, y1, x1));
        int acc = wy0 * top + wy1 * bot, q = acc >> 22, r = acc & 0x3FFFFF;
        v[b] = q + int(r > 0x200000 || (r == 0x200000 && (q & 1) == 1));
    }
    dst[i] = pack_int8x4(v);
#endif
}
