#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Batched float32 matmul of strided views (vkq/ops/float.py matmul, matmul_strided):
//   out[oo(z) + i*som + j*son] = sum_k a[oa(z) + i*sam + k*sak] * b[ob(z) + k*sbk + j*sbn]
// z runs over the batches (workgroup z); oa/ob/oo come from the merged batch shape and each
// tensor's batch strides (0 where an operand is broadcast), from the base offsets a_off, b_off,
// o_off (q, k, v read out of one packed projection). Strides let transposed or
// head-split operands be read, and a head-merged output written, in place.
// A workgroup owns TM rows (workgroup y) x (width * TN) columns; a lane owns TN columns. The
// rows are the same for every lane, so their loads are uniform (one load, not a gather, on CPU
// drivers that run lanes as SIMD); each lane loads its own columns of b.
// One float32 order on every path and device (vkq/ops/float_math.py matmul_f32 is its twin): k in
// groups of 4 from 0 (zeros past K), a group's products summed ((p0 + p1) + p2) + p3, the groups
// added into the accumulator in k order, `precise` (no fused multiply-add). Products are not
// flushed (an ftz a multiply-add cost too much): a device that flushes subnormals may differ
// where a product is subnormal and the sum it enters is below ~2^-102.
//   GENERAL  any strides, a float load per value
//   VEC_K    a and b contiguous along k (sak = sbk = 1; K, sam, sbn and batch strides multiples
//            of 4): vec4 loads along k, TM x TN dot products (a @ b^T: attention scores Q K^T)
//   VEC_KN   a contiguous along k, b along n (sak = sbn = 1; N, sbk and b's batch strides
//            multiples of 4; K any, the vec4 holding a's last word whole in its buffer): per 4 k,
//            TM vec4 of a and 4 vec4 of b feed TM x 16 multiply-adds (P V; plain row-major
//            matmuls). A_SHIFT (specialization constant): a's rows not on vec4s (sam, a's batch
//            strides or offset not multiples of 4: Swin's P, rows of 49): a's 4 values come from
//            the two vec4s that hold them, shifted by the row's offset % 4 (selects; 4 word
//            fetches instead: 2x slower). (64, 3, 49, 49) @ (.., 49, 32) on llvmpipe: GENERAL
//            (b gathered value by value) 6.9-7.1 ms, A_SHIFT 3.6, the rows padded to 52: 2.2-2.4
// ZB (specialization constant): batches a workgroup, its lanes in ZB groups of width / ZB, one
// batch each (the host fills a subgroup where N needs fewer lanes: Swin's P V, N = 32).
// FQ (specialization constant): a fake_quantize of the product folded in (vkq/ops/float.py
// fold_fake_quantize), each value through fake_quant.glsl before its store: attention's scores.
// OUT4: out contiguous along n (son = 1; N, som and batch strides multiples of 4): a lane
// stores its 4 columns of a row as one vec4.
//! variant GENERAL
//! variant VEC_K
//! variant VEC_KN
//! variant GENERAL OUT4
//! variant VEC_K OUT4
//! variant VEC_KN OUT4
//! variant VEC_K TEXEL
//! variant VEC_KN TEXEL
//! variant VEC_K OUT4 TEXEL
//! variant VEC_KN OUT4 TEXEL
// TEXEL (VEC_K, VEC_KN): a and b through texel fetches (texel.glsl), the float bits as ints.
// On lavapipe a lane's 4 vec4 loads of b per step cost more than its 64 multiply-adds.
#include "common.glsl"
#include "texel.glsl"
#include "fake_quant.glsl"

#ifndef TM
#define TM 16       // rows per workgroup (vkq/ops/float.py MATMUL_TILE passes it)
#endif
const int TN = 4;   // columns per lane
layout(constant_id = 3) const int A_SHIFT = 0;  // VEC_KN: a's rows may start anywhere in a vec4
layout(constant_id = 4) const int ZB = 1;       // batches a workgroup, its lanes in ZB groups
layout(constant_id = 5) const int FQ = 0;       // 1: a fake_quantize folded in (p.fq), each value before its store

#if defined(VEC_K) || defined(VEC_KN)
IVEC4_INPUT(0, a4i)     // texel.glsl: floats as their bits
IVEC4_INPUT(1, b4i)
#define A4(i) intBitsToFloat(LOAD4(a4i, i))
#define B4(i) intBitsToFloat(LOAD4(b4i, i))

vec4 a_words(int w) {     // a's words w .. w + 3 (VEC_KN; w % 4 is uniform: a row's offset)
    const vec4 t0 = A4(w >> 2);
    if (A_SHIFT == 0) return t0;
    const vec4 t1 = A4((w + 3) >> 2);     // = t0 where w % 4 == 0: no vec4 past the last word
    const int o = w & 3;
    return o == 0 ? t0 : o == 1 ? vec4(t0.yzw, t1.x) : o == 2 ? vec4(t0.zw, t1.xy) : vec4(t0.w, t1.xyz);
}
#else
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
#endif
#ifdef OUT4
VEC4_OUTPUT(2, o4)   // texel.glsl
#else
layout(std430, binding = 2) writeonly buffer Out { float o[]; };
#endif
layout(push_constant) uniform Params {
    int M, N, K;
    int sam, sak, sbk, sbn, som, son;
    int nb;                                    // batch rank after merging (<= 3)
    int bshape[3], sab[3], sbb[3], sob[3];     // batch shape; a's, b's and out's batch strides
    int a_off, b_off, o_off;
    FakeQuant fq;                              // (FQ) fake_quant.glsl
} p;

