#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// int8 gather from one packed layout into another through a strided view (vkq/ops/shape.py):
// every op that moves int8 values without changing them (repack, reshape, permute, slice,
// select, expand, cat, split, unbind, constant_pad_nd) is one or more of these.
// The destination element of row-major index f, unravelled over the dims D (the destination's
// dims, merged where possible) into c:
//   inside the box lo <= c < lo + size:  src element of row-major index sbase + sum_d (c_d - lo_d) * ss_d
//   outside: FILL the value `fill` (padding), KEEP the byte dst holds (cat: a gather per input)
// MAP, for a node of one gather (every op but cat; take's constant index map): view holds, for
// each byte of the destination's packed words, the byte of the source's packed words it takes
// (-1: a padding byte, 0; -2: `fill`), made on the host (vkq/ops/shape.py:byte_map): no index
// arithmetic here. Why: the other variants unravel every
// byte through its layout and the view's dims, ~20 divisions by variables, which CPU drivers run
// lane by lane: a 3-frame gather of 1x8x32x56x56 (2.4 MB) took 54 ms on lavapipe that way.
// The map costs 4 bytes a destination byte of device memory and of reads.
// FILL / KEEP: one invocation assembles one destination word from its four bytes; padding
// bytes are 0. MAP, WORDS, BLOCKS: one invocation a destination ivec4 (4 words; a packed tensor
// is whole ivec4s), the view padded on the host to whole ivec4s of its entries.
// WORDS, where every destination word is a whole source word (a frame or channel-block gather
// in 4W4C, a pad along N or H), all padding or all fill: view holds a source word a destination
// word (-1: 0; -2: `fill` in all four bytes), 4 bytes a word instead of 16.
// BLOCKS, where every destination ivec4 is a whole source ivec4 (a word map whose four words
// run on from an aligned source word; a padding word of the destination may take a source
// word that is padding too), all padding or all fill: view holds a source ivec4 an ivec4.
// TEXEL (MAP, WORDS, BLOCKS; texel.glsl, where the device takes texel loads): the source and the
// view through texel fetches, the destination by 64-bit stores. On llvmpipe a storage buffer's
// load or store is a loop over the SIMD lanes, a texel fetch straight-line code; lavapipe at 512
// bits, GPU time, Swin-T's first attention block: MAP 4W4C (1, 56, 56, 96) -> ROW windows 2.51 ->
// 0.34 ms; WORDS select of q from qkv (64, 3, 49, 32) 0.99 -> 0.23, (64, 49, 3, 3, 32) 2.72 ->
// 0.51; BLOCKS permute (3, 64, 3, 49, 32) 0.80 -> 0.42; its 11 gathers 13.4 -> 2.8 ms.
//! variant FILL
//! variant KEEP
//! variant MAP
//! variant WORDS
//! variant BLOCKS
//! variant MAP TEXEL
//! variant WORDS TEXEL
//! variant BLOCKS TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4H4W;
layout(push_constant) uniform Params {
    ivec4 src_shape, dst_shape;   // (N, C, H, W) as the layouts index them (ROW of rank > 4: (1, 1, 1, numel))
    int rank, sbase, fill;
} p;

#if defined(MAP) || defined(WORDS) || defined(BLOCKS)
IVEC4_WORDS_INPUT(0, sw)          // the source: WORD(sw, k) its word k, LOAD4(sw, k) its ivec4 k
IVEC4_OUTPUT(1, dst4)
IVEC4_WORDS_INPUT(2, vw)          // the view (the map)

void main() {
    const int i = linear_invocation();      // destination ivec4 i
    if (4 * i >= packed_words(DST, p.dst_shape)) return;
    const int fill4 = pack_int8x4(ivec4(p.fill));
    ivec4 v;
#if defined(BLOCKS)
    const int k = WORD(vw, i);
    v = k >= 0 ? LOAD4(sw, max(k, 0)) : ivec4(k == -2 ? fill4 : 0);
#elif defined(WORDS)
    const ivec4 k = LOAD4(vw, i);
    [[unroll]] for (int b = 0; b < 4; ++b) {      // a clamped load and a select: no branch per word
        const int w = WORD(sw, max(k[b], 0));
        v[b] = k[b] >= 0 ? w : (k[b] == -2 ? fill4 : 0);
    }
#else
    [[unroll]] for (int b = 0; b < 4; ++b) {
        const ivec4 m = LOAD4(vw, 4 * i + b);     // the source byte of each of word 4i + b's bytes
        ivec4 e;
        [[unroll]] for (int c = 0; c < 4; ++c) {
            const int w = WORD(sw, max(m[c], 0) >> 2);
            e[c] = m[c] >= 0 ? int8_at(w, m[c] & 3) : (m[c] == -2 ? p.fill : 0);
        }
        v[b] = pack_int8x4(e);
    }
#endif
    STORE4(dst4, i, v);
}
#else
layout(std430, binding = 0) readonly buffer In { int src[]; };
#ifdef KEEP
layout(std430, binding = 1) buffer Out { int dst[]; };
#else
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
#endif
// D[rank], lo[rank], size[rank], ss[rank]
layout(std430, binding = 2) readonly buffer View { int view[]; };

void main() {
    int i = linear_invocation();
    if (i >= packed_words(DST, p.dst_shape)) return;
    int R = p.rank;
#ifdef KEEP
    ivec4 v = unpack_int8x4(dst[i]);
#else
    ivec4 v = ivec4(0);
#endif
    bool touched = false;
    for (int b = 0; b < 4; ++b) {
        ivec4 e = int8x4_element(DST, i, b, p.dst_shape);
        if (!in_bounds(e, p.dst_shape)) {
            v[b] = 0;
            continue;
        }
        int f = nchw_offset(e, p.dst_shape);
        int s = p.sbase;
        bool inside = true;
        for (int d = R - 1; d >= 0; --d) {
            int n = view[d], c = f % n - view[R + d];
            f /= n;
            inside = inside && uint(c) < uint(view[2 * R + d]);
            s += c * view[3 * R + d];
        }
        if (inside) {
            ivec2 at = int8x4_locate(SRC, unravel_nchw(s, p.src_shape), p.src_shape);
            v[b] = int8_at(src[at.x], at.y);
            touched = true;
        }
#ifndef KEEP
        else {
            v[b] = p.fill;
        }
#endif
    }
#ifdef KEEP
    if (touched) dst[i] = pack_int8x4(v);
#else
    dst[i] = pack_int8x4(v);
#endif
}
#endif
