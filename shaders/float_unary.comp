#version 450
#extension GL_GOOGLE_include_directive : require
// Elementwise float32 y = f(x) over n contiguous values (vkq/ops/float.py). Each invocation
// does PER values, grid-strided. Accuracy of the transcendental ones: include/float_math.glsl.
//! variant OP_GELU
//! variant OP_GELU_TANH
//! variant OP_CLAMP
//! variant OP_RELU
//! variant OP_SIGMOID
//! variant OP_TANH
//! variant OP_SILU
//! variant OP_EXP
//! variant OP_NEG
//! variant OP_ABS
//! variant OP_SQRT
//! variant OP_RSQRT
//! variant OP_CUBE
//! variant OP_SQUARE
//! variant OP_HARDSWISH
//! variant OP_HARDSIGMOID
#include "common.glsl"
#include "float_math.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
    int n;
    float lo, hi;    // OP_CLAMP bounds (+-inf when absent)
} p;

float f(float v) {
#if defined(OP_GELU)
    return gelu_erf(v);
#elif defined(OP_GELU_TANH)
    return gelu_tanh(v);
#elif defined(OP_CLAMP)
    return min(max(v, p.lo), p.hi);
#elif defined(OP_RELU)
    return max(v, 0.0);
#elif defined(OP_SIGMOID)
    return sigmoid_f32(v);
#elif defined(OP_TANH)
    return tanh_f32(v);
#elif defined(OP_SILU)
    return v * sigmoid_f32(v);
#elif defined(OP_HARDSWISH)
    precise float h = v * clamp(v + 3.0, 0.0, 6.0) / 6.0;     // as ATen: x * min(max(x + 3, 0), 6) / 6
    return h;
#elif defined(OP_HARDSIGMOID)
    precise float h = clamp(v + 3.0, 0.0, 6.0) / 6.0;
    return h;
#elif defined(OP_EXP)
    return exp_f32(v);
#elif defined(OP_NEG)
    return -v;
#elif defined(OP_ABS)
    return abs(v);
#elif defined(OP_SQRT)
    return sqrt(v);
#elif defined(OP_RSQRT)
    return inversesqrt(v);
#elif defined(OP_SQUARE)
    precise float s = v * v;
    return s;
#elif defined(OP_CUBE)
    precise float s = v * v;      // (x * x) * x, as ATen's pow(x, 3)
    precise float c = s * v;
    return c;
#endif
}

void main() {
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int k = 0; k < PER && i < p.n; ++k, i += stride) y[i] = f(x[i]);
}
