#version 450
#extension GL_GOOGLE_include_directive : require
// int4 group-wise weights (vkq/int4.py) x float or dynamic-int8 activations:
//   X_F32 (linear_int4):  x float32 (R, K) row-major
//   X_Q8  (linear_8da4w): x int8 4H4W (linear_rowq.comp's per-row quantization) and its
//                         (scale, zero point) per row
// The arithmetic is vkq/ops/linear_int4.py's references, operation for operation (`precise`:
// no fused multiply-add, no reassociation):
//   per (row r, column n, group g), in ascending k over the group's G positions (padding: x 0, u 0):
//     X_F32  A = A + x[r, k] * f32(u - z)                      (float32)
//            B = B + x[r, k]                                   (OFFSET)
//            t = A * s  [+ B * m]
//     X_Q8   A = sum (q[r, k] - xzp[r]) * (u - z) over real k  (int32, exact)
//            computed as P - z X - xzp (U - n_g z): P = sum q u, X = sum q, U = sum u
//            B = X - n_g xzp                                    (OFFSET)
//            t = f32(A) * s  [+ f32(B) * m]
//   strand j (j = 0..7) sums t over g = j, j + 8, ... in ascending g from 0.0;
//   acc = ((S0 + S1) + (S2 + S3)) + ((S4 + S5) + (S6 + S7))
//   X_F32  out = acc + bias[n];  X_Q8  out = acc * row_scale[r] + bias[n]
// s, z, m: the group's scale, zero point and offset; z is the specialization constant ZC for
// every group unless ZERO (per group); m only with OFFSET. (A constant: GGUF Q4_1's z = 0 then
// costs no subtraction, one of the 6 operations a value of the float GEMV's inner loop.)
//
// Tiling (the decoder's GEMV, M = 1, and the same kernel over row blocks for M > 1): a row of
// 8 lanes owns TN columns of one 4-row block (a workgroup: CT such rows, CT column tiles, so
// that a CPU driver's SIMD vector of 16 lanes is full); lane j is strand j and takes groups
// j, j + 8, ...: per group it reads whole words, G/8 of them a column (one ivec4 per 4 columns
// per word: 4 columns' word i), and the group's 4-column scales with one vec4 load. The 8
// strands are added in shared memory in the fixed tree above (no subgroup operations: a
// subgroup's float sum has no defined order, and this kernel takes any subgroup size).
// W8 (GGUF Q8_0, vkq/int4.py bits 8): int8 values in place of u - z (z = ZC = 0, no offset),
// four a word, so a step of 8 k reads two words a column (words 2i, 2i + 1: the same layout
// with twice the words a group); X_Q8 without DOT then unpacks and multiplies (no SWAR).
// DOT (X_Q8): (word & 0x0F0F0F0F) holds values 8i..8i+3 of a column as bytes, ((word >> 4) &
// 0x0F0F0F0F) values 8i+4..8i+7: one 4x8-bit dot product each against the x words. X_Q8
// without DOT: the weights packed another way (pack_int4_swar, TN = 32) for two products a
// 32-bit multiply (see below): lavapipe, CPU time, 1x4096x4096: 3.53 -> 2.96 ms. Without its
// multiply-adds the same loop took 1.83 ms: the loads and the per-group work, not the
// arithmetic, are most of what is left. Tried: the 8 strands' words of a step side by side
// (one contiguous read a step instead of 8 streams): no faster.
//! variant X_F32
//! variant X_F32 VEC4
//! variant X_F32 ZERO
//! variant X_F32 ZERO VEC4
//! variant X_F32 OFFSET
//! variant X_F32 OFFSET VEC4
//! variant X_F32 TEXEL
//! variant X_F32 VEC4 TEXEL
//! variant X_F32 ZERO TEXEL
//! variant X_F32 ZERO VEC4 TEXEL
//! variant X_F32 OFFSET TEXEL
//! variant X_F32 OFFSET VEC4 TEXEL
//! variant X_Q8
//! variant X_Q8 ZERO
//! variant X_Q8 OFFSET
//! variant X_Q8 DOT
//! variant X_Q8 ZERO DOT
//! variant X_Q8 OFFSET DOT
//! variant X_Q8 TEXEL
//! variant X_Q8 ZERO TEXEL
//! variant X_Q8 OFFSET TEXEL
//! variant X_Q8 DOT TEXEL
//! variant X_Q8 ZERO DOT TEXEL
//! variant X_Q8 OFFSET DOT TEXEL
//! variant X_F32 W8
//! variant X_F32 W8 VEC4
//! variant X_F32 W8 TEXEL
//! variant X_F32 W8 VEC4 TEXEL
//! variant X_Q8 W8
//! variant X_Q8 W8 DOT
//! variant X_Q8 W8 TEXEL
//! variant X_Q8 W8 DOT TEXEL
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#ifdef DOT
#include "dot4x8.glsl"
#endif
#include "int4_groups.glsl"