void main() {
    const int wz = int(gl_WorkGroupSize.x) / ZB, lx = int(gl_LocalInvocationID.x);
    int z = int(gl_WorkGroupID.z) * ZB + lx / wz, nz = 1;
    for (int d = 0; d < p.nb; ++d) nz *= p.bshape[d];
    if (z >= nz) return;
    int oa = p.a_off, ob = p.b_off, oo = p.o_off, t = z;
    for (int d = p.nb - 1; d >= 0; --d) {
        int j = t % p.bshape[d];
        t /= p.bshape[d];
        oa += j * p.sab[d];
        ob += j * p.sbb[d];
        oo += j * p.sob[d];
    }
    int i0 = int(gl_WorkGroupID.y) * TM;            // uniform over the workgroup
    int j0 = (int(gl_WorkGroupID.x) * wz + lx % wz) * TN;
    if (j0 >= p.N) return;

    int ra[TM], cb[TN];   // rows past M / columns past N re-read the last one (not stored)
    [[unroll]] for (int r = 0; r < TM; ++r) ra[r] = oa + min(i0 + r, p.M - 1) * p.sam;
    [[unroll]] for (int c = 0; c < TN; ++c) cb[c] = ob + min(j0 + c, p.N - 1) * p.sbn;

    float acc[TM][TN];
    [[unroll]] for (int r = 0; r < TM; ++r)
        [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] = 0.0;

#if defined(VEC_K)
    for (int k4 = 0; k4 < p.K / 4; ++k4) {
        vec4 av[TM], bv[TN];
        [[unroll]] for (int r = 0; r < TM; ++r) av[r] = A4(ra[r] / 4 + k4);
        [[unroll]] for (int c = 0; c < TN; ++c) bv[c] = B4(cb[c] / 4 + k4);
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int c = 0; c < TN; ++c) {     // (not dot(): its order is the driver's)
                precise float s = av[r].x * bv[c].x + av[r].y * bv[c].y + av[r].z * bv[c].z + av[r].w * bv[c].w;
                acc[r][c] += s;
            }
    }
#elif defined(VEC_KN)
    int bcol = cb[0] / 4, bstep = p.sbk / 4;       // TN = 4: a lane's columns are one vec4
    for (int k4 = 0; k4 < p.K / 4; ++k4) {
        vec4 bv[4];
        [[unroll]] for (int kk = 0; kk < 4; ++kk) bv[kk] = B4(bcol + (4 * k4 + kk) * bstep);
        [[unroll]] for (int r = 0; r < TM; ++r) {
            vec4 av = a_words(ra[r] + 4 * k4);
            precise vec4 s = av.x * bv[0] + av.y * bv[1] + av.z * bv[2] + av.w * bv[3];
            [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] += s[c];
        }
    }
    if (p.K % 4 != 0) {
        // the last 1-3 k: a's words and b's rows past K - 1 load K - 1 (nothing past a row is
        // read), 0 selected for both past K, so the group sums as GENERAL's does
        const int k4 = p.K / 4;
        const bvec4 in_k = lessThan(4 * k4 + ivec4(0, 1, 2, 3), ivec4(p.K));
        vec4 bv[4];
        [[unroll]] for (int kk = 0; kk < 4; ++kk) {
            const vec4 v = B4(bcol + min(4 * k4 + kk, p.K - 1) * bstep);
            bv[kk] = in_k[kk] ? v : vec4(0.0);
        }
        [[unroll]] for (int r = 0; r < TM; ++r) {
            vec4 av;
            [[unroll]] for (int kk = 0; kk < 4; ++kk) {
                const int w = ra[r] + min(4 * k4 + kk, p.K - 1);
                av[kk] = in_k[kk] ? A4(w >> 2)[w & 3] : 0.0;
            }
            precise vec4 s = av.x * bv[0] + av.y * bv[1] + av.z * bv[2] + av.w * bv[3];
            [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] += s[c];
        }
    }
#else
    // k in groups of 4 (0 past K), each group summed as VEC_KN sums it: with zeros past a
    // sentence's keys, P V gives the same bits at any padded length (VEC_KN where it is a
    // multiple of 4, GENERAL elsewhere; tests/test_transformer runs batches at their own length)
    for (int k0 = 0; k0 < p.K; k0 += 4) {
        vec4 av[TM], bv[TN];
        [[unroll]] for (int kk = 0; kk < 4; ++kk) {   // past K: load k = K - 1, select 0 (a load
            const int k = min(k0 + kk, p.K - 1);        // inside ?: is a branch per value, and
            const bool in_k = k0 + kk < p.K;            // SwiftShader's compiler ran out of memory)
            [[unroll]] for (int r = 0; r < TM; ++r) {
                const float v = a[ra[r] + k * p.sak];
                av[r][kk] = in_k ? v : 0.0;
            }
            [[unroll]] for (int c = 0; c < TN; ++c) {
                const float v = b[cb[c] + k * p.sbk];
                bv[c][kk] = in_k ? v : 0.0;
            }
        }
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int c = 0; c < TN; ++c) {
                precise float s = av[r].x * bv[c].x + av[r].y * bv[c].y + av[r].z * bv[c].z + av[r].w * bv[c].w;
                acc[r][c] += s;
            }
    }
#endif

    if (FQ != 0) {
        [[unroll]] for (int r = 0; r < TM; ++r)
            [[unroll]] for (int c = 0; c < TN; ++c) acc[r][c] = fake_quantize(acc[r][c], p.fq);
    }
    [[unroll]] for (int r = 0; r < TM; ++r) {
        if (i0 + r >= p.M) break;
#ifdef OUT4
        STORE_VEC4(o4, (oo + (i0 + r) * p.som + j0) / 4, vec4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
#else
        [[unroll]] for (int c = 0; c < TN; ++c)
            if (j0 + c < p.N) o[oo + (i0 + r) * p.som + (j0 + c) * p.son] = acc[r][c];
#endif
    }
}
