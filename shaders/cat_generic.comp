#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// One input's share of a concatenation along any dim, either layout (cat_q8 in vkq/ops/cat_q8.py;
// 4W4C channel concatenation has the faster cat_channels). One dispatch per input, in order;
// one invocation per output word, byte by byte: element e of the output takes
//   e[DIM] <  off:            kept (an earlier input wrote it)
//   off <= e[DIM] < off + n:  input[e - off along DIM], REQUANT: requantized to the output
//   otherwise, or padding:    0 (a later input fills it)
// WORDS: every output word holds values of one input only (DIM is not the dim the bytes run
// along, 4W4C's C or 4H4W's W, or the host checked that each input starts on a word there and
// only the last ends inside one): the word's position is decomposed once, not once a byte, and
// it is this input's word moved whole, or another input's (left alone), or padding (0). On
// lavapipe (Xeon, 2 cores): Swin-T's patch merging, 4 x (1, 28, 28, 96) along C of (B, H, W, C),
// 14.4 -> 4.9 ms; a ViT's class token, (2, 1, 384) + (2, 196, 384) along tokens, 4.1 -> 1.4;
// 2 x (1, 64, 56, 56) along H, 10.8 -> 3.8. Each dispatch still visits every output word (the
// division of its index by the shape is most of what is left).
// INPUT (blocked layouts): where every input's extent along DIM is whole blocks (a multiple of
// 4 where DIM is blocked: 4W4C's C and W, 4H4W's H and W), each input's ivec4 blocks, padding
// included (0: the layouts' contract), are whole blocks of the output and together they are all
// of it: one invocation per input block, which it moves (REQUANT: requantized, padding bytes
// kept 0) to its place in the output. Each dispatch visits its own input's blocks only, not all
// the output's words. lavapipe (Xeon, GPU time): Swin-T's patch merging, 4 x (1, 28, 28, 96)
// along W of 4W4C, WORDS 4.7 ms, INPUT a word an invocation 1.8, a block an invocation 0.56;
// its 4H4W ones, 4 x (1, 14, 14, 192) along W, 2.9 -> 1.25 -> 0.46.
// TEXEL (INPUT): the blocks through texel fetches, the output by 64-bit stores (texel.glsl).
//! variant
//! variant REQUANT
//! variant WORDS
//! variant WORDS REQUANT
//! variant INPUT
//! variant INPUT REQUANT
//! variant INPUT TEXEL
//! variant INPUT REQUANT TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int LAYOUT = LAYOUT_4W4C;
layout(constant_id = 4) const int DIM = 1;        // 0..3 of (N, C, H, W)

#ifdef INPUT
IVEC4_INPUT(0, src4)
IVEC4_OUTPUT(1, dst4)
#else
layout(std430, binding = 0) readonly buffer In { int src[]; };
layout(std430, binding = 1) buffer Out { int dst[]; };
#endif
layout(push_constant) uniform Params {
    ivec4 out_shape;
    ivec4 in_shape;
    int off, in_zp, m, s, out_zp;
} p;

#ifdef INPUT
void main() {
    const int blk = linear_invocation();
    if (4 * blk >= packed_words(LAYOUT, p.in_shape)) return;
    ivec4 e = int8x4_element(LAYOUT, 4 * blk, 0, p.in_shape);   // the block's first element
    ivec4 words = LOAD4(src4, blk);
#ifdef REQUANT
    // its real bytes a word (4W4C: channels, 4H4W: columns) and real words (widths, rows)
    const int bytes = LAYOUT == LAYOUT_4W4C ? p.in_shape.y - e.y : p.in_shape.w - e.w;
    const int real = LAYOUT == LAYOUT_4W4C ? p.in_shape.w - e.w : p.in_shape.z - e.z;
    [[unroll]] for (int j = 0; j < 4; ++j) {
        ivec4 v = unpack_int8x4(words[j]);
        [[unroll]] for (int b = 0; b < 4; ++b) v[b] = requantize(v[b] - p.in_zp, p.m, p.s, p.out_zp, -128, 127);
        words[j] = pack_int8x4(v) & (j < real ? byte_mask(bytes) : 0);   // padding bytes stay 0
    }
#endif
    e[DIM] += p.off;
    STORE4(dst4, int8x4_locate(LAYOUT, e, p.out_shape).x / 4, words);
}
#elif defined(WORDS)
void main() {
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, p.out_shape)) return;
    ivec4 e = int8x4_element(LAYOUT, i, 0, p.out_shape);     // byte 0's: the word's place
    if (!in_bounds(e, p.out_shape)) {
        dst[i] = 0;                                          // padding (every dispatch: no order needed)
        return;
    }
    int k = e[DIM] - p.off;
    if (k < 0 || k >= p.in_shape[DIM]) return;                // another input's
    const int bytes = LAYOUT == LAYOUT_4W4C ? p.out_shape.y - e.y : p.out_shape.w - e.w;   // real ones
    e[DIM] = k;
    int word = src[int8x4_locate(LAYOUT, e, p.in_shape).x];  // its byte 0 is e's: the same word
#ifdef REQUANT
    ivec4 v = unpack_int8x4(word);
    for (int b = 0; b < 4; ++b) v[b] = requantize(v[b] - p.in_zp, p.m, p.s, p.out_zp, -128, 127);
    word = pack_int8x4(v) & byte_mask(bytes);                // padding bytes stay 0
#endif
    dst[i] = word;
}
#else
void main() {
    int i = linear_invocation();
    if (i >= packed_words(LAYOUT, p.out_shape)) return;
    ivec4 v = ivec4(0);
    bool old = false;
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(LAYOUT, i, b, p.out_shape);
        if (!in_bounds(e, p.out_shape)) continue;
        int k = e[DIM] - p.off;
        if (k < 0) {
            old = true;
            v[b] = 256;   // marker: take the byte already in the output
        } else if (k < p.in_shape[DIM]) {
            e[DIM] = k;
            ivec2 at = int8x4_locate(LAYOUT, e, p.in_shape);
            int q = int8_at(src[at.x], at.y);
#ifdef REQUANT
            q = requantize(q - p.in_zp, p.m, p.s, p.out_zp, -128, 127);
#endif
            v[b] = q;
        }
    }
    if (old) {
        ivec4 prev = unpack_int8x4(dst[i]);
        v = mix(v, prev, equal(v, ivec4(256)));
    }
    dst[i] = pack_int8x4(v);
}
#endif