layout(constant_id = 3) const int MR = 4;     // rows computed of the 4-row block: min(R, 4)
layout(constant_id = 4) const int TN = 16;    // columns per workgroup, a multiple of 4
layout(constant_id = 5) const int G = 32;     // group size, a multiple of 32
layout(constant_id = 6) const int ZC = 8;     // the zero point of every group (unless ZERO)
const int TN4 = TN / 4, GW = G / 8;           // GW words a column a group
const int STRANDS = 8;                        // = the workgroup width x (the host dispatches 8 lanes)
const int CT = int(gl_WorkGroupSize.y);       // column tiles a workgroup, one a row of 8 lanes

#ifdef X_F32
#ifdef VEC4
IVEC4_INPUT(0, x4)   // (R, K / 4) vec4 as their bits (a texel buffer in TEXEL: texel.glsl)
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };   // (R, K)
#endif
#else
IVEC4_INPUT(0, xq)   // 4H4W: ivec4 (rb*K4 + kb) = rows 4rb..+3 (one per int32) x k 4kb..+3 (bytes)
#endif
// w: vkq/ops/linear_int4.py:pack_int4_tiles: N padded to NT*TN columns (u = 0, scale 0);
//    ivec4 ((nt*NG + g)*TN4 + j)*GW + i = word i of group g of columns nt*TN + 4j + (0..3)
IVEC4_INPUT(1, w)
// per (column tile, group, 4 columns): vec4 scales; ZERO / OFFSET: then a vec4 of f32(z) / m
// (their bits: read as texels in TEXEL, where a storage-buffer load costs a loop over the lanes)
IVEC4_INPUT(2, prm)
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
    int K4;   // X_Q8: k-blocks of x, up4(K) / 4
} p;

shared vec4 part[CT][STRANDS][MR * TN4];

#ifdef X_F32
// x[row, k0 .. k0+3], 0 past K
vec4 load_x4(int row, int k0) {
#ifdef VEC4
    vec4 v = intBitsToFloat(LOAD4(x4, (row * p.K + min(k0, p.K - 4)) / 4));
    return k0 < p.K ? v : vec4(0.0);
#else
    vec4 v;
    [[unroll]] for (int t = 0; t < 4; ++t) {   // select, not branch
        float xv = x[row * p.K + min(k0 + t, p.K - 1)];
        v[t] = k0 + t < p.K ? xv : 0.0;
    }
    return v;
#endif
}
#endif

