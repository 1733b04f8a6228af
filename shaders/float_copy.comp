#version 450
#extension GL_GOOGLE_include_directive : require
// Strided copy of 32-bit words (vkq/ops/float.py reshape/permute/transpose/expand/cat_f32):
// for every index of an iteration shape (rank <= 6, merged),
//   dst[dbase + sum_d idx_d * ds_d] = src[sbase + sum_d idx_d * ss_d]
// permute: src strides permuted; expand: src stride 0 on broadcast dims; cat: one dispatch
// per input into its slice of dst; reshape: one contiguous run (CONTIG: no index arithmetic).
// FILL: dst[dbase + sum_d idx_d * ds_d] = fill instead (constant_pad_nd's border).
// INDEX: dst[i] = src[idx[i]] (a gather by a constant index map: roll, index with constants).
// Values are copied as bits.
//! variant GENERAL
//! variant CONTIG
//! variant FILL
//! variant INDEX
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };
#ifdef INDEX
layout(std430, binding = 2) readonly buffer Idx { int idx[]; };
#endif
layout(push_constant) uniform Params {
    int n, rank, sbase, dbase;
    int shape[6], ss[6], ds[6];
    uint fill;
} p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
#if defined(CONTIG)
        int so = p.sbase + i, dof = p.dbase + i;
#elif defined(INDEX)
        int so = idx[i], dof = i;
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
