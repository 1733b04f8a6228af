#version 450
#extension GL_GOOGLE_include_directive : require
// int4 group-wise weights x many rows (prefill): the tiled GEMM of linear_int4 / linear_8da4w.
// The arithmetic is linear_int4.comp's (vkq/ops/linear_int4.py's references), operation for
// operation, so the GEMV and this GEMM give the same bits for a row:
//   X_F32  A = A + x[r, k] * f32(u - z) in ascending k over a group (float32), B = B + x[r, k]
//          (OFFSET); t = A * s [+ B * m]
//   X_Q8   A = P - z X - xzp (U - n_g z) (exact int32; P = sum q u, X = sum q, U = sum u over
//          the group); t = f32(A) * s [+ f32(X - n_g xzp) * m]
//   strand j sums t over g = j, j + 8, ... in ascending g from 0.0;
//   acc = ((S0 + S1) + (S2 + S3)) + ((S4 + S5) + (S6 + S7));  out = acc + bias  (X_Q8:
//   acc * row_scale + bias)
// Tiling. Every lane owns TM rows x TN columns on its own (no shared memory, no subgroup
// operations, any workgroup size) and walks the groups strand by strand: strand 0's groups
// 0, 8, 16, ..., then strand 1's, ...; the strand tree is added as the strands finish (E holds
// the last even strand, Q the last pair, H the first four), so a lane keeps 4 float partials an
// output where 8 strands would need 8. Per word step (8 k) a lane loads TM/4 (X_Q8: x 4 rows x
// 4 k an ivec4, two a step) or TM (X_F32: two vec4 a row) x items and TN/4 weight ivec4 (word i
// of 4 columns: pack_int4_tiles, the GEMV's layout), so every unpacked nibble serves TM rows
// and every x value TN columns (the GEMV, one row, unpacks each nibble for 1 to 4 rows).
// ZERO: z per (column, group) from the parameters; OFFSET: z is the specialization constant ZC and m the
// parameters' second vec4. (A uniform zero point without offset takes ZERO too: one vec4 load
// a group per 4 columns, against TM * G multiply-adds.) X_F32 needs K % 4 == 0 (x read as vec4).
// DOT (X_Q8): (word & 0x0F0F0F0F) holds values 8i..8i+3 of a column as bytes, (word >> 4) &
// 0x0F0F0F0F values 8i+4..8i+7: two integer dot products a row, column and word.
//! variant X_F32 ZERO
//! variant X_F32 OFFSET
//! variant X_F32 ZERO TEXEL
//! variant X_F32 OFFSET TEXEL
//! variant X_Q8 ZERO
//! variant X_Q8 OFFSET
//! variant X_Q8 ZERO DOT
//! variant X_Q8 OFFSET DOT
//! variant X_Q8 ZERO TEXEL
//! variant X_Q8 OFFSET TEXEL
//! variant X_Q8 ZERO DOT TEXEL
//! variant X_Q8 OFFSET DOT TEXEL
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#ifdef DOT
#include "dot4x8.glsl"
#endif
#include "int4_groups.glsl"

layout(constant_id = 3) const int TM = 8;     // rows a lane, a multiple of 4
layout(constant_id = 4) const int TN = 8;     // columns a lane, a multiple of 4 (the weights' tiling)
layout(constant_id = 5) const int G = 32;     // group size, a multiple of 32
layout(constant_id = 6) const int ZC = 0;     // OFFSET: the zero point of every group
const int TM4 = TM / 4, TN4 = TN / 4, GW = G / 8, STRANDS = 8;

#ifdef X_F32
IVEC4_INPUT(0, x4)   // x float32 (R, K) row-major, K % 4 == 0: vec4 (row * K + k) / 4 as bits
#else
IVEC4_INPUT(0, xq)   // 4H4W: ivec4 (rb*K4 + kb) = rows 4rb..+3 (one an int32) x k 4kb..+3 (bytes)
#endif
IVEC4_INPUT(1, w)    // pack_int4_tiles(TN): ivec4 ((nt*NG + g)*TN4 + j)*GW + i = word i, columns nt*TN + 4j..
IVEC4_INPUT(2, prm)  // pack_group_params(TN): per (tile, group, 4 columns) vec4 scale, vec4 z (ZERO) / m (OFFSET)
layout(std430, binding = 3) readonly buffer Bias { vec4 bias4[]; };   // (NT*TN) per column
layout(std430, binding = 4) writeonly buffer Out { float out_f[]; };  // (R, N) row-major
#ifdef X_Q8
layout(std430, binding = 5) readonly buffer RowQ { vec2 rowq[]; };    // (scale, zero point) per row
#endif

