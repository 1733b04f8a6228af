#version 450
#extension GL_GOOGLE_include_directive : require
// Global average pool (output 1x1) of a 4W4C int8 tensor (vkq/ops/pool.py):
//   acc = sum over h, w of (q - in_zp);  out = requantize(acc, m, s, out_zp, qmin, qmax)
// Workgroup (x, y) = (channel blocks, slices of the spatial loop); workgroups run over
// (channel-block groups, n). Each invocation sums the 16-byte blocks (n, h, w4, c4) of its
// slice (4 widths x 4 channels each; width padding bytes are 0 and count as values 0), then
// row y = 0 adds the slices up from shared memory and writes the (n, c4) block.
// The sum runs on packed words: q + 128 (q ^ 0x80808080) is an unsigned byte, and the even and
// odd bytes of the 4 words of a block add into the two 16-bit fields of two uints (mask
// 0x00FF00FF): 5 operations per word instead of unpacking (7) and 4 adds. A field gains at
// most 4 * 255 a block, so the fields move into the int32 sums every FLUSH = 64 blocks, before
// they could carry. Then sum(q) = sum(q + 128) - 128 * words summed (a width-padding byte, 0,
// adds 128 - 128), and acc = sum(q) - in_zp * H * W. The shapes are specialization constants.
// Measured (lavapipe, 1x256x128x128 = 4 MiB, CPU time against the copy roofline's, machine
// shared): unpack and add per value 0.15 of copy bandwidth; packed sums 0.67; and 4 channel
// blocks a workgroup on CPU drivers (vkq/ops/pool.py:_global_local) for the wall clock.
//! variant
//! variant TEXEL
#include "common.glsl"
#include "int8x4.glsl"
#include "texel.glsl"
#include "requant.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int C = 4;          // channels
layout(constant_id = 4) const int SPATIAL = 1;    // input blocks per (n, c4): H * ceil(W / 4)
const int C4 = (C + 3) / 4;
const int FLUSH = 64;                             // blocks per 16-bit field flush: 4 * 64 * 255 < 2^16

IVEC4_INPUT(0, src)   // texel.glsl
layout(std430, binding = 1) writeonly buffer Out { ivec4 dst[]; };
layout(push_constant) uniform Params {
    int count;         // H * W, the real values per channel
    int in_zp;
    int bound, lshift, m, rshift;   // vkq.quant.requant_clamp_params
    int out_zp, qmin, qmax;
} p;

shared ivec4 part[256];   // local size x * y <= 256 (vkq/ops/pool.py checks)

void main() {
    int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);
    int LX = int(gl_WorkGroupSize.x), LY = int(gl_WorkGroupSize.y);
    int c4 = int(gl_WorkGroupID.x) * LX + lx, n = int(gl_WorkGroupID.y);
    ivec4 acc = ivec4(0);   // channel c4*4 + i in component i, each value + 128
    int words = 0;          // words summed (the +128s to take off)
    if (c4 < C4) {
        int base = n * SPATIAL * C4 + c4;
        for (int b0 = ly * FLUSH; b0 < SPATIAL; b0 += LY * FLUSH) {
            uint even = 0u, odd = 0u;   // 16-bit fields: channels (0, 2) and (1, 3)
            int end = min(b0 + FLUSH, SPATIAL);
            for (int b = b0; b < end; ++b) {   // block (n, h, w4, c4) = (n*SPATIAL + b)*C4 + c4
                uvec4 w = uvec4(LOAD4(src, base + b * C4)) ^ 0x80808080u;
                uvec4 e = w & 0x00FF00FFu, o = (w >> 8) & 0x00FF00FFu;
                even += e.x + e.y + e.z + e.w;
                odd += o.x + o.y + o.z + o.w;
            }
            acc += ivec4(even & 0xFFFFu, odd & 0xFFFFu, even >> 16, odd >> 16);
            words += 4 * (end - b0);
        }
    }
    part[ly * LX + lx] = acc - 128 * words;
    barrier();
    if (ly != 0 || c4 >= C4) return;
    acc = part[lx];
    for (int y = 1; y < LY; ++y) acc += part[y * LX + lx];
    // width padding bytes were 0 (they added 0); count real values only for the zero point
    acc -= p.count * p.in_zp;
    ivec4 q;
    for (int c = 0; c < 4; ++c)
        q[c] = requantize_clamped(acc[c], p.bound, p.lshift, p.m, p.rshift, p.out_zp, p.qmin, p.qmax);
    // output (N, C, 1, 1): block n*C4 + c4, word 0 holds w = 0, words 1-3 are width padding
    dst[n * C4 + c4] = ivec4(pack_int8x4(q) & byte_mask(C - 4 * c4), 0, 0, 0);
}
