#version 450
#extension GL_GOOGLE_include_directive : require
// Layer norm over the trailing D values of each row (vkq/ops/float.py layer_norm), a row per
// subgroup (ROW_SUBGROUP) or per workgroup, two passes over the row (mean, then the mean of
// squared deviations):
//   y[r, j] = (x[r, j] - mean_r) * inversesqrt(var_r + eps) * w[c] + b[c],  c = (r % G) * CG + j / HW
// layer_norm: G = 1, CG = D, HW = 1 (c = j); group_norm: a row is one group of one image
// (CG channels of HW values), c its channel.
// float32 sums (the reference sums in float64): relative error of mean/var ~ D/lanes ulp.
//! variant ROW_SUBGROUP
//! variant ROW_WORKGROUP
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
    int G, CG, HW;
} p;

void main() {
    int l = lane(), n = lanes();
    for (int r = first_row(); r < p.R; r += row_stride()) {   // uniform over a row's owner
        int base = r * p.D;
        float s = 0.0;
        for (int j = l; j < p.D; j += n) s += x[base + j];
        float mean = row_sum(s) / float(p.D);

        float ss = 0.0;
        for (int j = l; j < p.D; j += n) {
            float d = x[base + j] - mean;
            ss += d * d;
        }
        float rstd = inversesqrt(row_sum(ss) / float(p.D) + p.eps);

        int c0 = (r % p.G) * p.CG;
        for (int j = l; j < p.D; j += n) {
            int c = c0 + j / p.HW;
            y[base + j] = (x[base + j] - mean) * rstd * w[c] + bias[c];
        }
    }
}
