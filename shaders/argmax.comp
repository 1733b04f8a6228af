#version 450
#extension GL_GOOGLE_include_directive : require
// Arg max / arg min along one dim (vkq/ops/scan.py): an invocation a row, the row's values
// `inner` words apart (x seen as (outer, D, inner)), the index of the first largest (smallest)
// value, a NaN counting as the largest (smallest) as in torch; int32 out.
//   MAX / MIN            float32 x
//   MAX INT / MIN INT    int32 x
// A row is a loop of D iterations: on llvmpipe D must stay under its loop budget (scan.py).
//! variant MAX
//! variant MIN
//! variant MAX INT
//! variant MIN INT
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { int o[]; };
layout(push_constant) uniform Params { int rows, D, inner; } p;

#ifdef INT
#define VALUE(w) int(w)
#define VALUE_TYPE int
bool better(int v, int best) {
#ifdef MAX
    return v > best;
#else
    return v < best;
#endif
}
#else
#define VALUE(w) uintBitsToFloat(w)
#define VALUE_TYPE float
bool better(float v, float best) {      // a NaN wins over any number, and the first NaN stays
    if (isnan(best)) return false;
#ifdef MAX
    return isnan(v) || v > best;
#else
    return isnan(v) || v < best;
#endif
}
#endif

void main() {
    int r = linear_invocation();
    if (r >= p.rows) return;
    int base = (r / p.inner) * p.D * p.inner + r % p.inner;
    int at = 0;
    VALUE_TYPE best = VALUE(x[base]);
    for (int k = 1; k < p.D; ++k) {
        VALUE_TYPE v = VALUE(x[base + k * p.inner]);
        if (better(v, best)) { best = v; at = k; }
    }
    o[r] = at;
}
