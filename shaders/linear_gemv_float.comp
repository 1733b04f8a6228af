#version 450
#extension GL_GOOGLE_include_directive : require
// Float GEMV: linear_float.comp's out[r, n] = (sum_k x[r, k] * w[n, k]) * scale[n] + bias[n] for
// at most 4 rows (linear_weight_only of a decoder's batch-1 step), tiled as linear_gemv.comp:
// a workgroup owns TN columns, its L lanes split K (lane l takes k-blocks l, l + L, ...), so
// every weight byte is read once, and the lanes' partial sums are added by subgroupAdd (PLAIN:
// shared memory). Only the MR = min(R, 4) real rows are computed. Float sums in another order
// than numpy's: results agree to rounding, as linear_float's.
//   W_INT8: w int8, pack_weight(w, TN, L) (ivec4 = 4 k x 4 n, int32 i = k, byte b = n)
//   W_F32:  w float32, the same tiling, 4 vec4 a block (the fp32 baseline of the benchmark)
//   VEC4:   K % 4 == 0, x read as vec4
//! variant W_INT8
//! variant W_F32
//! variant W_INT8 VEC4
//! variant W_F32 VEC4
//! variant W_INT8 PLAIN
//! variant W_F32 PLAIN
//! variant W_INT8 PLAIN VEC4
//! variant W_F32 PLAIN VEC4
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int MR = 4;     // rows computed: min(R, 4)
layout(constant_id = 4) const int TN = 16;    // columns per workgroup, a multiple of 4
const int TN4 = TN / 4;
const int L = int(gl_WorkGroupSize.x);

#ifdef VEC4
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };   // (R, K / 4)
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };   // (R, K) row-major
#endif
#ifdef W_INT8
layout(std430, binding = 1) readonly buffer W { ivec4 w[]; };
#else
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
#endif
layout(std430, binding = 2) readonly buffer Chan { vec2 chan[]; };   // (scale, bias) per column
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; }; // (R, N) row-major

layout(push_constant) uniform Params {
    int R, K, N;
    int NT;   // column tiles: ceil(N / TN)
} p;

#ifdef PLAIN
shared vec4 part[MR * TN4][L];
#endif

// x[row, 4kb .. 4kb+3], 0 past K
vec4 load4(int row, int kb) {
#ifdef VEC4
    return x4[row * (p.K / 4) + kb];
#else
    vec4 v = vec4(0.0);
    [[unroll]] for (int t = 0; t < 4; ++t) {   // select, not branch: x past K may be inf
        int k = 4 * kb + t;
        float xv = x[row * p.K + min(k, p.K - 1)];
        v[t] = k < p.K ? xv : 0.0;
    }
    return v;
#endif
}

// out = sums * scale + bias for the MR rows and columns 4nb .. 4nb+3 (those < N)
void store(int nb, vec4 sums[MR]) {
    int n0 = 4 * nb;
    if (n0 >= p.N) return;
    vec2 c0 = chan[n0], c1 = chan[n0 + 1], c2 = chan[n0 + 2], c3 = chan[n0 + 3];
    vec4 scale = vec4(c0.x, c1.x, c2.x, c3.x), bias = vec4(c0.y, c1.y, c2.y, c3.y);
    for (int r = 0; r < MR; ++r) {
        vec4 y = sums[r] * scale + bias;
        for (int b = 0; b < 4; ++b)
            if (n0 + b < p.N) out_f[r * p.N + n0 + b] = y[b];
    }
}

void main() {
    int lane = int(gl_LocalInvocationID.x);
    int nt = int(gl_WorkGroupID.x);
    int K4 = (p.K + 3) / 4, K4w = (K4 + L - 1) / L * L;
    int wbase = nt * K4w * TN4;

    vec4 acc[MR][TN4];   // acc[r][j] = row r, columns nt*TN + 4j .. +3
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = vec4(0.0);

    for (int kb = lane; kb < K4w; kb += L) {
        vec4 xv[MR];     // k-blocks past K: x reads its last block, w is 0 there
        [[unroll]] for (int r = 0; r < MR; ++r) xv[r] = load4(r, min(kb, K4 - 1));
        [[unroll]] for (int j = 0; j < TN4; ++j) {
            vec4 w0, w1, w2, w3;   // wk = w[n = nt*TN + 4j + (0..3), k = 4kb + k]
#ifdef W_INT8
            ivec4 word = w[wbase + kb * TN4 + j];
            w0 = vec4(unpack_int8x4(word.x)); w1 = vec4(unpack_int8x4(word.y));
            w2 = vec4(unpack_int8x4(word.z)); w3 = vec4(unpack_int8x4(word.w));
#else
            int blk = 4 * (wbase + kb * TN4 + j);
            w0 = w[blk]; w1 = w[blk + 1]; w2 = w[blk + 2]; w3 = w[blk + 3];
#endif
            [[unroll]] for (int r = 0; r < MR; ++r)
                acc[r][j] += xv[r].x * w0 + xv[r].y * w1 + xv[r].z * w2 + xv[r].w * w3;
        }
    }

    // add up the lanes' partial sums; lane l then writes column blocks l, l + L, ...
#ifdef PLAIN
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) part[r * TN4 + j][lane] = acc[r][j];
    barrier();
    for (int j = lane; j < TN4; j += L) {
        vec4 sums[MR];
        for (int r = 0; r < MR; ++r) {
            sums[r] = vec4(0.0);
            for (int l = 0; l < L; ++l) sums[r] += part[r * TN4 + j][l];
        }
        store(nt * TN4 + j, sums);
    }
#else
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = subgroupAdd(acc[r][j]);
    [[unroll]] for (int j = 0; j < TN4; ++j) {
        if (j % L != lane) continue;
        vec4 sums[MR];
        [[unroll]] for (int r = 0; r < MR; ++r) sums[r] = acc[r][j];
        store(nt * TN4 + j, sums);
    }
#endif
}
