#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Bilinear upsampling of (N, C, H, W) to (N, C, Ho, Wo) (vkq/ops/resize.py). The taps are
// computed on the host as PyTorch does (source rows y0, y1 and weights per output row, the
// same per output column) and read from `taps`: y0[Ho] y1[Ho] wy0[Ho] wy1[Ho] x0[Wo] x1[Wo] wx0[Wo] wx1[Wo].
// FLOAT: float32 NCHW in and out, weights float32 bits,
//   out = (x00 * wx0 + x01 * wx1) * wy0 + (x10 * wx0 + x11 * wx1) * wy1    (each op rounded once)
// INT8: packed int8 in layout SRC -> DST (one quantization), weights in Q11 (wy0 + wy1 = 2048),
//   acc = wy0 * (wx0 * q00 + wx1 * q01) + wy1 * (wx0 * q10 + wx1 * q11);  out = acc / 2^22 rounded
//   half to even (as PT2E's quantize rounds the float result; ties are common at scale 2)
//   (a convex combination: the zero point passes through, no clamp needed). One word per invocation.
// BLOCKS (INT8, 4W4C in and out): one output ivec4 block (4 widths x 4 channels) per invocation,
//   the 4 channels of a word at once: each output word is 4 input words (one per tap), unpacked,
//   weighted and rounded as ivec4s, not 16 byte gathers; the row's taps are read once a block.
//   Channel padding stays 0 (0 weighted is 0); widths past Wo are stored 0. TEXEL: the input
//   words and the taps through texel fetches, the output by 64-bit stores. lavapipe (Xeon, GPU
//   time): LR-ASPP's (1, 21, 28, 28) -> (1, 21, 224, 224) 37-38 -> 1.8-3.6 ms (a word an invocation
//   before), (1, 128, 14, 14) -> 28 x 28 3.5 -> 0.23-0.4.
//! variant FLOAT
//! variant INT8
//! variant INT8 BLOCKS
//! variant INT8 BLOCKS TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4W4C;

#ifdef BLOCKS
IVEC4_WORDS_INPUT(0, srcw)      // texel.glsl
IVEC4_OUTPUT(1, dst4)
IVEC4_WORDS_INPUT(2, tapw)
#define TAP(i) WORD(tapw, i)
#elif defined(FLOAT)
layout(std430, binding = 0) readonly buffer In { float src[]; };
layout(std430, binding = 1) writeonly buffer Out { float dst[]; };
#else
layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
#endif
#ifndef BLOCKS
layout(std430, binding = 2) readonly buffer Taps { int taps[]; };
#define TAP(i) taps[i]
#endif
layout(push_constant) uniform Params { ivec4 in_shape, out_shape; } p;

// the rounding of a weighted sum in Q22 to the nearest integer, ties to even: up where the
// remainder is past the half, or at it with q odd (r + (q & 1) > half says both)
ivec4 round_q22(ivec4 acc) {
    const ivec4 q = acc >> 22, r = acc & 0x3FFFFF;
    return q + ivec4(greaterThan(r + (q & 1), ivec4(0x200000)));
}

#if defined(INT8) && !defined(BLOCKS)
int at(ivec4 e) {
    ivec2 w = int8x4_locate(SRC, e, p.in_shape);
    return int8_at(src[w.x], w.y);
}
#endif

#ifdef BLOCKS
void main() {
    const int blk = linear_invocation();
    const int Ho = p.out_shape.z, Wo = p.out_shape.w, H = p.in_shape.z, W = p.in_shape.w;
    const int C4 = up4(p.out_shape.y) / 4, Wo4 = up4(Wo) / 4, W4 = up4(W) / 4;
    if (4 * blk >= packed_words(LAYOUT_4W4C, p.out_shape)) return;
    int t = blk;                                   // blk = ((n*Ho + h)*Wo4 + w4)*C4 + c4
    const int c4 = peel(t, C4), w4 = peel(t, Wo4), h = peel(t, Ho), n = t;
    const int y0 = TAP(h), y1 = TAP(Ho + h), wy0 = TAP(2 * Ho + h), wy1 = TAP(3 * Ho + h);
    const int row0 = (n * H + y0) * W4 * C4 + c4, row1 = (n * H + y1) * W4 * C4 + c4;   // blocks of (n, y, 0, c4)
    ivec4 words;
    [[unroll]] for (int r = 0; r < 4; ++r) {
        const int w = min(4 * w4 + r, Wo - 1);     // past Wo: the last column's taps, stored 0
        const int x0 = TAP(4 * Ho + w), x1 = TAP(4 * Ho + Wo + w);
        const int wx0 = TAP(4 * Ho + 2 * Wo + w), wx1 = TAP(4 * Ho + 3 * Wo + w);
        const int o0 = (x0 >> 2) * C4 * 4 + (x0 & 3), o1 = (x1 >> 2) * C4 * 4 + (x1 & 3);   // word offsets in a row
        const ivec4 top = wx0 * unpack_int8x4(WORD(srcw, row0 * 4 + o0)) + wx1 * unpack_int8x4(WORD(srcw, row0 * 4 + o1));
        const ivec4 bot = wx0 * unpack_int8x4(WORD(srcw, row1 * 4 + o0)) + wx1 * unpack_int8x4(WORD(srcw, row1 * 4 + o1));
        words[r] = 4 * w4 + r < Wo ? pack_int8x4(round_q22(wy0 * top + wy1 * bot)) : 0;
    }
    STORE4(dst4, blk, words);
}
#else
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
#endif
