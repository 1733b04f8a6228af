#ifndef VKQ_FLOAT_WORKGROUP_GLSL
#define VKQ_FLOAT_WORKGROUP_GLSL
#include "float_exact.glsl"
// Rows of a row-wise shader (layer norm, softmax): who owns a row and how its lanes reduce.
//   ROW_LANE      an invocation owns a row: nothing to reduce, no subgroup operations (CPU
//                 drivers, short rows: vkq/ops/float.py ROW_LANE; a row a subgroup there leaves
//                 lanes idle and pays two cross-lane reductions a row)
//   ROW_SUBGROUP  a subgroup owns a row: subgroupAdd / subgroupMax, no barriers (on CPU drivers
//                 a barrier switches every SIMD group of the workgroup; a subgroup is one of them)
//   otherwise     the workgroup owns a row: a shared-memory tree, log2(LOCAL) barriers
// The including shader declares `const int LOCAL` (a power of two, the workgroup width) first.
// Rows are grid-strided, so any subgroup size covers them all:
//   for (int r = first_row(); r < R; r += row_stride()) { ... lane(), lanes(), row_sum(v) ... }
// row_sum_int (integer sums, the same in any order): define ROW_SUM_INT before including;
// the canonical float sum (ROW_CANON): at the end.
// Every lane of a row's owner must call row_sum/row_max (they synchronise the owner).
// A row shader's vec4 path (vkq/ops/float.py: _row_dispatch sets both): a lane keeps KEEP vec4s
// of its row in registers; VEC says the row is whole vec4s (vec4 loads and stores). VEC is a
// constant, not a push constant: as one, llvmpipe ran the value-by-value code beside the vec4 code.
layout(constant_id = 4) const int KEEP = 1;     // at most float.py ROW_KEEP
layout(constant_id = 5) const int VEC = 0;

float sum4(vec4 v) { return (v.x + v.y) + (v.z + v.w); }   // one order on every path

#if defined(ROW_LANE)
int first_row() { return int(gl_GlobalInvocationID.x); }
int row_stride() { return int(gl_NumWorkGroups.x * gl_WorkGroupSize.x); }
int lane() { return 0; }
int lanes() { return 1; }
float row_sum(float v) { return v; }
int row_sum_int(int v) { return v; }
float row_max(float v) { return v; }
#elif defined(ROW_SUBGROUP)
#extension GL_KHR_shader_subgroup_arithmetic : require
int first_row() { return int(gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID); }
int row_stride() { return int(gl_NumWorkGroups.x * gl_NumSubgroups); }
int lane() { return int(gl_SubgroupInvocationID); }
int lanes() { return int(gl_SubgroupSize); }
float row_sum(float v) { return subgroupAdd(v); }
int row_sum_int(int v) { return subgroupAdd(v); }
float row_max(float v) { return subgroupMax(v); }
#else
shared float wg_red[LOCAL];

int first_row() { return int(gl_WorkGroupID.x); }
int row_stride() { return int(gl_NumWorkGroups.x); }
int lane() { return int(gl_LocalInvocationID.x); }
int lanes() { return LOCAL; }

float row_sum(float v) {
    int lid = lane();
    wg_red[lid] = v;
    barrier();
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) wg_red[lid] += wg_red[lid + s];
        barrier();
    }
    float r = wg_red[0];
    barrier();   // wg_red is free again for the next call
    return r;
}

#ifdef ROW_SUM_INT
shared int wg_red_int[LOCAL];

int row_sum_int(int v) {       // exact: the same sum in any order
    int lid = lane();
    wg_red_int[lid] = v;
    barrier();
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) wg_red_int[lid] += wg_red_int[lid + s];
        barrier();
    }
    int r = wg_red_int[0];
    barrier();
    return r;
}
#endif

float row_max(float v) {
    int lid = lane();
    wg_red[lid] = v;
    barrier();
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) wg_red[lid] = max(wg_red[lid], wg_red[lid + s]);
        barrier();
    }
    float r = wg_red[0];
    barrier();
    return r;
}
#endif

#ifdef ROW_CANON
// The canonical row sum (float_exact.glsl rule 3; vkq/ops/float_math.py sum_canonical is its
// twin), for a shader that defines ROW_CANON before including this: value j of a row into
// partial j % 64, i.e. the row's vec4 q (values 4q .. 4q + 3) into partial vec4 q % 16, each
// partial summed in index order; S_q = (P.x + P.y) + (P.z + P.w); the halving tree over the
// 16 S_q (S_q + S_q+8, + 4, + 2, + 1); ftz after each add of the tree (a signed sum may pass
// through a subnormal, which a device may flush; sums of terms >= 0 never do). Lane l of the
// row's PART_LANES (at most 16 of its lanes; the others hold zeros) visits the vec4s
// VISIT(i) = l + 16 c + PART_LANES t (visit i = c PART_T + t, t < PART_T = 16 / PART_LANES)
// into its partial t, in increasing q; canon_total sums its partials in the tree's first levels
// and the rest across lanes (row_tree: the same halving order). The host (vkq/ops/float.py
// _row_dispatch, parts) sets PART_LANES and PART_T (specialization constants 7, 8) and KEEP a
// multiple of PART_T. Any lane count and path gives the same bits.
#ifdef ROW_SUBGROUP
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
layout(constant_id = 7) const int PART_LANES = 1;
layout(constant_id = 8) const int PART_T = 16;
#define VISIT(i) (l + 16 * ((i) / PART_T) + ((i) % PART_T) * PART_LANES)

float add_ftz(float a, float b) {
    precise float s = a + b;
    return ftz(s);
}

// The halving tree over the row's lanes: lane i + lane i + m, m = lanes/2 .. 1. The lanes past
// PART_LANES hold no partial: they take -0, the one value whose sum with any x is x, so that the
// levels above PART_LANES (a subgroup or workgroup wider than 16 lanes: GPUs' 32 and 64) change
// nothing; their +0 made a -0 total +0 there, where the twin keeps it.
float row_tree(float v) {
#if !defined(ROW_LANE)
    v = lane() < PART_LANES ? v : uintBitsToFloat(0x80000000u);
#endif
#if defined(ROW_SUBGROUP)
    for (int m = lanes() / 2; m > 0; m >>= 1) v = add_ftz(v, subgroupShuffleXor(v, m));   // (i and i ^ m: one sum)
    return v;
#elif defined(ROW_LANE)
    return v;
#else
    const int lid = lane();
    wg_red[lid] = v;
    barrier();
    for (int m = LOCAL / 2; m > 0; m >>= 1) {
        if (lid < m) wg_red[lid] = add_ftz(wg_red[lid], wg_red[lid + m]);
        barrier();
    }
    const float r = wg_red[0];
    barrier();   // wg_red is free again for the next call
    return r;
#endif
}

float canon_total(vec4 acc[PART_T]) {     // every lane of the row's owner calls it
    float s[PART_T];
    [[unroll]] for (int t = 0; t < PART_T; ++t) s[t] = add_ftz(add_ftz(acc[t].x, acc[t].y), add_ftz(acc[t].z, acc[t].w));
    [[unroll]] for (int h = PART_T / 2; h > 0; h >>= 1)
        [[unroll]] for (int t = 0; t < h; ++t) s[t] = add_ftz(s[t], s[t + h]);
    return row_tree(s[0]);
}
#endif
#endif
