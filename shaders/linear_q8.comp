#version 450
#extension GL_GOOGLE_include_directive : require
// int8 GEMM on 4H4W activations: acc[r, n] = sum_k x[r, k] * w[n, k]  (int32), then one of
//   OUT_Q8 (linear_q8):        out = requantize(acc + bias_eff[n], m[n], s[n], out_zp, qmin, qmax)
//                              bias_eff[n] = bias[n] - x_zp * sum_k w[n, k]   (folded on the host)
//   OUT_Q8 DEQUANT (linear_q8, attr dequant): that out, then f32(out - deq_zp) * deq_scale
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
// DOT: the weight block is packed transposed (a word = 4 k of one column, as an x word is 4 k of
// one row) and one integer dot product (dot4x8.glsl) does 4 multiply-adds with no unpacking:
// the variant for GPUs with 4x8 dot-product hardware (device.dot_product chooses). On the CPU
// drivers it is about as fast as unpack + multiply-add on lavapipe (0.79 vs 0.80 of the int32
// roofline, 128x384x384) and no faster on SwiftShader.
// Tried: a few rows (the batch-1 decoder case) here computed all 4 rows of a block and ran
// through all of K on one lane per column tile: weights at 0.54 of copy bandwidth on
// 1x4096x4096 (lavapipe, CPU time); that case is linear_gemv.comp now (0.82).
//! variant OUT_Q8
//! variant OUT_F32
//! variant OUT_F32 ROW_QPARAMS
//! variant OUT_Q8 PLAIN
//! variant OUT_F32 PLAIN
//! variant OUT_F32 ROW_QPARAMS PLAIN
//! variant OUT_Q8 DOT
//! variant OUT_F32 DOT
//! variant OUT_F32 ROW_QPARAMS DOT
//! variant OUT_Q8 PLAIN DOT
//! variant OUT_F32 PLAIN DOT
//! variant OUT_F32 ROW_QPARAMS PLAIN DOT
//! variant OUT_Q8 LUT
//! variant OUT_Q8 LUT PLAIN
//! variant OUT_Q8 LUT DOT
//! variant OUT_Q8 LUT PLAIN DOT
//! variant OUT_Q8 DEQUANT
//! variant OUT_Q8 DEQUANT PLAIN
//! variant OUT_Q8 DEQUANT DOT
//! variant OUT_Q8 DEQUANT PLAIN DOT
//! variant OUT_Q8 LUT DEQUANT
//! variant OUT_Q8 LUT DEQUANT PLAIN
//! variant OUT_Q8 LUT DEQUANT DOT
//! variant OUT_Q8 LUT DEQUANT PLAIN DOT
//! variant OUT_Q8 TEXEL
//! variant OUT_F32 TEXEL
//! variant OUT_F32 ROW_QPARAMS TEXEL
//! variant OUT_Q8 PLAIN TEXEL
//! variant OUT_F32 PLAIN TEXEL
//! variant OUT_F32 ROW_QPARAMS PLAIN TEXEL
//! variant OUT_Q8 DOT TEXEL
//! variant OUT_F32 DOT TEXEL
//! variant OUT_F32 ROW_QPARAMS DOT TEXEL
//! variant OUT_Q8 PLAIN DOT TEXEL
//! variant OUT_F32 PLAIN DOT TEXEL
//! variant OUT_F32 ROW_QPARAMS PLAIN DOT TEXEL
//! variant OUT_Q8 LUT TEXEL
//! variant OUT_Q8 LUT PLAIN TEXEL
//! variant OUT_Q8 LUT DOT TEXEL
//! variant OUT_Q8 LUT PLAIN DOT TEXEL
//! variant OUT_Q8 DEQUANT TEXEL
//! variant OUT_Q8 DEQUANT PLAIN TEXEL
//! variant OUT_Q8 DEQUANT DOT TEXEL
//! variant OUT_Q8 DEQUANT PLAIN DOT TEXEL
//! variant OUT_Q8 LUT DEQUANT TEXEL
//! variant OUT_Q8 LUT DEQUANT PLAIN TEXEL
//! variant OUT_Q8 LUT DEQUANT DOT TEXEL
//! variant OUT_Q8 LUT DEQUANT PLAIN DOT TEXEL
#ifndef PLAIN
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#ifdef ROW_QPARAMS
#include "float_math.glsl"
#endif
#ifdef DOT
#include "dot4x8.glsl"
#endif

layout(constant_id = 3) const int TM = 32;    // rows per workgroup, a multiple of 4
layout(constant_id = 4) const int TN = 4;     // columns per lane, a multiple of 4
layout(constant_id = 5) const int SG = 8;     // lanes sharing x: workgroup size = subgroup size (PLAIN: 1)
layout(constant_id = 6) const int KSTEP = 1;  // k-blocks per x load: SG / gcd(SG, TM/4)
const int TM4 = TM / 4, TN4 = TN / 4;
const int XREGS = KSTEP * TM4 / SG;           // x ivec4 each lane holds per step

