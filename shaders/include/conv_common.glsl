#ifndef VKQ_CONV_COMMON_GLSL
#define VKQ_CONV_COMMON_GLSL
// Shared by the conv2d_q8 kernels (conv2d_general, conv2d_depthwise, conv2d_pointwise;
// host side in vkq/ops/conv.py). Include after common.glsl, int8x4.glsl and requant.glsl;
// the shader enables GL_KHR_shader_subgroup_basic/_shuffle unless NO_SUBGROUP is defined.
//
// Lane groups. G consecutive lanes of a subgroup work on the same output channels and on
// different output positions, so they need the same weight and per-channel words. Each word
// is loaded once, by one lane of the group, and handed round with subgroupShuffle: on CPU
// drivers a buffer load is a loop over the SIMD lanes (llvmpipe: ~15 cycles per active lane
// and 32-bit word, plus ~14 per instruction) while a shuffle is one vector permute. A block of
// words is loaded as
//   r[i] = block[i * G + lane]            (i < ceil(words / G))
// and word k of it is SHARE(r, k) = lane (k % G) of r[k / G]. k must be a constant after
// unrolling, so that r[k / G] is a register.
//   lane-group index: ((workgroup * subgroups + subgroup) * (subgroup size / G) + lane / G
// Every lane must reach every shuffle: invocations past the end of the work clamp their
// coordinates and only skip the final store. The workgroup size is a multiple of the
// subgroup size (full subgroups), and G a power of two dividing it.
// NO_SUBGROUP: G = 1 and no subgroup operations.

#ifdef NO_SUBGROUP
const int G = 1;                              // (the host's specialization id 3 is then unused)
#else
layout(constant_id = 3) const int G = 8;
#endif

// Registers a lane needs for n words shared by the group: ceil(n / G), rounded up to whole
// ivec4s past 2 (conv_lane_words.glsl loads them; vkq/ops/conv.py:lane_regs)
#define LANE_REGS(n) ((n) <= 2 * G ? ((n) + G - 1) / G : ((n) + 4 * G - 1) / (4 * G) * 4)

int workgroup_linear() { return int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x); }

#ifdef NO_SUBGROUP
int group_lane() { return 0; }
int group_index() { return linear_invocation(); }
#define SHARE(r, k) ((r)[(k)])
int from_next_lane(int v) { return v; }
int from_prev_lane(int v) { return v; }
#else
int group_lane() { return int(gl_SubgroupInvocationID) & (G - 1); }
int group_index() {
    return (workgroup_linear() * int(gl_NumSubgroups) + int(gl_SubgroupID)) * (int(gl_SubgroupSize) / G)
         + int(gl_SubgroupInvocationID) / G;
}
#define SHARE(r, k) subgroupShuffle((r)[(k) / G], (gl_SubgroupInvocationID & ~uint(G - 1)) + uint((k) % G))
// v of the next / previous lane of the group (wrapping round inside the group)
int from_next_lane(int v) {
    uint i = gl_SubgroupInvocationID;
    return subgroupShuffle(v, (i & ~uint(G - 1)) | ((i + 1u) & uint(G - 1)));
}
int from_prev_lane(int v) {
    uint i = gl_SubgroupInvocationID;
    return subgroupShuffle(v, (i & ~uint(G - 1)) | ((i - 1u) & uint(G - 1)));
}
#endif

// Windows and halos (conv2d_general, conv2d_depthwise). A lane's output columns are whole 4W4C
// blocks (TW = 4*TB columns from ow0, a multiple of 4), so its x window, input columns
// SW*ow0 - PW .. SW*ow0 - PW + WW - 1, holds SW*TB whole blocks that this lane alone reads
// in full: its own blocks, loaded as ivec4s (window columns PW .. PW + OWN - 1, OWN = 4*SW*TB).
// The PW columns left of them are the previous tile's last own columns and the columns right
// of them the next tile's first. The spatial tiles of a group's lanes run along output rows, so
// those halo columns come from the previous / next lane by shuffle; only a lane whose neighbour
// does not hold the adjacent tile (the group's first / last lane, a row's first / last tile)
// loads them itself, word by word under a branch (a load costs only for the lanes that run it).
// Padding wider than the own blocks, and NO_SUBGROUP, load every halo column.
#endif
