#version 450
#extension GL_GOOGLE_include_directive : require
// Layer norm over the trailing D values of each row (vkq/ops/float.py layer_norm), one
// workgroup a row, two passes over the row (mean, then the mean of squared deviations):
//   y[r, j] = (x[r, j] - mean_r) * inversesqrt(var_r + eps) * w[j] + b[j]
// float32 tree sums (the reference sums in float64): relative error of mean/var ~ log2(D) ulp.
#include "common.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) readonly buffer Bs { float bias[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
    int R, D;
    float eps;
} p;

void main() {
    int r = workgroup_index();
    if (r >= p.R) return;   // the whole workgroup leaves together
    int lid = int(gl_LocalInvocationID.x), base = r * p.D;

    float s = 0.0;
    for (int j = lid; j < p.D; j += LOCAL) s += x[base + j];
    float mean = wg_sum(s) / float(p.D);

    float ss = 0.0;
    for (int j = lid; j < p.D; j += LOCAL) {
        float d = x[base + j] - mean;
        ss += d * d;
    }
    float rstd = inversesqrt(wg_sum(ss) / float(p.D) + p.eps);

    for (int j = lid; j < p.D; j += LOCAL) y[base + j] = (x[base + j] - mean) * rstd * w[j] + bias[j];
}
