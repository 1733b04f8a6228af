#version 450
#extension GL_GOOGLE_include_directive : require
// Softmax (or log-softmax, LOG) along one dim, numerically stable (vkq/ops/float.py).
// x is viewed as (outer, D, inner): row r = (r / inner, r % inner), element j at
//   (r / inner) * D * inner + j * inner + r % inner.
// One workgroup a row:  m = max_j x;  e_j = exp(x_j - m);  y_j = e_j / sum_j e_j
//   (LOG: y_j = x_j - m - log(sum_j e_j)). exp is exp_f32 (include/float_math.glsl); a
// difference below -87.3 (a masked score, e.g. -3.4e38) gives exactly 0, as in float32 numpy.
//! variant SOFTMAX
//! variant LOG
#include "common.glsl"
#include "float_math.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Params {
    int rows, D, inner;
} p;

float safe_exp(float d) { return d < -87.33654 ? 0.0 : exp_f32(d); }

void main() {
    int r = workgroup_index();
    if (r >= p.rows) return;
    int lid = int(gl_LocalInvocationID.x);
    int base = (r / p.inner) * p.D * p.inner + r % p.inner, step = p.inner;

    float m = -uintBitsToFloat(0x7F800000u);   // -inf
    for (int j = lid; j < p.D; j += LOCAL) m = max(m, x[base + j * step]);
    m = wg_max(m);

    float s = 0.0;
    for (int j = lid; j < p.D; j += LOCAL) {
        float e = safe_exp(x[base + j * step] - m);
#ifndef LOG
        y[base + j * step] = e;   // read back below by this same invocation
#endif
        s += e;
    }
    s = wg_sum(s);

#ifdef LOG
    float ls = log(s);
    for (int j = lid; j < p.D; j += LOCAL) y[base + j * step] = x[base + j * step] - m - ls;
#else
    for (int j = lid; j < p.D; j += LOCAL) y[base + j * step] = y[base + j * step] / s;
#endif
}
