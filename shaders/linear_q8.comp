#version 450
#extension GL_GOOGLE_include_directive : require
// int8 GEMM on 4H4W activations: acc[r, n] = sum_k x[r, k] * w[n, k]  (int32), then one of
//   OUT_Q8 (linear_q8):        out = requantize(acc + bias_eff[n], m[n], s[n], out_zp, qmin, qmax)
//                              bias_eff[n] = bias[n] - x_zp * sum_k w[n, k]   (folded on the host)
//   OUT_F32 (linear_q8_fout):  out = f32(acc + corr[n]) * scale[n] + bias[n],  corr[n] = -x_zp * sum_k w[n, k]
//   OUT_F32 ROW_QPARAMS (linear_dynamic):
//                              out = f32(acc - zp[r] * wsum[n]) * (row_scale[r] * w_scale[n]) + bias[n]
//
// Tiling. A workgroup is one subgroup of SG lanes; it owns TM rows x SG*TN columns and lane l
// owns all TM rows x the TN columns of column tile (group * SG + l). Per k-block of 4:
//   w: each lane loads its own TN/4 ivec4 (4 k x 4 n each);
//   x: the TM/4 ivec4 (4 rows x 4 k each) are the same for every lane, so the lanes load them
//      together, KSTEP k-blocks at a time (one ivec4 a lane), and pass them round with
//      subgroupShuffle. Every unpacked x word is reused for TN columns, every w word for TM rows.
// Why: on lavapipe an ivec4 buffer load costs about 400 multiply-adds per lane (it loads lane
// by lane, with a bounds check each), so each byte is loaded once per subgroup; a shuffle costs
// about 10 multiply-adds: 4.5x faster than the same tile with every lane loading its own x.
// Loops with a constant trip count are [[unroll]]: rolled, they index the register arrays
// dynamically (lavapipe: 2.5x slower). The PLAIN variant (SG = 1, any workgroup width) needs
// no subgroup operations: every invocation loads its own x.
//! variant OUT_Q8
//! variant OUT_F32
//! variant OUT_F32 ROW_QPARAMS
//! variant OUT_Q8 PLAIN
//! variant OUT_F32 PLAIN
//! variant OUT_F32 ROW_QPARAMS PLAIN
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"

layout(constant_id = 3) const int TM = 32;    // rows per workgroup, a multiple of 4
layout(constant_id = 4) const int TN = 4;     // columns per lane, a multiple of 4
layout(constant_id = 5) const int SG = 8;     // lanes sharing x: workgroup size = subgroup size (PLAIN: 1)
layout(constant_id = 6) const int KSTEP = 1;  // k-blocks per x load: SG / gcd(SG, TM/4)
const int TM4 = TM / 4, TN4 = TN / 4;
const int XREGS = KSTEP * TM4 / SG;           // x ivec4 each lane holds per step

// x: 4H4W seen as one matrix of RB*4 rows (batch b, row h at packed row b*Hp + h):
//    ivec4 (rb*K4 + kb) holds rows 4rb..4rb+3 (one per int32) x k 4kb..4kb+3 (one per byte).
layout(std430, binding = 0) readonly buffer X { ivec4 x[]; };
// w: packed on the host (vkq/ops/linear.py:pack_weight) with N padded to NT*TN columns and K to
//    K4w = KSTEP * ceil(K4 / KSTEP) blocks, zeros: ivec4 ((nt*K4w + kb)*TN4 + j) holds
//    int32 i = k 4kb+i, byte b = n nt*TN + 4j + b.
layout(std430, binding = 1) readonly buffer W { ivec4 w[]; };
// per output column n (padded like w), floats as their bits:
//   OUT_Q8 (bias_eff, m, s, -);  OUT_F32 (corr, scale, bias, -);  ROW_QPARAMS (wsum, w_scale, bias, -)
layout(std430, binding = 2) readonly buffer Chan { ivec4 chan[]; };
#ifdef OUT_Q8
layout(std430, binding = 3) writeonly buffer Out { ivec4 out_q[]; };  // 4H4W, rows as x
#else
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; };  // (batch * H, N) row-major
#endif
#ifdef ROW_QPARAMS
layout(std430, binding = 4) readonly buffer RowQ { vec2 rowq[]; };   // (scale, zero point) per row
#endif

layout(push_constant) uniform Params {
    int RB;   // row blocks of x: batch * Hp / 4
    int H;    // rows of each batch matrix (Hp = up4(H))
    int K4;   // k blocks of x: up4(K) / 4
    int N;    // output columns
    int NT;   // column tiles: ceil(N / TN)
    int out_zp, qmin, qmax;
} p;

#ifdef PLAIN
ivec4 share(ivec4 v, int lane) { return v; }
#else
ivec4 share(ivec4 v, int lane) { return subgroupShuffle(v, lane); }
#endif

