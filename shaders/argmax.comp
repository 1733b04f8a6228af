#version 450
#extension GL_GOOGLE_include_directive : require
// Arg max / arg min along one dim (vkq/ops/scan.py): an invocation a row, the row's values
// `inner` words apart (x seen as (outer, D, inner)), the index of the first largest (smallest)
// value, a NaN counting as the largest (smallest) as in torch; int32 out.
//   MAX / MIN            float32 x
//   MAX INT / MIN INT    int32 x
// A row is a loop of D iterations: on llvmpipe D must stay under its loop budget (scan.py).
// ROW (few long rows: an LM's 49152 logits, one row): a workgroup a row; lane l takes k = l,
// l + L, ... (its first best), then the lanes' (value, index) pairs meet in a tree through shared
// memory, where an equal value (or both NaN) goes to the smaller index. The first best is the
// same whatever the tree's shape. lavapipe, SmolLM2's greedy step (49152 logits): 1.0-1.3 -> 0.18 ms.
//! variant MAX
//! variant MIN
//! variant MAX INT
//! variant MIN INT
//! variant ROW MAX
//! variant ROW MIN
//! variant ROW MAX INT
//! variant ROW MIN INT
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

#ifdef ROW
// (value v at index i) wins over (b at j): better, or equal and earlier (a NaN equals a NaN)
bool wins(VALUE_TYPE v, int i, VALUE_TYPE b, int j) {
#ifdef INT
    return better(v, b) || (v == b && i < j);
#else
    if (isnan(v) || isnan(b)) return isnan(v) && (!isnan(b) || i < j);
    return better(v, b) || (v == b && i < j);
#endif
}

const int L = int(gl_WorkGroupSize.x);   // a power of two
shared VALUE_TYPE sv[L];
shared int si[L];

void main() {
    int r = int(gl_WorkGroupID.x), lane = int(gl_LocalInvocationID.x);
    if (r >= p.rows) return;   // (the whole workgroup)
    int base = (r / p.inner) * p.D * p.inner + r % p.inner;
    int at = min(lane, p.D - 1);
    VALUE_TYPE best = VALUE(x[base + at * p.inner]);
    for (int k = lane + L; k < p.D; k += L) {
        VALUE_TYPE v = VALUE(x[base + k * p.inner]);
        if (better(v, best)) { best = v; at = k; }
    }
    sv[lane] = best;
    si[lane] = at;
    barrier();
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lane < h && wins(sv[lane + h], si[lane + h], sv[lane], si[lane])) {
            sv[lane] = sv[lane + h];
            si[lane] = si[lane + h];
        }
        barrier();
    }
    if (lane == 0) o[r] = si[0];
}
#else
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
#endif
