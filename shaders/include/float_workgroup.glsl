#ifndef VKQ_FLOAT_WORKGROUP_GLSL
#define VKQ_FLOAT_WORKGROUP_GLSL
// Workgroup-wide float reductions over shared memory (a tree, log2(LOCAL) barriers). The
// including shader declares `const int LOCAL` (a power of two, = the workgroup width) first.
// Every invocation of the workgroup must call them (they hold barriers); all get the result.

shared float wg_red[LOCAL];

float wg_sum(float v) {
    int lid = int(gl_LocalInvocationID.x);
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

float wg_max(float v) {
    int lid = int(gl_LocalInvocationID.x);
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

// The workgroup's index in a 1-D grid folded into y (vkq.device.grid_1d(rows, 1)).
int workgroup_index() { return int(gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x); }
#endif