void main() {
    const int lane = int(gl_LocalInvocationID.x);
    const int ct = int(gl_LocalInvocationID.y);
    const int nt_real = int(gl_WorkGroupID.x) * CT + ct, rb = int(gl_WorkGroupID.y);
    const int nt = min(nt_real, (p.N + TN - 1) / TN - 1);   // past the last tile: a copy of it, not stored
    int rows[MR];
    [[unroll]] for (int r = 0; r < MR; ++r) rows[r] = min(4 * rb + r, p.R - 1);
#ifdef X_Q8
    int xzp[MR];
    [[unroll]] for (int r = 0; r < MR; ++r) xzp[r] = int(rowq[rows[r]].y);
#endif

    vec4 S[MR][TN4];   // this lane's strand: rows x columns nt*TN + 4j .. +3
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) S[r][j] = vec4(0.0);

    for (int g = lane; g < p.NG; g += STRANDS) {
        const int pb = (nt * p.NG + g) * TN4;
#if defined(ZERO) || defined(OFFSET)
        const int PS = 2;
#else
        const int PS = 1;
#endif
        vec4 sc[TN4], zf[TN4], off[TN4];
        [[unroll]] for (int j = 0; j < TN4; ++j) {
            sc[j] = intBitsToFloat(LOAD4(prm, PS * (pb + j)));
#ifdef ZERO
            zf[j] = intBitsToFloat(LOAD4(prm, PS * (pb + j) + 1));
#else
            zf[j] = vec4(float(ZC));
#endif
#ifdef OFFSET
            off[j] = intBitsToFloat(LOAD4(prm, PS * (pb + j) + 1));
#endif
        }
        const int kg = g * G;
#ifdef X_F32
        vec4 A[MR][TN4];
        float B[MR];
        [[unroll]] for (int r = 0; r < MR; ++r) {
            B[r] = 0.0;
            [[unroll]] for (int j = 0; j < TN4; ++j) A[r][j] = vec4(0.0);
        }
        for (int i = 0; i < GW; ++i) {   // rolled: G/8 words, nothing indexed by i
            float xv[MR][8];
            [[unroll]] for (int r = 0; r < MR; ++r) {
                vec4 lo = load_x4(rows[r], kg + 8 * i), hi = load_x4(rows[r], kg + 8 * i + 4);
                xv[r] = float[8](lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
#ifdef OFFSET
                [[unroll]] for (int t = 0; t < 8; ++t) {
                    precise float b = B[r] + xv[r][t];
                    B[r] = b;
                }
#endif
            }
            [[unroll]] for (int j = 0; j < TN4; ++j) {
#ifdef W8
                ivec4 wa = LOAD4(w, 2 * ((pb + j) * GW + i)), wb = LOAD4(w, 2 * ((pb + j) * GW + i) + 1);
#define VALUE(t) byte_value(wa, wb, t)
#else
                ivec4 word = LOAD4(w, (pb + j) * GW + i);
#define VALUE(t) nibble(word, t)
#endif
                [[unroll]] for (int t = 0; t < 8; ++t) {   // value 8i + t: byte t % 4, nibble t / 4
                    vec4 d = vec4(VALUE(t)) - zf[j];   // exact
                    [[unroll]] for (int r = 0; r < MR; ++r) {
                        precise vec4 prod = xv[r][t] * d;
                        precise vec4 s = A[r][j] + prod;
                        A[r][j] = s;
                    }
                }
            }
        }
        [[unroll]] for (int r = 0; r < MR; ++r)
            [[unroll]] for (int j = 0; j < TN4; ++j) {
                precise vec4 s = S[r][j] + group_term_f32(A[r][j], sc[j], B[r], off[j]);
                S[r][j] = s;
            }
#else
        ivec4 P[MR][TN4], U[TN4];
        int X[MR];
        [[unroll]] for (int r = 0; r < MR; ++r) {
            X[r] = 0;
            [[unroll]] for (int j = 0; j < TN4; ++j) P[r][j] = ivec4(0);
        }
        [[unroll]] for (int j = 0; j < TN4; ++j) U[j] = ivec4(0);
#if defined(DOT) || defined(W8)
        for (int i = 0; i < GW; ++i) {   // rolled: G/8 words, nothing indexed by i
            const int kb = kg / 4 + 2 * i;      // x words: k 4kb..+3 and 4kb+4..+7 (0 past K)
            ivec4 xa = LOAD4(xq, rb * p.K4 + min(kb, p.K4 - 1));
            ivec4 xb = LOAD4(xq, rb * p.K4 + min(kb + 1, p.K4 - 1));
            xa = kb < p.K4 ? xa : ivec4(0);
            xb = kb + 1 < p.K4 ? xb : ivec4(0);
#ifdef DOT
            [[unroll]] for (int r = 0; r < MR; ++r)
                X[r] = dot4x8_acc(xa[r], 0x01010101, dot4x8_acc(xb[r], 0x01010101, X[r]));
#else
            ivec4 xs[MR][2];   // row r's values at k 8i..+3 and 8i+4..+7
            [[unroll]] for (int r = 0; r < MR; ++r) {
                xs[r][0] = unpack_int8x4(xa[r]);
                xs[r][1] = unpack_int8x4(xb[r]);
                ivec4 s2 = xs[r][0] + xs[r][1];
                X[r] += (s2.x + s2.y) + (s2.z + s2.w);
            }
#endif
            [[unroll]] for (int j = 0; j < TN4; ++j) {
#ifdef W8
                ivec4 wa = LOAD4(w, 2 * ((pb + j) * GW + i)), wb = LOAD4(w, 2 * ((pb + j) * GW + i) + 1);
#ifdef DOT
                U[j] += dot_bytes(wa, 0x01010101, dot_bytes(wb, 0x01010101, ivec4(0)));
                [[unroll]] for (int r = 0; r < MR; ++r)
                    P[r][j] = dot_bytes(wa, xa[r], dot_bytes(wb, xb[r], P[r][j]));
#else
                ivec4 wv[8];
                [[unroll]] for (int t = 0; t < 8; ++t) wv[t] = byte_value(wa, wb, t);
                U[j] += ((wv[0] + wv[1]) + (wv[2] + wv[3])) + ((wv[4] + wv[5]) + (wv[6] + wv[7]));
                [[unroll]] for (int r = 0; r < MR; ++r)
                    P[r][j] += xs[r][0].x * wv[0] + xs[r][0].y * wv[1] + xs[r][0].z * wv[2] + xs[r][0].w * wv[3]
                             + xs[r][1].x * wv[4] + xs[r][1].y * wv[5] + xs[r][1].z * wv[6] + xs[r][1].w * wv[7];
#endif
#else
                ivec4 word = LOAD4(w, (pb + j) * GW + i);
                U[j] += nibble_sum(word);
                [[unroll]] for (int r = 0; r < MR; ++r) P[r][j] = dot_word(xa[r], xb[r], word, P[r][j]);
#endif
            }
        }
#else
        // SWAR (TN = 32): ivec4 (nt*NG + g)*G + kk holds value k = kg + kk of the 32 columns,
        // column 8j + 4h + c at nibble j + 4h of component c, so that (word >> 4j) & 0x000F000F
        // puts columns 8j + c and 8j + 4 + c (column blocks 2j and 2j + 1) in two 16-bit
        // fields; one 32-bit multiply by x' = q + 128 (0..255) makes both products (<= 3825),
        // and 16 of them (<= 61200) fit a field before they are moved out (every 16 k).
        // P' = sum x' u, Xp = sum x' over the G positions (padding x' = 128), then
        // sum q u = P' - 128 U and sum q = Xp - 128 G.
        uvec4 acc[MR][4], uf[4];
        [[unroll]] for (int jj = 0; jj < 4; ++jj) {
            uf[jj] = uvec4(0);
            [[unroll]] for (int r = 0; r < MR; ++r) acc[r][jj] = uvec4(0);
        }
        for (int kk0 = 0; kk0 < G; kk0 += 16) {   // rolled
            for (int kq = 0; kq < 16; kq += 4) {   // rolled: one x word of each row per 4 k
                const int kb = (kg + kk0 + kq) / 4;
                ivec4 xw = LOAD4(xq, rb * p.K4 + min(kb, p.K4 - 1));
                xw = kb < p.K4 ? xw : ivec4(0);
                [[unroll]] for (int b = 0; b < 4; ++b) {
                    uvec4 wv = uvec4(LOAD4(w, (pb / TN4) * G + kk0 + kq + b));
                    uint xp[MR];
                    [[unroll]] for (int r = 0; r < MR; ++r) {
                        xp[r] = ((uint(xw[r]) >> (8 * b)) & 0xFFu) ^ 0x80u;
                        X[r] += int(xp[r]);
                    }
                    [[unroll]] for (int jj = 0; jj < 4; ++jj) {
                        uvec4 t = (wv >> (4 * jj)) & 0x000F000Fu;
                        uf[jj] += t;
                        [[unroll]] for (int r = 0; r < MR; ++r) acc[r][jj] += xp[r] * t;
                    }
                }
            }
            [[unroll]] for (int jj = 0; jj < 4; ++jj)
                [[unroll]] for (int r = 0; r < MR; ++r) {
                    P[r][2 * jj] += ivec4(acc[r][jj] & 0xFFFFu);
                    P[r][2 * jj + 1] += ivec4(acc[r][jj] >> 16);
                    acc[r][jj] = uvec4(0);
                }
        }
        [[unroll]] for (int jj = 0; jj < 4; ++jj) {
            U[2 * jj] = ivec4(uf[jj] & 0xFFFFu);
            U[2 * jj + 1] = ivec4(uf[jj] >> 16);
        }
        [[unroll]] for (int r = 0; r < MR; ++r) {
            [[unroll]] for (int j = 0; j < TN4; ++j) P[r][j] -= 128 * U[j];
            X[r] -= 128 * G;
        }
#endif
        const int ng = min(G, p.K - kg);   // real values in this group
        [[unroll]] for (int j = 0; j < TN4; ++j) {
            ivec4 z = ivec4(zf[j]);
            [[unroll]] for (int r = 0; r < MR; ++r) {
                precise vec4 s = S[r][j] + group_term_q8(P[r][j], X[r], U[j], z, xzp[r], ng, sc[j], off[j]);
                S[r][j] = s;
            }
        }
#endif
    }

    // the 8 strands in a fixed tree; lane j then finishes column block j (j < TN4), j + 8, ...
    [[unroll]] for (int r = 0; r < MR; ++r)
        [[unroll]] for (int j = 0; j < TN4; ++j) part[ct][lane][r * TN4 + j] = S[r][j];
    barrier();
    if (nt_real != nt) return;
    for (int j = lane; j < TN4; j += STRANDS) {
        const int n0 = nt * TN + 4 * j;
        if (n0 >= p.N) break;
        const vec4 bias = bias4[n0 / 4];
        for (int r = 0; r < MR; ++r) {
            const int row = 4 * rb + r;
            if (row >= p.R) break;
            const int e = r * TN4 + j;
            precise vec4 s01 = part[ct][0][e] + part[ct][1][e], s23 = part[ct][2][e] + part[ct][3][e];
            precise vec4 s45 = part[ct][4][e] + part[ct][5][e], s67 = part[ct][6][e] + part[ct][7][e];
            precise vec4 s03 = s01 + s23, s47 = s45 + s67;
            precise vec4 acc = s03 + s47;
#ifdef X_Q8
            precise vec4 scaled = acc * rowq[row].x;
            precise vec4 y = scaled + bias;
#else
            precise vec4 y = acc + bias;
#endif
            for (int b = 0; b < 4; ++b)
                if (n0 + b < p.N) out_f[row * p.N + n0 + b] = y[b];
        }
    }
}
