#version 450
#extension GL_GOOGLE_include_directive : require
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
// One invocation assembles one destination word from its four bytes; padding bytes are 0.
// WORDS, where every destination word is a whole source word (a frame or channel-block gather
// in 4W4C, a pad along N or H), all padding or all fill: view holds a source word a destination
// word (-1: 0; -2: `fill` in all four bytes), 4 bytes a word instead of 16.
// BLOCKS, where every destination ivec4 is a whole source ivec4 (a word map whose four words
// run on from an aligned source word; a padding word of the destination may take a source
// word that is padding too), all padding or all fill: view holds a source ivec4 an ivec4, one
// invocation an ivec4.
//! variant FILL
//! variant KEEP
//! variant MAP
//! variant WORDS
//! variant BLOCKS
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int SRC = LAYOUT_4W4C;
layout(constant_id = 4) const int DST = LAYOUT_4H4W;

layout(std430, binding = 0) readonly buffer In { int src[]; };
#ifdef KEEP
layout(std430, binding = 1) buffer Out { int dst[]; };
#else
layout(std430, binding = 1) writeonly buffer Out { int dst[]; };
#endif
// D[rank], lo[rank], size[rank], ss[rank]
layout(std430, binding = 2) readonly buffer View { int view[]; };
layout(push_constant) uniform Params {
    ivec4 src_shape, dst_shape;   // (N, C, H, W) as the layouts index them (ROW of rank > 4: (1, 1, 1, numel))
    int rank, sbase, fill;
} p;

layout(std430, binding = 2) readonly buffer View4 { ivec4 view4[]; };   // MAP: the same words by four
#ifdef BLOCKS
layout(std430, binding = 0) readonly buffer In4 { ivec4 src4[]; };
layout(std430, binding = 1) writeonly buffer Out4 { ivec4 dst4[]; };
#endif

void main() {
    int i = linear_invocation();
#if defined(BLOCKS)
    if (4 * i >= packed_words(DST, p.dst_shape)) return;
    int k = view[i];
    dst4[i] = k >= 0 ? src4[k] : ivec4(k == -2 ? pack_int8x4(ivec4(p.fill)) : 0);
    return;
#endif
    if (i >= packed_words(DST, p.dst_shape)) return;
#if defined(WORDS)
    int k = view[i];
    dst[i] = k >= 0 ? src[k] : (k == -2 ? pack_int8x4(ivec4(p.fill)) : 0);
#elif defined(MAP)
    ivec4 m = view4[i], v;
    for (int b = 0; b < 4; ++b)
        v[b] = m[b] >= 0 ? int8_at(src[m[b] >> 2], m[b] & 3) : (m[b] == -2 ? p.fill : 0);
    dst[i] = pack_int8x4(v);
#else
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
#endif
}
