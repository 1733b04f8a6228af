#version 450
#extension GL_GOOGLE_include_directive : require
// One input's share of a channel concatenation of 4W4C int8 tensors (cat_q8 in vkq/ops/pool.py).
// The op runs one dispatch per input, in order; this one writes output channels
// [off, off + in_c): REQUANT: out = requantize(q - in_zp, m, s, out_zp), else a copy.
// One invocation per output ivec4 block (4 widths x 4 channels) of channel blocks
// [off/4, ceil((off + in_c)/4)). When off % 4 = r != 0 every output word straddles two input
// words, a funnel shift:  out = (in[q] >>> 8*(4 - r)) | (in[q + 1] << 8*r).
// Bytes of channels < off belong to earlier inputs, already written: kept (read-modify-write);
// bytes of later channels are written 0 (the next dispatch fills them), and so is padding.
//! variant
//! variant REQUANT
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(std430, binding = 0) readonly buffer In { ivec4 src[]; };
layout(std430, binding = 1) buffer Out { ivec4 dst[]; };
layout(push_constant) uniform Params {
    int positions;         // N * H * W/4 block positions
    int W, C, off, in_c;   // width; output channels; this input's first channel and count
    int c4_lo, nc4;        // output channel blocks this dispatch writes
    int in_zp, m, s, out_zp;
} p;

ivec4 load(int pos, int q, int in_c4) {
    return (q >= 0 && q < in_c4) ? src[pos * in_c4 + q] : ivec4(0);
}

int requant_word(int w) {
    return pack_int8x4(requantize4(unpack_int8x4(w) - p.in_zp, ivec4(p.m), ivec4(p.s), p.out_zp, -128, 127));
}

void main() {
    int i = linear_invocation();
    if (i >= p.positions * p.nc4) return;
    int pos = i / p.nc4, c4 = p.c4_lo + i % p.nc4;   // pos = (n*H + h)*W4 + w4
    int C4 = up4(p.C) / 4, in_c4 = up4(p.in_c) / 4, W4 = up4(p.W) / 4;
    int base = 4 * c4 - p.off, q = base >> 2, r = p.off & 3;   // q = floor(base / 4)
    ivec4 w = load(pos, q, in_c4);
    if (r != 0)
        w = ivec4(uvec4(w) >> (8 * (4 - r))) | (load(pos, q + 1, in_c4) << (8 * r));
#ifdef REQUANT
    w = ivec4(requant_word(w.x), requant_word(w.y), requant_word(w.z), requant_word(w.w));
#endif
    int o = pos * C4 + c4;
    int below = byte_mask(p.off - 4 * c4);                      // earlier inputs' channels
    int mine = byte_mask(p.off + p.in_c - 4 * c4) & ~below;
    ivec4 words = mix(ivec4(0), ivec4(-1), lessThan(ivec4(0, 1, 2, 3), ivec4(p.W - 4 * (pos % W4))));
    ivec4 v = w & mine;
    if (below != 0) v |= dst[o] & below;
    dst[o] = v & words;
}
