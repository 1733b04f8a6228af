#version 450
#extension GL_GOOGLE_include_directive : require
// Cumulative sums along one dim (vkq/ops/scan.py): an invocation a row, the row's values `inner`
// words apart (x seen as (outer, D, inner)), summed in order, so int32 sums are exact (wrapping)
// and float sums follow one order:
//   I2I  int32 -> int32      (ids, masks: RoBERTa's position ids, Llama's from its mask)
//   I2F  int32 -> float32    (a bool mask counted as floats: DETR's sine positions); exact
//                            while the sums fit int32, then rounded once, as torch's double sum
//   F2F  float32 -> float32  compensated (Kahan; `precise` keeps the compensation from being
//                            folded away), close to torch's CPU sum in double
// A row is a loop of D iterations: on llvmpipe D must stay under its loop budget (scan.py).
//! variant I2I
//! variant I2F
//! variant F2F
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params { int rows, D, inner; } p;

void main() {
    int r = linear_invocation();
    if (r >= p.rows) return;
    int base = (r / p.inner) * p.D * p.inner + r % p.inner;
#if defined(F2F)
    precise float s = 0.0, comp = 0.0;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        precise float term = uintBitsToFloat(x[at]) - comp;
        precise float next = s + term;
        comp = (next - s) - term;
        s = next;
        o[at] = floatBitsToUint(s);
    }
#else
    int s = 0;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        s += int(x[at]);
#if defined(I2F)
        o[at] = floatBitsToUint(float(s));
#else
        o[at] = uint(s);
#endif
    }
#endif
}