// x: 4H4W seen as one matrix of RB*4 rows (batch b, row h at packed row b*Hp + h):
//    ivec4 (rb*K4 + kb) holds rows 4rb..4rb+3 (one per int32) x k 4kb..4kb+3 (one per byte).
IVEC4_INPUT(0, x)   // texel.glsl
// w: packed on the host (vkq/ops/linear.py:pack_weight) with N padded to NT*TN columns and K to
//    K4w = KSTEP * ceil(K4 / KSTEP) blocks, zeros: ivec4 ((nt*K4w + kb)*TN4 + j) holds
//    int32 i = k 4kb+i, byte b = n nt*TN + 4j + b;  DOT: transposed, int32 b = n, byte i = k.
IVEC4_INPUT(1, w)
// per output column n (padded like w), floats as their bits:
//   OUT_Q8 (bias_eff, bound, m, lshift | rshift << 5 | frac): requantize_clamped's constants (requant.glsl)
//   OUT_F32 (corr, scale, bias, -);  ROW_QPARAMS (wsum, w_scale, bias, -)
IVEC4_INPUT(2, chan)
#if defined(OUT_Q8) && !defined(DEQUANT)
IVEC4_OUTPUT(3, out_q)  // 4H4W, rows as x (texel.glsl)
#else
layout(std430, binding = 3) writeonly buffer Out { float out_f[]; };  // (batch * H, N) row-major
#endif
#ifdef ROW_QPARAMS
layout(std430, binding = 4) readonly buffer RowQ { vec2 rowq[]; };   // (scale, zero point) per row
layout(std430, binding = 5) readonly buffer Other { float other_f[]; };  // linear_store.glsl's epilogue
layout(constant_id = 7) const int EPI = 0;
#endif

layout(push_constant) uniform Params {
    int RB;   // row blocks of x: batch * Hp / 4
    int H;    // rows of each batch matrix (Hp = up4(H))
    int K4;   // k blocks of x: up4(K) / 4
    int N;    // output columns
    int NT;   // column tiles: ceil(N / TN)
    int out_zp, qmin, qmax;
    float deq_scale;   // DEQUANT
    int deq_zp;
} p;

#include "linear_store.glsl"

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
        [[unroll]] for (int c = 0; c < XREGS; ++c) xr[c] = LOAD4(x, xrow[c] + min(kb0 + xk[c], p.K4 - 1));
        [[unroll]] for (int s = 0; s < KSTEP; ++s) {
#ifdef DOT
            ivec4 wd[TN4];      // wd[j][b] = w[n = nt*TN + 4j + b, k = 4(kb0+s) .. +3], one word
            [[unroll]] for (int j = 0; j < TN4; ++j) wd[j] = LOAD4(w, wrow + (kb0 + s) * TN4 + j);
            [[unroll]] for (int i = 0; i < TM4; ++i) {
                int q = s * TM4 + i;
                ivec4 xb = share(xr[q / SG], q % SG);   // rows 4(rb0+i).., k 4(kb0+s)..
                [[unroll]] for (int rr = 0; rr < 4; ++rr)
                    [[unroll]] for (int j = 0; j < TN4; ++j) {
                        ivec4 a = acc[4 * i + rr][j];
                        acc[4 * i + rr][j] = ivec4(dot4x8_acc(xb[rr], wd[j].x, a.x), dot4x8_acc(xb[rr], wd[j].y, a.y),
                                                   dot4x8_acc(xb[rr], wd[j].z, a.z), dot4x8_acc(xb[rr], wd[j].w, a.w));
                    }
            }
#else
            ivec4 wv[TN4][4];   // wv[j][kk] = w[n = nt*TN + 4j + (0..3), k = 4(kb0+s) + kk]
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                ivec4 word = LOAD4(w, wrow + (kb0 + s) * TN4 + j);
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
#endif
        }
    }
    if (nt >= p.NT) return;

    // The epilogue copies acc with constant indices (so acc stays in registers) and then runs a
    // rolled loop over the row blocks (one copy of linear_store.glsl's code), each step taking
    // tile[0..3] and moving the rest down by 4: constant indices again. Indexing tile by the
    // loop counter instead (tile[4 * i]) made lavapipe copy the array through memory lane by
    // lane: (3136, 96) x (96, 384) 3.75 -> 3.05 ms, (3136, 384) x (384, 384) 10.3 -> 9.4 ms.
    int N4 = up4(p.N) / 4;
    [[unroll]] for (int j = 0; j < TN4; ++j) {
        int nb = nt * TN4 + j;          // column block: n = 4nb .. 4nb+3
        if (nb >= N4) break;
        ivec4 tile[TM];
        [[unroll]] for (int r = 0; r < TM; ++r) tile[r] = acc[r][j];
        const ivec4 cw[4] = chan_block(nb);
        for (int i = 0; i < TM4; ++i) {
            if (rb0 + i >= p.RB) break;
            ivec4 blk[4] = ivec4[4](tile[0], tile[1], tile[2], tile[3]);
            store_block(rb0 + i, nb, blk, cw);
            [[unroll]] for (int r = 0; r < TM - 4; ++r) tile[r] = tile[r + 4];
        }
    }
}
