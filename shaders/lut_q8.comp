#version 450
#extension GL_GOOGLE_include_directive : require
// out = table[q] on packed int8 (lut_q8 in vkq/ops/lut.py): any elementwise function of one
// int8 tensor with fixed input and output quantization, the 256 outputs computed at compile
// time. A lookup per byte needs no layout: only a block's position says which bytes are
// padding (block_mask.glsl); they are written 0, as the other elementwise kernels do.
// The table (256 ints, indexed by the input's unsigned byte, holding the output's unsigned
// byte) is copied into shared memory once per workgroup.
//! variant
#include "common.glsl"
#include "block_mask.glsl"

layout(constant_id = 3) const int PER = 1;

layout(std430, binding = 0) readonly buffer In { ivec4 q[]; };
layout(std430, binding = 1) readonly buffer Table { int table[]; };
layout(std430, binding = 2) writeonly buffer Out { ivec4 o[]; };
layout(push_constant) uniform Params {
    ivec4 geo;       // block_mask geometry
    int blocks;
} p;

shared int lut[256];

int word(int w) {
    return lut[w & 0xFF] | (lut[(w >> 8) & 0xFF] << 8) | (lut[(w >> 16) & 0xFF] << 16)
         | (lut[(w >> 24) & 0xFF] << 24);
}

void main() {
    int n = int(gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z);
    for (int k = int(gl_LocalInvocationIndex); k < 256; k += n)
        lut[k] = table[k];
    barrier();
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.blocks; ++k, i += stride) {
        ivec4 w = q[i];
        o[i] = ivec4(word(w.x), word(w.y), word(w.z), word(w.w)) & block_mask(i, p.geo);
    }
}
