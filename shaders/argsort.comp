#version 450
#extension GL_GOOGLE_include_directive : require
// Stable argsort along one dim (vkq/ops/scan.py): x seen as (outer, D, inner), an invocation a
// value; its rank in its row is the number of values that sort before it (smaller, ascending;
// larger, DESC; or equal and earlier), and it writes its own index there: out[rank] = k. Equal
// values keep their order (torch's stable=True; -0 equals 0), a NaN sorts after every number
// ascending and before them descending, as torch's sort. No two values share a rank, so every
// output word is written once, with no atomics and no barriers. A row costs D^2 comparisons:
// what a bitonic network saves on long rows is lost to its log^2 D passes on the short rows of
// token pruning and routing; an invocation's loop of D iterations stays under llvmpipe's loop
// budget (scan.py).
//   ASC / DESC           float32 x
//   ASC INT / DESC INT   int32 x
//! variant ASC
//! variant DESC
//! variant ASC INT
//! variant DESC INT
#include "common.glsl"

layout(constant_id = 3) const int PER = 4;

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { int o[]; };
layout(push_constant) uniform Params { int n, D, inner; } p;

#ifdef INT
#define VALUE(w) int(w)
#define VALUE_TYPE int
bool before(int a, int b) {          // a sorts strictly before b
#ifdef DESC
    return a > b;
#else
    return a < b;
#endif
}
#else
#define VALUE(w) uintBitsToFloat(w)
#define VALUE_TYPE float
bool before(float a, float b) {      // NaN above every number, NaNs equal to each other
    if (isnan(a) || isnan(b)) {
#ifdef DESC
        return isnan(a) && !isnan(b);
#else
        return isnan(b) && !isnan(a);
#endif
    }
#ifdef DESC
    return a > b;
#else
    return a < b;
#endif
}
#endif

void main() {
    const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x * gl_NumWorkGroups.y);
    int i = linear_invocation();
    for (int e = 0; e < PER && i < p.n; ++e, i += stride) {
        const int plane = p.D * p.inner, r = i / plane, rest = i - r * plane;
        const int k = rest / p.inner, c = rest - k * p.inner;
        const int base = r * plane + c;
        const VALUE_TYPE v = VALUE(x[i]);
        int rank = 0;
        for (int j = 0; j < p.D; ++j) {
            const VALUE_TYPE w = VALUE(x[base + j * p.inner]);
            rank += int(before(w, v) || (j < k && !before(v, w)));
        }
        o[base + rank * p.inner] = k;
    }
}
