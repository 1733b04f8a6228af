#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// int8 4W4C <-> 4H4W of one shape (a conv's output read by a matmul, and back): one invocation
// moves the 4x4x4 cube (4 channels x 4 rows x 4 widths) at (n, c4, h4, w4) — four ivec4 blocks
// in, the byte transpose in registers, four ivec4 blocks out. repack.comp's general gather
// assembles every byte from its own index computation and load: 4 MiB took 86-100 ms on
// lavapipe (0.01 of copy bandwidth), 3.0-3.9 ms with this (torch int8 channels_last: 6.5 ms).
// Then, A-B-A-B on lavapipe (512 bits), 4 MiB 4W4C -> 4H4W: the byte transpose in two rounds of
// masked shifts 1.33 -> 1.20 ms, the shape as specialization constants -> 0.89, 4x4 tiles of
// cubes (16 invocations) -> 0.76 ms, 0.48-0.51 of copy bandwidth (was 0.25-0.28); before_store
// (common.glsl: the transpose stays on vectors, not in the store's lane loop) -> 0.63 ms. Tiles
// of 2 x 8 cubes: no better. SwiftShader, the same 4 MiB: 8.6 -> 4.9 ms. The price of the
// constant shape: a program with dynamic shapes builds this pipeline once per shape (a small one).
// PAIR (Device.wide_stores: llvmpipe, where a store's cost is its passes over the lanes, not its
// bytes): two cubes an invocation, each pair of output blocks one 32-byte store. A-B-A-B, GPU
// time, 2026-11-27: 4 MiB 4W4C -> 4H4W 0.80x / 0.61x in two runs, 4H4W -> 4W4C 0.95x / 0.96x,
// 128 @56 4W4C -> 4H4W 0.88x / 0.84x.
//   4W4C block (n, h, w4, c4): word r = width 4*w4 + r, byte b = channel 4*c4 + b
//   4H4W block (n, c, h4, w4): word k = row 4*h4 + k,   byte r = width 4*w4 + r
// Padding bytes stay 0: a 4W4C block's words past W are 0 and so are a 4H4W block's bytes past W;
// rows past H are skipped on read (0) and on write; 4H4W has no channel padding, 4W4C's is 0.
//! variant TO_4H4W
//! variant TO_4W4C
//! variant TO_4H4W TEXEL
//! variant TO_4W4C TEXEL
#include "common.glsl"
#include "texel.glsl"

IVEC4_INPUT(0, src)   // texel.glsl

// the 4x4 byte transpose: byte r of word b out = byte b of word r in. Two rounds of masked
// shifts, 7 operations a word (byte by byte: 14)
ivec4 transpose_bytes(ivec4 w) {
    const int LO8 = 0x00FF00FF, HI8 = ~LO8, LO16 = 0xFFFF, HI16 = ~LO16;
    ivec2 lo = (w.xz & LO8) | ((w.yw & LO8) << 8);        // bytes 0 and 2 of each pair, interleaved
    ivec2 hi = ((w.xz >> 8) & LO8) | (w.yw & HI8);        // bytes 1 and 3
    return ivec4((lo.x & LO16) | (lo.y << 16), (hi.x & LO16) | (hi.y << 16),
                 ((lo.x >> 16) & LO16) | (lo.y & HI16), ((hi.x >> 16) & LO16) | (hi.y & HI16));
}
IVEC4_PAIR_OUTPUT(1, dst)   // texel.glsl (PAIR: STORE4_PAIR)
// the shape: specialization constants, so that the index arithmetic divides by constants (a
// division by a push constant runs lane by lane on CPU drivers)
layout(constant_id = 3) const int N = 1;
layout(constant_id = 4) const int C = 1;
layout(constant_id = 5) const int H = 1;
layout(constant_id = 6) const int W = 1;
// 1: two cubes an invocation, adjacent where the output's blocks are (width blocks for 4H4W, W4
// even; channel blocks for 4W4C, C4 even), each output pair written as one STORE4_PAIR
layout(constant_id = 7) const int PAIR = 0;
#ifdef TO_4H4W
const int PC = 1, PWB = 1 + PAIR;               // cubes an invocation takes along c4 and w4
#else
const int PC = 1 + PAIR, PWB = 1;
#endif

