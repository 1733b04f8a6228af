#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// Strided copy of 32-bit words (vkq/ops/float.py reshape/permute/transpose/expand/cat_f32):
// for every index of an iteration shape (rank <= 6, merged),
//   dst[dbase + sum_d idx_d * ds_d] = src[sbase + sum_d idx_d * ss_d]
// permute: src strides permuted; expand: src stride 0 on broadcast dims; cat: one dispatch
// per input into its slice of dst; reshape: one contiguous run (CONTIG: no index arithmetic).
// FILL: dst[dbase + sum_d idx_d * ds_d] = fill instead (constant_pad_nd's border).
// INDEX: dst[i] = src[idx[i]] (a gather by a constant index map: roll, index with constants).
// GATHER: GENERAL where dst is the iteration itself (ds row-major, dbase % 4 == 0: a permute).
// INDEX and GATHER take blocks of 4 consecutive dst words an invocation, stored as one ivec4
// (the last, partial block word by word); GATHER unravels a block's first index once and steps
// along the last dim (unravelling again past its end). TEXEL (texel.glsl, where the device takes
// texel loads): src and idx through texel fetches, dst by 64-bit stores: on llvmpipe a storage
// buffer's access is a loop over the SIMD lanes. lavapipe at 512 bits, GPU time (machine under
// a test run), Swin-T's torch.roll (1, 56, 56, 96): INDEX 3.9 -> INDEX TEXEL 1.7 ms; its window
// partition permutes (1, 8, 7, 8, 7, 96) / (1, 2, 7, 2, 7, 384): GENERAL 8.1 / 3.8 -> GATHER
// TEXEL 5.8 / 1.4 (the unravelling's integer divisions, lane by lane, are most of what is left).
// Values are copied as bits.
//! variant GENERAL
//! variant CONTIG
//! variant FILL
//! variant INDEX
//! variant GATHER
//! variant INDEX TEXEL
//! variant GATHER TEXEL
#include "common.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int PER = 4;

layout(push_constant) uniform Params {
    int n, rank, sbase, dbase;
    int shape[6], ss[6], ds[6];
    uint fill;
} p;

#if defined(INDEX) || defined(GATHER)
IVEC4_WORDS_INPUT(0, sw)
IVEC4_OUTPUT(1, d4)
layout(std430, binding = 1) writeonly buffer Dst { int dst[]; };   // the last, partial block
#ifdef INDEX
IVEC4_WORDS_INPUT(2, iw)                                           // the index map
#endif

int src_of(int e) {     // GATHER: the source word of iteration index e
    int so = p.sbase;
    for (int d = p.rank - 1; d >= 0; --d) {
        int s = p.shape[d], j = e % s;
        e /= s;
        so += j * p.ss[d];
    }
    return so;
}

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();                   // block i: dst words dbase + 4i .. + 3
    for (int k = 0; k < PER && 4 * i < p.n; ++k, i += stride) {
        const int e0 = 4 * i;
        ivec4 v;
#ifdef INDEX
        [[unroll]] for (int c = 0; c < 4; ++c) v[c] = WORD(sw, WORD(iw, min(e0 + c, p.n - 1)));
#else
        const int L = p.shape[p.rank - 1], s0 = src_of(e0), j0 = e0 % L;
        [[unroll]] for (int c = 0; c < 4; ++c) {
            const int e = min(e0 + c, p.n - 1);
            v[c] = WORD(sw, j0 + c < L ? s0 + c * p.ss[p.rank - 1] : src_of(e));
        }
#endif
        if (e0 + 4 <= p.n) {
            STORE4(d4, p.dbase / 4 + i, v);
        } else {
            for (int e = e0; e < p.n; ++e) dst[p.dbase + e] = v[e - e0];
        }
    }
}
#else
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
#if defined(CONTIG)
        int so = p.sbase + i, dof = p.dbase + i;
#else
        int so = p.sbase, dof = p.dbase, t = i;
        for (int d = p.rank - 1; d >= 0; --d) {
            int s = p.shape[d], j = t % s;
            t /= s;
            so += j * p.ss[d];
            dof += j * p.ds[d];
        }
#endif
#ifdef FILL
        dst[dof] = p.fill;
#else
        dst[dof] = src[so];
#endif
    }
}
#endif
