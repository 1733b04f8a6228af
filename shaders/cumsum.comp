#version 450
#extension GL_GOOGLE_include_directive : require
// Cumulative sums, products, maxima and minima along one dim (vkq/ops/scan.py): an invocation
// a row, the row's values `inner` words apart (x seen as (outer, D, inner)), taken in order, so
// int32 sums are exact (wrapping) and float sums follow one order:
//   I2I  int32 -> int32      (ids, masks: RoBERTa's position ids, Llama's from its mask)
//   I2F  int32 -> float32    (a bool mask counted as floats: DETR's sine positions); exact
//                            while the sums fit int32, then rounded once, as torch's double sum
//   F2F  float32 -> float32  compensated (Kahan; `precise` keeps the compensation from being
//                            folded away), close to torch's CPU sum in double
//   F_PROD               float32 products (cumprod, and prod as its last): each step in
//                        double-float (Dekker's exact product of the running (hi, lo) pair and
//                        x, renormalised), rounded to float32 when stored: torch's CPU cumprod
//                        keeps its running product in double
//   I_PROD               int32 products, wrapping
//   F_MAX / F_MIN        running max / min (cummax / cummin values): a NaN stays once seen,
//                        equal values take the later one (0 after -0), as ATen's x >= best
//   I_MAX / I_MIN        the same on int32
//   {F,I}_{MAX,MIN}_INDEX   cummax / cummin's indices (int32): where that running extreme was
//                        last taken
//   F_LOGADDEXP          log(cumsum(exp x)) (logcumsumexp): ATen's step, acc = log1p(exp(min -
//                        max)) + max of (x, acc), x where both are the same infinity, a NaN
//                        staying; in float32 (ATen keeps acc in double: a few ulp a step apart)
// A row is a loop of D iterations: on llvmpipe D must stay under its loop budget (scan.py).
//! variant I2I
//! variant I2F
//! variant F2F
//! variant F_PROD
//! variant I_PROD
//! variant F_MAX
//! variant F_MIN
//! variant I_MAX
//! variant I_MIN
//! variant F_MAX_INDEX
//! variant F_MIN_INDEX
//! variant I_MAX_INDEX
//! variant I_MIN_INDEX
//! variant F_LOGADDEXP
#include "common.glsl"
#include "float_math.glsl"

layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };
layout(push_constant) uniform Params { int rows, D, inner; } p;

void main() {
    int r = linear_invocation();
    if (r >= p.rows) return;
    int base = (r / p.inner) * p.D * p.inner + r % p.inner;
#if defined(F_PROD)
    precise float hi = 1.0, lo = 0.0;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        const float v = uintBitsToFloat(x[at]);
        if (abs(hi) < 1e30 && abs(v) < 1e30 && abs(hi) > 1e-30 && abs(v) > 1e-30) {
            float ph, pl;
            two_prod(hi, v, ph, pl);
            precise float e = pl + lo * v;
            precise float s = ph + e;
            lo = e - (s - ph);
            hi = s;
        } else {                         // near overflow, underflow, 0, inf or NaN: plain float32
            hi = hi * v;
            lo = 0.0;
        }
        o[at] = floatBitsToUint(hi);
    }
#elif defined(I_PROD)
    int s = 1;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        s *= int(x[at]);
        o[at] = uint(s);
    }
#elif defined(F_MAX) || defined(F_MIN)
    float best = uintBitsToFloat(x[base]);
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        const float v = uintBitsToFloat(x[at]);
#ifdef F_MAX
        best = isnan(v) || (!isnan(best) && v >= best) ? v : best;
#else
        best = isnan(v) || (!isnan(best) && v <= best) ? v : best;
#endif
        o[at] = floatBitsToUint(best);
    }
#elif defined(F_MAX_INDEX) || defined(F_MIN_INDEX) || defined(I_MAX_INDEX) || defined(I_MIN_INDEX)
#if defined(F_MAX_INDEX) || defined(F_MIN_INDEX)
    float best = uintBitsToFloat(x[base]);
#else
    int best = int(x[base]);
#endif
    int index = 0;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
#if defined(F_MAX_INDEX)
        const float v = uintBitsToFloat(x[at]);
        const bool taken = isnan(v) || (!isnan(best) && v >= best);
#elif defined(F_MIN_INDEX)
        const float v = uintBitsToFloat(x[at]);
        const bool taken = isnan(v) || (!isnan(best) && v <= best);
#elif defined(I_MAX_INDEX)
        const int v = int(x[at]);
        const bool taken = v >= best;
#else
        const int v = int(x[at]);
        const bool taken = v <= best;
#endif
        if (taken) {
            best = v;
            index = k;
        }
        o[at] = uint(index);
    }
#elif defined(F_LOGADDEXP)
    float acc = uintBitsToFloat(0xff800000u);       // -inf
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        const float v = uintBitsToFloat(x[at]);
        if (isnan(v) || isnan(acc)) {
            acc = v + acc;
        } else {
            float lo = min(v, acc), hi = max(v, acc);
            acc = lo != hi || !isinf(lo) ? log1p_f32(exp_f32(lo - hi)) + hi : v;
        }
        o[at] = floatBitsToUint(acc);
    }
#elif defined(I_MAX) || defined(I_MIN)
    int best = int(x[base]);
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
#ifdef I_MAX
        best = max(best, int(x[at]));
#else
        best = min(best, int(x[at]));
#endif
        o[at] = uint(best);
    }
#elif defined(F2F)
    // compensated; the plain sum where that is inf or NaN (an inf's compensation is NaN)
    precise float s = 0.0, comp = 0.0, plain = 0.0;
    for (int k = 0; k < p.D; ++k) {
        int at = base + k * p.inner;
        const float v = uintBitsToFloat(x[at]);
        precise float term = v - comp;
        precise float next = s + term;
        comp = (next - s) - term;
        s = next;
        plain += v;
        o[at] = floatBitsToUint(isinf(plain) || isnan(plain) ? plain : s);
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