void main() {
#ifdef PLAIN
    const int lane = 0;
#else
    int lane = int(gl_SubgroupInvocationID);
#endif
    int nt = int(gl_GlobalInvocationID.x);   // this lane's column tile
    int rb0 = int(gl_WorkGroupID.y) * TM4;   // first row block of the workgroup
    int K4w = (p.K4 + KSTEP - 1) / KSTEP * KSTEP;
    int wrow = min(nt, p.NT - 1) * K4w * TN4;   // lanes past the last tile compute a copy of it

    // x item q = s*TM4 + i of a step (k-block kb0+s, row block rb0+i) is loaded by lane q % SG
    // into register q / SG. Rows and k past the end re-read the last block (w is 0 there).
    int xrow[XREGS], xk[XREGS];
    [[unroll]] for (int c = 0; c < XREGS; ++c) {
        int q = c * SG + lane;
        xrow[c] = min(rb0 + q % TM4, p.RB - 1) * p.K4;
        xk[c] = q / TM4;
    }

    ivec4 acc[TM][TN4];   // acc[row][j] = columns nt*TN + 4j .. +3
    [[unroll]] for (int r = 0; r < TM; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) acc[r][j] = ivec4(0);

    for (int kb0 = 0; kb0 < K4w; kb0 += KSTEP) {
        ivec4 xr[XREGS];
        [[unroll]] for (int c = 0; c < XREGS; ++c) xr[c] = x[xrow[c] + min(kb0 + xk[c], p.K4 - 1)];
        [[unroll]] for (int s = 0; s < KSTEP; ++s) {
            ivec4 wv[TN4][4];   // wv[j][kk] = w[n = nt*TN + 4j + (0..3), k = 4(kb0+s) + kk]
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                ivec4 word = w[wrow + (kb0 + s) * TN4 + j];
                [[unroll]] for (int kk = 0; kk < 4; ++kk) wv[j][kk] = unpack_int8x4(word[kk]);
            }
            [[unroll]] for (int i = 0; i < TM4; ++i) {
                int q = s * TM4 + i;
                ivec4 xb = share(xr[q / SG], q % SG);   // rows 4(rb0+i).., k 4(kb0+s)..
                [[unroll]] for (int rr = 0; rr < 4; ++rr) {
                    ivec4 xs = unpack_int8x4(xb[rr]);
                    [[unroll]] for (int j = 0; j < TN4; ++j)
                        acc[4 * i + rr][j] += xs.x * wv[j][0] + xs.y * wv[j][1] + xs.z * wv[j][2] + xs.w * wv[j][3];
                }
            }
        }
    }
    if (nt >= p.NT) return;

    // The epilogue copies acc with constant indices (so acc stays in registers) and then runs
    // rolled loops: one copy of the requantization code, which SwiftShader compiles in 0.2 s
    // instead of 5 s for TM*TN unrolled copies.
    int Hp = up4(p.H), N4 = up4(p.N) / 4;
    [[unroll]] for (int j = 0; j < TN4; ++j) {
        int nb = nt * TN4 + j;          // column block: n = 4nb .. 4nb+3
        if (nb >= N4) break;
        ivec4 tile[TM];
        [[unroll]] for (int r = 0; r < TM; ++r) tile[r] = acc[r][j];
        ivec4 c0 = chan[4 * nb], c1 = chan[4 * nb + 1], c2 = chan[4 * nb + 2], c3 = chan[4 * nb + 3];
        bvec4 col_ok = lessThan(4 * nb + ivec4(0, 1, 2, 3), ivec4(p.N));
        for (int i = 0; i < TM4; ++i) {
            int rb = rb0 + i;
            if (rb >= p.RB) break;
#ifdef OUT_Q8
            ivec4 bias = ivec4(c0.x, c1.x, c2.x, c3.x), m = ivec4(c0.y, c1.y, c2.y, c3.y), sh = ivec4(c0.z, c1.z, c2.z, c3.z);
            ivec4 words;
            for (int rr = 0; rr < 4; ++rr) {
                ivec4 a = tile[4 * i + rr] + bias, q = ivec4(0);
                bool row_ok = (4 * rb + rr) % Hp < p.H;   // padding rows and columns stay 0
                for (int b = 0; b < 4; ++b)
                    if (row_ok && col_ok[b]) q[b] = requantize(a[b], m[b], sh[b], p.out_zp, p.qmin, p.qmax);
                words[rr] = pack_int8x4(q);
            }
            out_q[rb * N4 + nb] = words;
#else
            for (int rr = 0; rr < 4; ++rr) {
                int prow = 4 * rb + rr, h = prow % Hp;
                if (h >= p.H) continue;
                int row = prow / Hp * p.H + h;   // row in the (batch * H, N) float output
                ivec4 a = tile[4 * i + rr];
                vec4 scale = intBitsToFloat(ivec4(c0.y, c1.y, c2.y, c3.y));
#ifdef ROW_QPARAMS
                vec2 rq = rowq[row];
                a -= int(rq.y) * ivec4(c0.x, c1.x, c2.x, c3.x);
                precise vec4 sc = rq.x * scale;
                scale = sc;
#else
                a += ivec4(c0.x, c1.x, c2.x, c3.x);
#endif
                precise vec4 y = vec4(a) * scale + intBitsToFloat(ivec4(c0.z, c1.z, c2.z, c3.z));
                for (int b = 0; b < 4; ++b)
                    if (col_ok[b]) out_f[row * p.N + 4 * nb + b] = y[b];
            }
#endif
        }
    }
}
