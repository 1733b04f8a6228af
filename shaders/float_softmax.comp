#version 450
#extension GL_GOOGLE_include_directive : require
// Softmax (or log-softmax, LOG) along one dim, numerically stable (vkq/ops/float.py).
// x is viewed as (outer, D, inner): row r = (r / inner, r % inner), element j at
//   (r / inner) * D * inner + j * inner + r % inner.
// A row per subgroup (ROW_SUBGROUP) or per workgroup:
//   m = max_j x;  e_j = exp(x_j - m);  y_j = e_j / sum_j e_j      (LOG: y_j = x_j - m - log(sum_j e_j))
// exp is exp_f32 (include/float_math.glsl); a difference below -87.3 (a masked score, e.g.
// -3.4e38 added) gives exactly 0, as float32 numpy does.
// MASKED (softmax_masked, along the last dim, inner = 1): the row is x * scale + mask first,
// each rounded once as the separate mul and add would; the mask is read through broadcast
// strides (row dims merged, rank <= 3, and one stride along the row: 1, or 0 if broadcast).
//! variant ROW_SUBGROUP
//! variant ROW_WORKGROUP
//! variant ROW_SUBGROUP LOG
//! variant ROW_WORKGROUP LOG
//! variant ROW_SUBGROUP MASKED
//! variant ROW_WORKGROUP MASKED
//! variant ROW_SUBGROUP MASKED BOOL_MASK
//! variant ROW_WORKGROUP MASKED BOOL_MASK
// BOOL_MASK (attention's boolean masks): the mask is int32, nonzero = attend (adds 0), 0 = -inf.
#include "common.glsl"
#include "float_math.glsl"

layout(constant_id = 3) const int LOCAL = 64;   // = workgroup width, a power of two
#include "float_workgroup.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
#if defined(BOOL_MASK)
layout(std430, binding = 2) readonly buffer Mask { int mask[]; };
float mask_at(int i) { return mask[i] != 0 ? 0.0 : -uintBitsToFloat(0x7F800000u); }
#elif defined(MASKED)
layout(std430, binding = 2) readonly buffer Mask { float mask[]; };
float mask_at(int i) { return mask[i]; }
#endif
layout(push_constant) uniform Params {
    int rows, D, inner;
    float scale;
    int mrank, mj;                       // MASKED: row dims of the mask, its stride along a row
    int mshape[3], mstride[3];
} p;

#ifdef MASKED
int mask_row(int r) {
    int off = 0;
    for (int d = p.mrank - 1; d >= 0; --d) {
        off += (r % p.mshape[d]) * p.mstride[d];
        r /= p.mshape[d];
    }
    return off;
}

float value(int base, int mbase, int j) {
    precise float s = x[base + j] * p.scale;
    precise float v = s + mask_at(mbase + j * p.mj);
    return v;
}
#else
float value(int base, int mbase, int j) { return x[base + j * p.inner]; }
#endif

float safe_exp(float d) { return d < -87.33654 ? 0.0 : exp_f32(d); }

void main() {
    int l = lane(), n = lanes(), step = p.inner;
    for (int r = first_row(); r < p.rows; r += row_stride()) {
        int base = (r / p.inner) * p.D * p.inner + r % p.inner;
#ifdef MASKED
        int mbase = mask_row(r);
#else
        int mbase = 0;
#endif

        float m = -uintBitsToFloat(0x7F800000u);   // -inf
        for (int j = l; j < p.D; j += n) m = max(m, value(base, mbase, j));
        m = row_max(m);

        float s = 0.0;
        for (int j = l; j < p.D; j += n) {
            float e = safe_exp(value(base, mbase, j) - m);
#ifndef LOG
            y[base + j * step] = e;   // read back below by this same invocation
#endif
            s += e;
        }
        s = row_sum(s);

#ifdef LOG
        float ls = log(s);
        for (int j = l; j < p.D; j += n) y[base + j * step] = value(base, mbase, j) - m - ls;
#else
        for (int j = l; j < p.D; j += n) y[base + j * step] = y[base + j * step] / s;
#endif
    }
}