layout(push_constant) uniform Params {
    int R;    // rows of x
    int K;    // reduction length
    int N;    // output columns
    int NG;   // groups: ceil(K / G)
    int K4;   // X_Q8: k-blocks of x, up4(K) / 4;  X_F32: K / 4
} p;

void main() {
    const int NT = (p.N + TN - 1) / TN;
    const int nt_real = int(gl_GlobalInvocationID.x), rt = int(gl_GlobalInvocationID.y);
    const int nt = min(nt_real, NT - 1);   // past the last tile: a copy of it, not stored
    const int r0 = rt * TM;
#ifdef X_F32
    int xrow[TM];   // vec4 index of each row's k = 0 (rows past R re-read the last row)
    [[unroll]] for (int r = 0; r < TM; ++r) xrow[r] = min(r0 + r, p.R - 1) * p.K4;
#else
    int xrb[TM4], xzp[TM];
    [[unroll]] for (int b = 0; b < TM4; ++b) xrb[b] = min(r0 / 4 + b, (p.R + 3) / 4 - 1) * p.K4;
    [[unroll]] for (int r = 0; r < TM; ++r) xzp[r] = int(rowq[min(r0 + r, p.R - 1)].y);
#endif

    vec4 S[TM][TN4], E[TM][TN4], Q[TM][TN4], H[TM][TN4];   // rows x columns nt*TN + 4j .. +3
    for (int sj = 0; sj < STRANDS; ++sj) {
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int j = 0; j < TN4; ++j) S[r][j] = vec4(0.0);
        for (int g = sj; g < p.NG; g += STRANDS) {
            const int pb = (nt * p.NG + g) * TN4;
            vec4 sc[TN4], sec[TN4];   // scale; z (ZERO) or m (OFFSET)
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                sc[j] = intBitsToFloat(LOAD4(prm, 2 * (pb + j)));
                sec[j] = intBitsToFloat(LOAD4(prm, 2 * (pb + j) + 1));
            }
#ifdef ZERO
#define ZF(j) sec[j]
#else
#define ZF(j) vec4(float(ZC))
#endif
            const int kg = g * G;
#ifdef X_F32
            vec4 A[TM][TN4];
            float B[TM];
            [[unroll]] for (int r = 0; r < TM; ++r) {
                B[r] = 0.0;
                [[unroll]] for (int j = 0; j < TN4; ++j) A[r][j] = vec4(0.0);
            }
            for (int i = 0; i < GW; ++i) {   // rolled: nothing indexed by i
                const int k4 = kg / 4 + 2 * i;   // x's vec4 of k 8i..+3 and 8i+4..+7 (0 past K)
                float xv[TM][8];
                [[unroll]] for (int r = 0; r < TM; ++r) {
                    vec4 lo = intBitsToFloat(LOAD4(x4, xrow[r] + min(k4, p.K4 - 1)));
                    vec4 hi = intBitsToFloat(LOAD4(x4, xrow[r] + min(k4 + 1, p.K4 - 1)));
                    lo = k4 < p.K4 ? lo : vec4(0.0);
                    hi = k4 + 1 < p.K4 ? hi : vec4(0.0);
                    xv[r] = float[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
#ifdef OFFSET
                    [[unroll]] for (int t = 0; t < 8; ++t) {
                        precise float b = B[r] + xv[r][t];
                        B[r] = b;
                    }
#endif
                }
                [[unroll]] for (int j = 0; j < TN4; ++j) {
                    ivec4 word = LOAD4(w, (pb + j) * GW + i);
                    [[unroll]] for (int t = 0; t < 8; ++t) {   // value 8i + t: byte t % 4, nibble t / 4
                        vec4 d = vec4(nibble(word, t)) - ZF(j);   // exact
                        [[unroll]] for (int r = 0; r < TM; ++r) {
                            precise vec4 prod = xv[r][t] * d;
                            precise vec4 s = A[r][j] + prod;
                            A[r][j] = s;
                        }
                    }
                }
            }
            [[unroll]] for (int r = 0; r < TM; ++r)
                [[unroll]] for (int j = 0; j < TN4; ++j) {
                    precise vec4 s = S[r][j] + group_term_f32(A[r][j], sc[j], B[r], sec[j]);
                    S[r][j] = s;
                }
#else
            ivec4 P[TM][TN4], U[TN4];
            int X[TM];
            [[unroll]] for (int r = 0; r < TM; ++r) {
                X[r] = 0;
                [[unroll]] for (int j = 0; j < TN4; ++j) P[r][j] = ivec4(0);
            }
            [[unroll]] for (int j = 0; j < TN4; ++j) U[j] = ivec4(0);
            for (int i = 0; i < GW; ++i) {   // rolled
                const int kb = kg / 4 + 2 * i;   // x words: k 4kb..+3 and 4kb+4..+7 (0 past K)
                int xa[TM], xb[TM];
                [[unroll]] for (int b = 0; b < TM4; ++b) {
                    ivec4 va = LOAD4(xq, xrb[b] + min(kb, p.K4 - 1));
                    ivec4 vb = LOAD4(xq, xrb[b] + min(kb + 1, p.K4 - 1));
                    va = kb < p.K4 ? va : ivec4(0);
                    vb = kb + 1 < p.K4 ? vb : ivec4(0);
                    [[unroll]] for (int c = 0; c < 4; ++c) {
                        xa[4 * b + c] = va[c];
                        xb[4 * b + c] = vb[c];
                    }
                }
#ifdef DOT
                [[unroll]] for (int r = 0; r < TM; ++r)
                    X[r] = dot4x8_acc(xa[r], 0x01010101, dot4x8_acc(xb[r], 0x01010101, X[r]));
                [[unroll]] for (int j = 0; j < TN4; ++j) {
                    ivec4 word = LOAD4(w, (pb + j) * GW + i);
                    U[j] += nibble_sum(word);
                    [[unroll]] for (int r = 0; r < TM; ++r) P[r][j] = dot_word(xa[r], xb[r], word, P[r][j]);
                }
#else
                ivec4 xs[TM][2];   // row r's values at k 8i..+3 and 8i+4..+7
                [[unroll]] for (int r = 0; r < TM; ++r) {
                    xs[r][0] = unpack_int8x4(xa[r]);
                    xs[r][1] = unpack_int8x4(xb[r]);
                    ivec4 s2 = xs[r][0] + xs[r][1];
                    X[r] += (s2.x + s2.y) + (s2.z + s2.w);
                }
                [[unroll]] for (int j = 0; j < TN4; ++j) {
                    ivec4 word = LOAD4(w, (pb + j) * GW + i);
                    ivec4 wv[8];   // value 8i + t of the 4 columns: byte t % 4, nibble t / 4
                    [[unroll]] for (int t = 0; t < 8; ++t) wv[t] = nibble(word, t);
                    U[j] += ((wv[0] + wv[1]) + (wv[2] + wv[3])) + ((wv[4] + wv[5]) + (wv[6] + wv[7]));
                    [[unroll]] for (int r = 0; r < TM; ++r)
                        P[r][j] += xs[r][0].x * wv[0] + xs[r][0].y * wv[1] + xs[r][0].z * wv[2] + xs[r][0].w * wv[3]
                                 + xs[r][1].x * wv[4] + xs[r][1].y * wv[5] + xs[r][1].z * wv[6] + xs[r][1].w * wv[7];
                }
#endif
            }
            const int ng = min(G, p.K - kg);   // real values in this group
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                ivec4 z = ivec4(ZF(j));
                [[unroll]] for (int r = 0; r < TM; ++r) {
                    precise vec4 s = S[r][j] + group_term_q8(P[r][j], X[r], U[j], z, xzp[r], ng, sc[j], sec[j]);
                    S[r][j] = s;
                }
            }
#endif
        }
        // the strand tree as the strands finish: ((S0 + S1) + (S2 + S3)) + ((S4 + S5) + (S6 + S7))
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                if ((sj & 1) == 0) {
                    E[r][j] = S[r][j];
                } else {
                    precise vec4 pair = E[r][j] + S[r][j];
                    if ((sj & 2) == 0) {
                        Q[r][j] = pair;
                    } else {
                        precise vec4 quad = Q[r][j] + pair;
                        if (sj == 3) {
                            H[r][j] = quad;
                        } else {
                            precise vec4 all8 = H[r][j] + quad;
                            H[r][j] = all8;
                        }
                    }
                }
            }
    }
    if (nt_real >= NT) return;

    [[unroll]] for (int j = 0; j < TN4; ++j) {
        const int n0 = nt * TN + 4 * j;
        if (n0 >= p.N) break;
        const vec4 bias = bias4[n0 / 4];
        [[unroll]] for (int r = 0; r < TM; ++r) {
            const int row = r0 + r;
            if (row >= p.R) break;
#ifdef X_Q8
            precise vec4 scaled = H[r][j] * rowq[row].x;
            precise vec4 y = scaled + bias;
#else
            precise vec4 y = H[r][j] + bias;
#endif
            for (int b = 0; b < 4; ++b)
                if (n0 + b < p.N) out_f[row * p.N + n0 + b] = y[b];
        }
    }
}
