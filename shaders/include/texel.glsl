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
// Outputs written a whole ivec4 / vec4 at a time:
//   IVEC4_OUTPUT(b, name)  binding b, a write-only array of ivec4 named `name`
//   STORE4(name, i, v)     its ivec4 i = v
//   VEC4_OUTPUT(b, name), STORE_VEC4(name, i, v)   the same for vec4
//   VEC4_INOUT(b, name)    as VEC4_OUTPUT, for a kernel that also reads back what it stored:
//   RELOAD_VEC4(name, i)   its vec4 i, read through the same declaration as it was written
//   IVEC4_PAIR_OUTPUT(b, name)  as IVEC4_OUTPUT, also written two ivec4s at a time:
//   STORE4_PAIR(name, i, v, w)  ivec4s i and i + 1 (i even) = v, w
//   VEC4_PAIR_OUTPUT(b, name), STORE_VEC4_PAIR(name, i, v, w)   the same for vec4
//   IVEC4_INOUT(b, name), RELOAD4(name, i)   the same for ivec4 (a read-modify-write of bytes
//                          other dispatches wrote: cat_channels)
// default  an ivec4 / vec4 store
// TEXEL with INT64_STORES (vkq/shaders.py:device_defines adds it to the TEXEL variants where the
//          device enabled shaderInt64): two 64-bit stores of the same 16 bytes. Why: llvmpipe
//          (Mesa 22.3) stores a storage buffer's value one lane and one component at a time
//          (a loop over the SIMD lanes per component), so 64-bit components halve the loops.
//          Measured (lavapipe at 512 bits, GPU time, A-B twice): add_q8 on 4 MiB 3.0 -> 2.4 ms,
//          MobileNetV2's pointwise 16 -> 96 @112 1.36 -> 1.17 ms, its convs 16.98 -> 16.36 ms.
//          A storage texel buffer (imageStore) loops the same way (bench/README.md): no gain.
//          STORE4_PAIR: 32 bytes as one i64vec4, one loop over the lanes for both ivec4s.
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

#if defined(TEXEL) && defined(INT64_STORES)
#extension GL_ARB_gpu_shader_int64 : require
#define IVEC4_OUTPUT(b, name) layout(std430, binding = b) writeonly buffer name##_ssbo64 { i64vec2 name##_64[]; };
i64vec2 as_i64x2(ivec4 w) { return i64vec2(packInt2x32(w.xy), packInt2x32(w.zw)); }
#define STORE4(name, i, v) name##_64[(i)] = as_i64x2(v)
#define IVEC4_PAIR_OUTPUT(b, name) IVEC4_OUTPUT(b, name) \
    layout(std430, binding = b) writeonly buffer name##_ssbo256 { i64vec4 name##_256[]; };
#define STORE4_PAIR(name, i, v, w) name##_256[(i) >> 1] = i64vec4(as_i64x2(v), as_i64x2(w))
#define VEC4_OUTPUT(b, name) IVEC4_OUTPUT(b, name)
#define STORE_VEC4(name, i, v) STORE4(name, i, floatBitsToInt(v))
#define VEC4_PAIR_OUTPUT(b, name) IVEC4_PAIR_OUTPUT(b, name)
#define STORE_VEC4_PAIR(name, i, v, w) STORE4_PAIR(name, i, floatBitsToInt(v), floatBitsToInt(w))
#define VEC4_INOUT(b, name) layout(std430, binding = b) buffer name##_ssbo64 { i64vec2 name##_64[]; };
ivec4 as_ivec4(i64vec2 w) { return ivec4(unpackInt2x32(w.x), unpackInt2x32(w.y)); }
#define RELOAD_VEC4(name, i) intBitsToFloat(as_ivec4(name##_64[(i)]))
#define IVEC4_INOUT(b, name) VEC4_INOUT(b, name)
#define RELOAD4(name, i) as_ivec4(name##_64[(i)])
#else
#define IVEC4_OUTPUT(b, name) layout(std430, binding = b) writeonly buffer name##_ssbo { ivec4 name[]; };
#define STORE4(name, i, v) name[(i)] = (v)
#define IVEC4_PAIR_OUTPUT(b, name) IVEC4_OUTPUT(b, name)
#define STORE4_PAIR(name, i, v, w) (name[(i)] = (v), name[(i) + 1] = (w))
#define VEC4_OUTPUT(b, name) layout(std430, binding = b) writeonly buffer name##_ssbo { vec4 name[]; };
#define STORE_VEC4(name, i, v) name[(i)] = (v)
#define VEC4_PAIR_OUTPUT(b, name) VEC4_OUTPUT(b, name)
#define STORE_VEC4_PAIR(name, i, v, w) (name[(i)] = (v), name[(i) + 1] = (w))
#define VEC4_INOUT(b, name) layout(std430, binding = b) buffer name##_ssbo { vec4 name[]; };
#define RELOAD_VEC4(name, i) name[(i)]
#define IVEC4_INOUT(b, name) layout(std430, binding = b) buffer name##_ssbo { ivec4 name[]; };
#define RELOAD4(name, i) name[(i)]
#endif
#endif
