#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Float GEMM: out[r, n] = (sum_k x[r, k] * w[n, k]) * scale[n] + bias[n], float accumulation.
//   W_INT8 (linear_weight_only): w int8, packed as for linear_q8 (4 k x 4 n an ivec4), scale = w_scale
//   W_F32  (the fp32 baseline of bench/bench_linear.py): w float, the same tiling, 4 vec4 a block
// Same tiling as linear_q8.comp: a workgroup is one subgroup of SG lanes owning TM rows x SG*TN
// columns; a lane owns TN columns; the x values (TM rows x 4 k per k-block, one vec4 a row) are
// loaded once per subgroup, KSTEP k-blocks at a time, and passed round with subgroupShuffle.
// PLAIN: no subgroup operations, SG = 1, every invocation loads its own x.
// VEC4 (K % 4 == 0): x read as one vec4 per row and k-block instead of 4 floats; a lane loaded
// 16 floats per k-block for 1 weight ivec4 at TM = 32, and lavapipe loads lane by lane:
// linear_weight_only 128x384x384 1.82 -> 1.52 ms (CPU time, one interleaved run).
// At most 4 rows run as linear_gemv_float.comp instead (1x2048x2048: 3.07 -> 1.27 ms).
//! variant W_INT8
//! variant W_F32
//! variant W_INT8 PLAIN
//! variant W_F32 PLAIN
//! variant W_INT8 VEC4
//! variant W_F32 VEC4
//! variant W_INT8 PLAIN VEC4
//! variant W_F32 PLAIN VEC4
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#include "common.glsl"
#include "int8x4.glsl"

layout(constant_id = 3) const int TM = 32;    // rows per workgroup
layout(constant_id = 4) const int TN = 4;     // columns per lane, a multiple of 4
layout(constant_id = 5) const int SG = 8;     // lanes sharing x: workgroup size = subgroup size (PLAIN: 1)
layout(constant_id = 6) const int KSTEP = 1;  // k-blocks per x load: SG / gcd(SG, TM)
const int TN4 = TN / 4;
const int XREGS = KSTEP * TM / SG;            // x vec4 each lane holds per step

#ifdef VEC4
layout(std430, binding = 0) readonly buffer X { vec4 x4[]; };   // (R, K / 4): K % 4 == 0
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };   // (R, K) row-major
#endif
#ifdef W_INT8
// ivec4 ((nt*K4w + kb)*TN4 + j): int32 i is k = 4kb+i, byte b is n = nt*TN + 4j + b (zero padded)
layout(std430, binding = 1) readonly buffer W { ivec4 w[]; };
#else
// vec4 (((nt*K4w + kb)*TN4 + j)*4 + i): k = 4kb+i, component b is n = nt*TN + 4j + b (zero padded)
layout(std430, binding = 1) readonly buffer W { vec4 w[]; };
#endif
layout(std430, binding = 2) readonly buffer Chan { vec2 chan[]; };   // (scale, bias) per column
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; }; // (R, N) row-major

layout(push_constant) uniform Params {
    int R;    // rows
    int K;
    int N;
    int NT;   // column tiles: ceil(N / TN)
} p;

#ifdef PLAIN
vec4 share(vec4 v, int lane) { return v; }
#else
vec4 share(vec4 v, int lane) { return subgroupShuffle(v, lane); }
#endif

void main() {
#ifdef PLAIN
    const int lane = 0;
#else
    int lane = int(gl_SubgroupInvocationID);
#endif
    int nt = int(gl_GlobalInvocationID.x);   // this lane's column tile
    int r0 = int(gl_WorkGroupID.y) * TM;     // first row of the workgroup
    int K4 = (p.K + 3) / 4, K4w = (K4 + KSTEP - 1) / KSTEP * KSTEP;
    int wrow = min(nt, p.NT - 1) * K4w * TN4;   // lanes past the last tile compute a copy of it

    // x item q = s*TM + i of a step (row r0+i, k 4(kb0+s)..+3) is loaded by lane q % SG into
    // register q / SG. Rows past the end re-read the last row; k past the end reads 0.
    int xrow[XREGS], xk[XREGS];
    [[unroll]] for (int c = 0; c < XREGS; ++c) {
        int q = c * SG + lane;
        xrow[c] = min(r0 + q % TM, p.R - 1) * p.K;
        xk[c] = 4 * (q / TM);
    }

    vec4 acc[TM][TN4];   // acc[row][j] = columns nt*TN + 4j .. +3
    [[unroll]] for (int r = 0; r < TM; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = vec4(0.0);

    for (int kb0 = 0; kb0 < K4w; kb0 += KSTEP) {
        vec4 xr[XREGS];
#ifdef VEC4
        [[unroll]] for (int c = 0; c < XREGS; ++c) {   // one vec4 load: row * K is a multiple of 4
            int kb = kb0 + xk[c] / 4;
            vec4 v = x4[xrow[c] / 4 + min(kb, K4 - 1)];
            xr[c] = kb < K4 ? v : vec4(0.0);
        }
#else
        [[unroll]] for (int c = 0; c < XREGS; ++c) {
            int k = 4 * kb0 + xk[c];
            [[unroll]] for (int t = 0; t < 4; ++t) {   // select, not branch: x past K may be inf
                float v = x[xrow[c] + min(k + t, p.K - 1)];
                xr[c][t] = k + t < p.K ? v : 0.0;
            }
        }
#endif
        [[unroll]] for (int s = 0; s < KSTEP; ++s) {
            vec4 wv[TN4][4];   // wv[j][kk] = w[n = nt*TN + 4j + (0..3), k = 4(kb0+s) + kk]
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                int blk = wrow + (kb0 + s) * TN4 + j;
#ifdef W_INT8
                ivec4 word = w[blk];
                [[unroll]] for (int kk = 0; kk < 4; ++kk) wv[j][kk] = vec4(unpack_int8x4(word[kk]));
#else
                [[unroll]] for (int kk = 0; kk < 4; ++kk) wv[j][kk] = w[4 * blk + kk];
#endif
            }
            [[unroll]] for (int i = 0; i < TM; ++i) {
                int q = s * TM + i;
                vec4 xs = share(xr[q / SG], q % SG);   // x[r0+i, 4(kb0+s) .. +3]
                [[unroll]] for (int j = 0; j < TN4; ++j)
                    acc[i][j] += xs.x * wv[j][0] + xs.y * wv[j][1] + xs.z * wv[j][2] + xs.w * wv[j][3];
            }
        }
    }
    if (nt >= p.NT) return;

    [[unroll]] for (int j = 0; j < TN4; ++j) {
        int n0 = nt * TN + 4 * j;
        if (n0 >= p.N) break;
        vec2 c0 = chan[n0], c1 = chan[n0 + 1], c2 = chan[n0 + 2], c3 = chan[n0 + 3];
        vec4 scale = vec4(c0.x, c1.x, c2.x, c3.x), bias = vec4(c0.y, c1.y, c2.y, c3.y);
        [[unroll]] for (int i = 0; i < TM; ++i) {
            int r = r0 + i;
            if (r >= p.R) break;
            vec4 y = acc[i][j] * scale + bias;
            [[unroll]] for (int b = 0; b < 4; ++b)
                if (n0 + b < p.N) out_f[r * p.N + n0 + b] = y[b];
        }
    }
}
