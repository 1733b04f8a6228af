#ifndef VKQ_LUT_LOOKUP_GLSL
#define VKQ_LUT_LOOKUP_GLSL
// The lookup table of a fused epilogue (conv_epilogue.glsl, linear_store.glsl): int8 q ->
// table[q + 128], the table in the form vkq/ops/lut.py:device_table writes for every kernel
// (lut_q8.comp too): 256 ivec4, row u = q & 0xFF holding the output's unsigned byte (at each byte
// position; component x is the byte itself). The including shader defines LUT_BINDING.
// Why an ivec4 a row: under TEXEL (texel.glsl) the lookup is a texel fetch, straight-line code
// on llvmpipe, where a storage-buffer load per value is a loop over the SIMD lanes.
IVEC4_INPUT(LUT_BINDING, lut)

int lut_lookup(int q) { return (LOAD4(lut, q & 0xFF).x << 24) >> 24; }

ivec4 lut_lookup(ivec4 q) { return ivec4(lut_lookup(q.x), lut_lookup(q.y), lut_lookup(q.z), lut_lookup(q.w)); }
#endif
