#version 450
#extension GL_GOOGLE_include_directive : require
// Float32 reduction over some dims (vkq/ops/float.py sum, mean, vector_norm): one invocation
// per output value, looping over the reduced values in row-major order:
//   SUM:  sum x      MEAN: (sum x) / count      NORM2: sqrt(sum x^2)
// The kept dims (rank <= 4, merged) index the output row-major; in-strides of kept and reduced
// dims say where the values are. float32 sequential sums (the reference sums in float64).
//! variant SUM
//! variant MEAN
//! variant NORM2
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
    int n_out, count;            // outputs, values reduced into each
    int rk, rr;                  // ranks of the kept and of the reduced dims
    int kshape[4], kstride[4];
    int rshape[4], rstride[4];
} p;

void main() {
    int i = linear_invocation();
    if (i >= p.n_out) return;
    int base = 0, t = i;
    for (int d = p.rk - 1; d >= 0; --d) {
        base += (t % p.kshape[d]) * p.kstride[d];
        t /= p.kshape[d];
    }
    float s = 0.0;
    for (int c = 0; c < p.count; ++c) {
        int off = base;
        t = c;
        for (int d = p.rr - 1; d >= 0; --d) {
            off += (t % p.rshape[d]) * p.rstride[d];
            t /= p.rshape[d];
        }
        float v = x[off];
#ifdef NORM2
        s += v * v;
#else
        s += v;
#endif
    }
#if defined(MEAN)
    s = s / float(p.count);
#elif defined(NORM2)
    s = sqrt(s);
#endif
    y[i] = s;
}