void main() {
    const int C4 = (C + 3) / 4, H4 = (H + 3) / 4, W4 = (W + 3) / 4;
    // 16 consecutive invocations take a 4x4 tile of (channel block, width block) cubes, so that
    // both sides move whole 64-byte runs: 4 consecutive channel blocks of a 4W4C row, 4
    // consecutive width blocks of a 4H4W row (one cube an invocation along either alone left the
    // other side strided)
    const int CT = (C4 + 4 * PC - 1) / (4 * PC), WT = (W4 + 4 * PWB - 1) / (4 * PWB);
    int i = linear_invocation();
    int lane = i & 15, t = i >> 4;               // t = ((n*H4 + h4)*CT + ct)*WT + wt
    int w4 = ((t % WT) * 4 + (lane & 3)) * PWB; t /= WT;
    int c4 = ((t % CT) * 4 + (lane >> 2)) * PC; t /= CT;
    int h4 = t % H4, n = t / H4;
    if (n >= N || c4 >= C4 || w4 >= W4) return;
    int nh = min(4, H - 4 * h4);
    ivec4 o[2][4];                               // o[s][j]: output block j of cube s
#ifdef TO_4H4W
    [[unroll]] for (int s = 0; s <= PAIR; ++s) {     // the cube at width block w4 + s
        ivec4 a[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
        for (int k = 0; k < 4; ++k)              // a[k] = 4W4C block of row 4*h4 + k
            if (k < nh) a[k] = LOAD4(src, ((n * H + 4 * h4 + k) * W4 + w4 + s) * C4 + c4);
        ivec4 tb[4];                             // tb[k][b]: byte r = byte b (channel) of width r's word
        [[unroll]] for (int k = 0; k < 4; ++k) tb[k] = transpose_bytes(a[k]);
        [[unroll]] for (int b = 0; b < 4; ++b)   // 4H4W block of channel 4*c4 + b: word k, byte r
            o[s][b] = before_store(ivec4(tb[0][b], tb[1][b], tb[2][b], tb[3][b]));
    }
    int nc = min(4, C - 4 * c4);
    for (int b = 0; b < 4; ++b) {
        if (b >= nc) break;
        const int idx = ((n * C + 4 * c4 + b) * H4 + h4) * W4 + w4;
        if (PAIR != 0)
            STORE4_PAIR(dst, idx, o[0][b], o[PAIR][b]);
        else
            STORE4(dst, idx, o[0][b]);
    }
#else
    [[unroll]] for (int s = 0; s <= PAIR; ++s) {     // the cube at channel block c4 + s
        ivec4 a[4] = ivec4[4](ivec4(0), ivec4(0), ivec4(0), ivec4(0));
        int nc = min(4, C - 4 * (c4 + s));
        for (int b = 0; b < 4; ++b)              // a[b] = 4H4W block of channel 4*(c4 + s) + b
            if (b < nc) a[b] = LOAD4(src, ((n * C + 4 * (c4 + s) + b) * H4 + h4) * W4 + w4);
        // 4W4C block of row 4*h4 + k: word r, byte b = byte r (width) of channel b's row-k word
        [[unroll]] for (int k = 0; k < 4; ++k)
            o[s][k] = before_store(transpose_bytes(ivec4(a[0][k], a[1][k], a[2][k], a[3][k])));
    }
    for (int k = 0; k < 4; ++k) {
        if (k >= nh) break;
        const int idx = ((n * H + 4 * h4 + k) * W4 + w4) * C4 + c4;
        if (PAIR != 0)
            STORE4_PAIR(dst, idx, o[0][k], o[PAIR][k]);
        else
            STORE4(dst, idx, o[0][k]);
    }
#endif
}
