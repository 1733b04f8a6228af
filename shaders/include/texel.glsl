#ifndef VKQ_TEXEL_GLSL
#define VKQ_TEXEL_GLSL
// Read-only ivec4 inputs, declared and read through two macros so that one kernel source has
// two variants:
//   IVEC4_INPUT(b, name)  binding b, an array of ivec4 named `name`
//   LOAD4(name, i)        its ivec4 i
// default  a storage buffer (name[i])
// TEXEL    a uniform texel buffer (texelFetch(name, i)): the device layer binds the buffer as
//          an R32G32B32A32_SINT view of itself (vkq/shaders.py:reflect finds these bindings).
// Why: on llvmpipe (Mesa 22.3) a storage-buffer load is a loop over the SIMD lanes with an
// exec-mask test and a bounds check per lane and 32-bit word (~25 instructions a lane, read in
// the JIT code), while a texel fetch is straight-line code: one 16-byte load per lane and a
// transpose into the four component vectors (perf on the JIT code at 512 bits; no gather
// instruction, no loop, no branch). CPU time of the same kernels with
// storage / texel loads, interleaved in one process (bench/README.md, "Texel loads"): GEMV 0.6x,
// max pool 0.4-0.5x, quantize 0.67x, depthwise 0.7-0.85x, GEMMs and 3x3 convs 0.83-0.96x,
// add / repack / dequantize 0.9-0.95x. Which devices take TEXEL is
// vkq/device.py:default_texel_loads; each bound buffer must be whole ivec4s and fit
// maxTexelBufferElements (Device.texel_variant), else the kernel takes storage buffers.
// Inputs also read one int32 word at a time (the conv kernels' x, weights and per-channel table):
//   IVEC4_WORDS_INPUT(b, name)  as IVEC4_INPUT
//   WORD(name, i)               its int32 word i
// default  a second, int[] view of the same storage buffer (a single word per load is cheaper
//          than an ivec4 on CPU drivers, ~150 against ~340 instructions per 8 lanes)
// TEXEL    component i % 4 of texel i / 4 (a texel buffer has one view: one format)
#ifdef TEXEL
#define IVEC4_INPUT(b, name) layout(binding = b) uniform isamplerBuffer name;
#define LOAD4(name, i) texelFetch(name, (i))
#define IVEC4_WORDS_INPUT(b, name) IVEC4_INPUT(b, name)
#define WORD(name, i) LOAD4(name, (i) >> 2)[(i) & 3]
#else
#define IVEC4_INPUT(b, name) layout(std430, binding = b) readonly buffer name##_ssbo { ivec4 name[]; };
#define LOAD4(name, i) name[(i)]
#define IVEC4_WORDS_INPUT(b, name) IVEC4_INPUT(b, name) \
    layout(std430, binding = b) readonly buffer name##_words_ssbo { int name##_words[]; };
#define WORD(name, i) name##_words[(i)]
#endif
#endif
