#version 450
#extension GL_GOOGLE_include_directive : require
// Global average pool (output 1x1) of a 4W4C int8 tensor (vkq/ops/pool.py):
//   acc = sum over h, w of (q - in_zp);  out = requantize(acc, m, s, out_zp, qmin, qmax)
// Workgroup (x, y) = (channel blocks, slices of the spatial loop); workgroups run over
// (channel-block groups, n). Each invocation sums the 16-byte blocks (n, h, w4, c4) of its
// slice (4 widths x 4 channels each; width padding bytes are 0 and add nothing), then
// row y = 0 adds the slices up from shared memory and writes the (n, c4) block.
#include "common.glsl"
#include "int8x4.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(std430, binding = 0) readonly buffer In { ivec4 src[]; };
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
layout(push_constant) uniform Params {
    int C, spatial;    // channels; input blocks per (n, c4) = H * W/4
    int count;         // H * W, the real values per channel
    int in_zp, m, s, out_zp, qmin, qmax;
} p;

shared ivec4 part[256];   // local size x * y <= 256 (vkq/ops/pool.py checks)

void main() {
    int C4 = up4(p.C) / 4;
    int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
    int LX = int(gl_WorkGroupSize.x), LY = int(gl_WorkGroupSize.y);
    int c4 = int(gl_WorkGroupID.x) * LX + lx, n = int(gl_WorkGroupID.y);
    ivec4 acc = ivec4(0);
    if (c4 < C4) {
        for (int b = ly; b < p.spatial; b += LY) {   // block (n, h, w4, c4) = (n*spatial + b)*C4 + c4
            ivec4 w = src[(n * p.spatial + b) * C4 + c4];
            acc += unpack_int8x4(w.x) + unpack_int8x4(w.y) + unpack_int8x4(w.z) + unpack_int8x4(w.w);
        }
    }
    part[ly * LX + lx] = acc;
    barrier();
    if (ly != 0 || c4 >= C4) return;
    for (int y = 1; y < LY; ++y) acc += part[y * LX + lx];
    ivec4 r = requantize4(acc - p.count * p.in_zp, ivec4(p.m), ivec4(p.s), p.out_zp, p.qmin, p.qmax);
    // output (N, C, 1, 1): block n*C4 + c4, word 0 holds w = 0, words 1-3 are width padding
    dst[n * C4 + c4] = ivec4(pack_int8x4(r) & byte_mask(p.C - 4 * c4), 0, 0, 0);
}
