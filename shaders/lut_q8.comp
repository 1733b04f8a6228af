#version 450
#extension GL_GOOGLE_include_directive : require
// out = table[q] on packed int8 (lut_q8 in vkq/ops/lut.py): any elementwise function of one
// int8 tensor with fixed input and output quantization, the 256 outputs computed at compile
// time. A lookup per byte needs no layout: only a block's position says which bytes are
// padding (block_mask.glsl); they are written 0, as the other elementwise kernels do.
// The table (vkq/ops/lut.py:device_table) is indexed by the input's unsigned byte and holds
// the output's unsigned byte. Default: it is copied into shared memory once per workgroup.
// TEXEL (texel.glsl; where the device takes texel loads: llvmpipe): q and the table through
// texel fetches, no shared copy. The table is 256 ivec4, entry u = the output byte at each of
// the four byte positions (t, t << 8, t << 16, t << 24), so a word is 4 fetches OR-ed, no
// shifts. On llvmpipe a shared-memory load is a loop over the SIMD lanes (as a storage buffer's
// is) and a texel fetch straight-line code. lavapipe at 512 bits, GPU time: (64, 3, 49, 32)
// 4H4W (Swin's q * scale) 2.35 -> 0.36 ms, 4 MiB 4W4C 29.8 -> 4.1 ms (130 -> 1000 M values/s).
//! variant
//! variant TEXEL
#include "common.glsl"
#include "block_mask.glsl"
#include "texel.glsl"

layout(constant_id = 3) const int PER = 1;

IVEC4_INPUT(0, q)
IVEC4_INPUT(1, table)            // vkq/ops/lut.py:device_table
IVEC4_OUTPUT(2, o)
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
} p;

#ifdef TEXEL
int word(int w) {
    return LOAD4(table, w & 0xFF).x | LOAD4(table, (w >> 8) & 0xFF).y | LOAD4(table, (w >> 16) & 0xFF).z
         | LOAD4(table, (w >> 24) & 0xFF).w;
}
#else
shared int lut[256];

int word(int w) {
    return lut[w & 0xFF] | (lut[(w >> 8) & 0xFF] << 8) | (lut[(w >> 16) & 0xFF] << 16)
         | (lut[(w >> 24) & 0xFF] << 24);
}
#endif

void main() {
#ifndef TEXEL
    int n = int(gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z);
    for (int k = int(gl_LocalInvocationIndex); k < 256; k += n)
        lut[k] = LOAD4(table, k).x;
    barrier();
#endif
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 w = LOAD4(q, i);
        STORE4(o, i, ivec4(word(w.x), word(w.y), word(w.z), word(w.w)) & block_mask(i, p.geo));
    }
}
