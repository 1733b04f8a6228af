#version 450
#extension GL_GOOGLE_include_directive : require
// Tensors made from their shape (vkq/ops/creation.py): what a model builds from a sequence
// length that is only known at run time (positions, causal masks). One 32-bit word a value
// (float32, or int32 for every integer and bool tensor), row-major, PER values an invocation.
//   FULL          o[i] = the word p.a                              (zeros, ones, full, new_ones)
//   IOTA_INT      o[i] = p.a + i * p.b, int32 (wrapping)           (arange of an integer dtype)
//   IOTA_FLOAT    o[i] = float(p.a + i * p.b): integer start and step, so exact while |value|
//                 < 2^24, as torch's float32(double) arange
//   TRIL / TRIU   o[i] = x[i] where column - row <= p.a (TRIL) / >= p.a (TRIU), else 0
//                 (rows p.b, columns p.c: the last two dims; any words)
//! variant FULL
//! variant IOTA_INT
//! variant IOTA_FLOAT
//! variant TRIL
//! variant TRIU
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

#if defined(TRIL) || defined(TRIU)
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };
#else
layout(std430, binding = 0) writeonly buffer Out { uint o[]; };
#endif
layout(push_constant) uniform Params {
    int n, a, b, c;
} p;

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) {
#if defined(FULL)
        o[i] = uint(p.a);
#elif defined(IOTA_INT)
        o[i] = uint(p.a + i * p.b);
#elif defined(IOTA_FLOAT)
        o[i] = floatBitsToUint(float(p.a + i * p.b));
#else
        int col = i % p.c, row = (i / p.c) % p.b;
#if defined(TRIL)
        bool keep = col - row <= p.a;
#else
        bool keep = col - row >= p.a;
#endif
        o[i] = keep ? x[i] : 0u;
#endif
    }
}
