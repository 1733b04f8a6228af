#version 450
#extension GL_GOOGLE_include_directive : require
// Strided copy of 32-bit words (vkq/ops/float.py reshape/permute/transpose/expand/cat_f32):
// for every index of an iteration shape (rank <= 6, merged),
//   dst[dbase + sum_d idx_d * ds_d] = src[sbase + sum_d idx_d * ss_d]
// permute: src strides permuted; expand: src stride 0 on broadcast dims; cat: one dispatch
// per input into its slice of dst; reshape: one contiguous run (CONTIG: no index arithmetic).
// Values are copied as bits.
//! variant GENERAL
//! variant CONTIG
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };
layout(push_constant) uniform Params {
    int n, rank, sbase, dbase;
    int shape[6], ss[6], ds[6];
} p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
#ifdef CONTIG
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
        dst[dof] = src[so];
    }
}
