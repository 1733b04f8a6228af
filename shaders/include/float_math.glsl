#ifndef VKQ_FLOAT_MATH_GLSL
#define VKQ_FLOAT_MATH_GLSL
#include "float_exact.glsl"
// Float32 functions with a stated accuracy that does not depend on the driver's exp/erf
// (Vulkan allows exp an error of 3 + 2|x| ulp). vkq/ops/float.py tests them against numpy.

// exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' expf polynomial for
// e^r, scaled by 2^n with ldexp (exact). Relative error <= 2 ulp for x in [-87.3, 88.7]. Past
// it: inf above ln(FLT_MAX), 0 below ln(2^-150), as exp rounds them (it was clamped: exp(-inf)
// was 1.2e-38, exp(100) FLT_MAX, silu(-1e30) -1.2e-8); between -103.97 and -87.3
// e^(x + 24 ln 2) 2^-24, a subnormal (0 where the device flushes them). Both ends are chosen by
// comparisons after the polynomial, which leave a NaN a NaN (clamp()'s max / min turned NaN
// into a number, and an isnan() test cost SiLU and sigmoid 10-20% on lavapipe); an input
// clamp as well cost them 5-10% there, so the polynomial runs on any x, its result replaced.
float exp_f32(float x) {       // `precise` throughout: vkq/ops/float_math.py exp_f32 is its exact twin
    const bool sub = x < -87.33654;
    precise float xs = x + 16.635532333;                   // 24 ln 2 (past the range: replaced below)
    precise float y = mix(x, xs, sub);      // (mix, a select: glslang branches for ?: on expressions)
    precise float n = roundEven(y * 1.44269504089);
    precise float r = y - n * 0.693359375;     // ln2 high part: 9 significant bits, n * it is exact
    r = r + n * 2.12194440e-4;         // ln2 = 0.693359375 - 2.12194440e-4
    precise float p = 1.9875691500e-4;
    p = p * r + 1.3981999507e-3;
    p = p * r + 8.3334519073e-3;
    p = p * r + 4.1665795894e-2;
    p = p * r + 1.6666665459e-1;
    p = p * r + 5.0000001201e-1;
    p = p * (r * r) + r + 1.0;
    precise float v = ldexp(p, int(n));
    precise float vs = v * 5.9604644775390625e-8;       // 2^-24
    v = mix(v, vs, sub);
    return mix(mix(v, 0.0, x < -103.972077), uintBitsToFloat(0x7f800000u), x > 88.72283);
}

// erf(x): the rational approximation x P(x^2) / Q(x^2) of Eigen and XLA (float32), with x
// clamped to [-4, 4] (|erf(4)| = 1 - 1.5e-8, 1 in float32). Max abs error 4.11e-7 measured
// in float32 against math.erf on [-6, 6] (vkq/ops/float_math.py: erf_f32 is its bit-exact twin);
// unlike Abramowitz-Stegun 7.1.26 (max abs error 1.5e-7 in exact arithmetic, but 1 - t P(t)
// e^{-x^2} loses relative accuracy near 0) it is accurate relative to erf near 0 too.
float erf_f32(float x) {       // `precise` throughout: vkq/ops/float_math.py erf_f32 is its exact twin
    x = x < -4.0 ? -4.0 : x > 4.0 ? 4.0 : x;      // (comparisons: a NaN stays NaN, clamp() made it -1)
    precise float x2 = x * x;
    x2 = ftz(x2);
    precise float p = -2.72614225801306e-10;
    p = p * x2 + 2.77068142495902e-08;
    p = p * x2 - 2.10102402082508e-06;
    p = p * x2 - 5.69250639462346e-05;
    p = p * x2 - 7.34990630326855e-04;
    p = p * x2 - 2.95459980854025e-03;
    p = p * x2 - 1.60960333262415e-02;
    precise float q = -1.45660718464996e-05;
    q = q * x2 - 2.13374055278905e-04;
    q = q * x2 - 1.68282697438203e-03;
    q = q * x2 - 7.37332916720468e-03;
    q = q * x2 - 1.42647390514189e-02;
    // p / q as (x p) (1 / q): q in [-2.4, -0.0142], so -128 q in [1, 2^100], recip_newton's range
    // (the scalings by 2^7 are exact); no division (Vulkan's is 2.5 ulp, not the same everywhere)
    precise float r = recip_newton(q * -128.0) * -128.0;
    precise float y = ftz(x * p) * r;
    return ftz(y);
}

// (hi, lo) = a * b exactly (Dekker, without fma: Veltkamp's split by 4097 = 2^12 + 1), for
// |a|, |b| < 2^115 so that the split does not overflow
void two_prod(float a, float b, out float hi, out float lo) {
    precise float p = a * b;
    precise float ca = 4097.0 * a, ah = ca - (ca - a), al = a - ah;
    precise float cb = 4097.0 * b, bh = cb - (cb - b), bl = b - bh;
    hi = p;
    lo = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
}

// |x|'s bits a (finite, nonzero) as m 2^e, m in [1, 2): a subnormal's mantissa field normalized
// through its exact conversion to float (a < 2^23), no float arithmetic on it (a device that
// flushes subnormals would read it as 0)
float div_split(uint a, out int e) {
    const bool sub = a < 0x00800000u;
    const uint b = mix(a, floatBitsToUint(float(a)), sub);
    e = int(b >> 23) - mix(127, 276, sub);
    return uintBitsToFloat((b & 0x007FFFFFu) | 0x3F800000u);
}

// m - q d for m, d in [1, 2), q near m / d: Dekker's product q d = hi + lo (d split once as
// dh + dl, q by Veltkamp's 4097), m - hi exact (Sterbenz); exact where q is within an ulp of m / d
float div_residual(float m, float q, float d, float dh, float dl) {
    precise float hi = q * d;
    precise float c = 4097.0 * q, qh = c - (c - q), ql = q - qh;
    precise float lo = ((qh * dh - hi) + qh * dl + ql * dh) + ql * dl;
    precise float r = (m - hi) - lo;
    return r;
}

// x / y, the same bits on every device (Vulkan's division is 2.5 ulp, its bits the driver's):
// only + - * (each correctly rounded), comparisons and integer operations; every intermediate
// float is normal, so a device that flushes subnormals computes the same. Returns the exact
// quotient rounded to nearest at float's 24 bits as if the exponent range had no bounds, then
// inf at or past 2^128 (as IEEE) and a zero of the quotient's sign below 2^-126 (issue 59's rule
// 4). That is IEEE's x / y wherever that is a normal number, inf or zero, and NaN (0x7FC00000)
// for a NaN operand, 0 / 0 and inf / inf; IEEE's subnormal quotients, and its 2^-126 from exact
// quotients in [1 - 2^-24, 1 - 2^-25) 2^-126, come out as zeros. Subnormal operands are exact.
// The operands as m 2^e (bits); q = mx / my in (1/2, 2) as mx recip_newton(my), within 2 ulp;
// one correction by the residual, q + r / my, leaves it within 1/2 + 2^-21 ulp (faithful), so
// its residual is exact and says on which side of q, and past which midpoint, mx / my lies
// (never on one); the exponent goes on as an integer. vkq/ops/float_math.py div_f32 is its twin.
// Selects by mix(), no && / || / ?: (glslang makes branches of them): with its 10 branches
// SwiftShader took 197 s (and 17 GB) to compile float_binary's CONTIG variant, 5 calls of it;
// branch-free, 0.15 s.
float div_f32(float x, float y) {
    const uint ux = floatBitsToUint(x), uy = floatBitsToUint(y), inf = 0x7F800000u;
    const uint sgn = (ux ^ uy) & 0x80000000u, ax = ux & 0x7FFFFFFFu, ay = uy & 0x7FFFFFFFu;
    int ex, ey;
    const float mx = div_split(ax, ex), my = div_split(ay, ey);   // (0, inf, NaN: replaced below)
    precise float r = recip_newton(my);
    precise float c = 4097.0 * my, mh = c - (c - my), ml = my - mh;
    precise float q = mx * r;
    q = q + div_residual(mx, q, my, mh, ml) * r;
    precise float res = div_residual(mx, q, my, mh, ml);         // mx / my = q + res / my exactly
    const uint qb = floatBitsToUint(q);
    precise float qn = uintBitsToFloat(qb + uint(res > 0.0) - uint(res < 0.0));
    precise float t = (qn - q) * my, rr = res + res;              // (exact: a gap times my)
    const uint fb = mix(qb, floatBitsToUint(qn), abs(rr) > abs(t));   // past the midpoint
    const int e = int(fb >> 23) + ex - ey;                        // the biased exponent
    uint bits = mix(mix((uint(e) << 23) | (fb & 0x007FFFFFu), 0u, e <= 0), inf, e >= 255);
    bits = mix(bits, 0u, any(bvec2(ax == 0u, ay == inf)));
    bits = mix(bits, inf, any(bvec2(ax == inf, ay == 0u)));
    const bool nan = any(bvec4(ax > inf, ay > inf, (ax | ay) == 0u, all(bvec2(ax == inf, ay == inf))));
    return uintBitsToFloat(mix(bits | sgn, 0x7FC00000u, nan));
}

// erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2) (Numerical Recipes' erfcc: relative error
// 1.05e-7 in exact arithmetic, measured on [-5, 10]), 2 - erfc(|x|) below 0. -x^2 is split
// exactly into hi + lo and e^hi, e^(lo + P) taken apart: rounding x^2 (up to 4e-6 at x = 9)
// would otherwise enter the exponent. A few ulp (tests/test_float_ops.py); 0 past 10.06.
float erfc_f32(float x) {
    float z = abs(x);
    if (isnan(x) || z > 10.1) return isnan(x) ? x : x > 0.0 ? 0.0 : 2.0;
    precise float t = 1.0 / (1.0 + 0.5 * z);
    precise float p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    float hi, lo;
    two_prod(-z, z, hi, lo);
    precise float small = exp_f32(p + lo);
    precise float r = hi < -87.0 ? t * (exp_f32(hi + 16.635532333) * small) * 5.9604644775390625e-8   // (e^(hi + 24 ln 2) 2^-24)
                                 : t * (exp_f32(hi) * small);
    return x < 0.0 ? 2.0 - r : r;
}

// tanh(x) = sign(x) (1 - 2 recip_newton(e^{2|x|} + 1)), |x| clamped to 9.5 (tanh is 1 in float32
// from 9.01; e^19 + 1 stays in recip_newton's range); below |x| = 1/16 the series
// x - x^3/3 + 2x^5/15 (no cancellation), a zero kept with its sign. Abs error <= 2e-7.
// Bit-exact: `precise`, products flushed, no division (vkq/ops/float_math.py tanh_f32 is its twin).
float tanh_f32(float x) {
    x = ftz(x);
    const float a = abs(x);
    if (a < 0.0625) {
        precise float x2 = x * x;
        x2 = ftz(x2);
        precise float c = ftz(x * x2) * (-0.333333333 + x2 * 0.133333333);
        precise float y = x + ftz(c);
        return x == 0.0 ? x : ftz(y);
    }
    precise float e = exp_f32(2.0 * (a > 9.5 ? 9.5 : a));          // (a NaN stays NaN)
    precise float t = 1.0 - 2.0 * recip_newton(e + 1.0);
    return x < 0.0 ? -t : t;
}

// log(x) and its kin, bit-exact (float_exact.glsl's rules; vkq/ops/float_math.py log_f32,
// log1p_f32, log2_f32, log10_f32, expm1_f32, exp2_f32, pow_f32 are their twins). x > 0 finite
// by its bits b (a subnormal too, normalized by integers: the same where a device flushes it) as
// (1 + f) 2^e, 1 + f in [sqrt(1/2), sqrt 2) (Cephes' split), f exact.
float log_reduce(int b, out int e) {
    const int m = b & 0x7fffff, p = findMSB(m);            // (subnormal: m != 0, p in 0..22)
    const bool sub = (b & 0x7f800000) == 0;
    const int ms = (m << (23 - p)) & 0x7fffff;
    const int mb = mix(m, ms, sub);                         // the normalized mantissa's bits
    const bool lowhalf = mb < 0x3504f3;                    // 1.mb < sqrt 2 (Cephes' f < sqrt(1/2))
    const int es = p - 149, en = ((b >> 23) & 0xff) - 127;
    e = mix(en, es, sub) + mix(1, 0, lowhalf);
    precise float f = intBitsToFloat(mb | mix(0x3f000000, 0x3f800000, lowhalf)) - 1.0;   // (exact)
    return f;
}

// log(1 + f) - f + f^2 / 2 for f in [sqrt(1/2) - 1, sqrt 2 - 1): Cephes' degree-9 polynomial (times f^3)
float log_poly(float f, float z) {
    precise float y = 7.0376836292e-2;
    y = y * f - 1.1514610310e-1;
    y = y * f + 1.1676998740e-1;
    y = y * f - 1.2420140846e-1;
    y = y * f + 1.4249322787e-1;
    y = y * f - 1.6668057665e-1;
    y = y * f + 2.0000714765e-1;
    y = y * f - 2.4999993993e-1;
    y = y * f + 3.3333331174e-1;
    y = y * f * z;
    return y;
}

// log(1 + f) + e ln 2 + c, ln 2 in two parts (e times the high one exact): Cephes' logf
float log_sum(float f, int e, float c) {
    precise float z = f * f;
    const float fe = float(e);
    precise float y = log_poly(f, z);
    y += -2.12194440e-4 * fe;
    y += -0.5 * z;
    y += c;
    precise float r = (f + y) + 0.693359375 * fe;
    return r;
}

// log(x): Cephes' logf on log_reduce's split. <= 1 ulp measured (vkq/ops/float.py); log(+-0) = -inf,
// x < 0 (-inf included) NaN, log(inf) = inf, a subnormal x its log.
float log_f32(float x) {
    const int b = floatBitsToInt(x);
    int e;
    const float f = log_reduce(b, e);
    const float r = log_sum(f, e, 0.0);
    const float ninf = uintBitsToFloat(0xff800000u), nan = uintBitsToFloat(0x7fc00000u);
    const bool zero = (b & 0x7fffffff) == 0, neg = b < 0, special = (b & 0x7f800000) == 0x7f800000;
    const float s = special ? x : r;           // (selects of values: no branches, SwiftShader's compile time)
    const float t = neg ? nan : s;
    return zero ? ninf : t;
}

// log(1 + x): u = 1 + x rounded split as log_f32's, plus what the rounding dropped, c / u with c =
// x - (u - 1) (u < 2) or 1 - (u - x) (both exact; 0 from u = 2^24, where c / u < 2^-24 of a log
// >= 16.6), 1 / u = 2^-e / (1 + f) by recip_newton (no division). |x| < 2^-25: x (zeros,
// subnormals). log1p(-1) = -inf, x < -1 (-inf included) NaN, log1p(inf) = inf.
float log1p_f32(float x) {
    const int b = floatBitsToInt(x);
    precise float u = 1.0 + x;
    precise float c0 = x - (u - 1.0), c1 = 1.0 - (u - x);
    const float c = mix(c1, c0, u < 2.0);
    int e;
    const float f = log_reduce(floatBitsToInt(u), e);
    const float s = intBitsToFloat((127 - min(e, 100)) << 23);           // 2^-e (exact)
    precise float k = mix(0.0, c, u < 16777216.0) * s;
    precise float corr = k * (recip_newton(2.0 + (f + f)) * 2.0);       // c / u
    const float r = log_sum(f, e, corr);
    const float ninf = uintBitsToFloat(0xff800000u), nan = uintBitsToFloat(0x7fc00000u);
    const bool tiny = (b & 0x7fffffff) < 0x33000000, minus1 = x == -1.0, outside = !(x > -1.0),
               pinf = x == uintBitsToFloat(0x7f800000u);
    const float r1 = pinf ? x : r;
    const float r2 = outside ? nan : r1;
    const float r3 = minus1 ? ninf : r2;
    return tiny ? x : r3;
}

// log2(x) = e + log(1 + f) / ln 2 on log_reduce's split: exact at powers of two (log2(8) = 3, so
// floor(log2(x)) finds a bit length); the special values as log_f32's.
float log2_f32(float x) {
    const int b = floatBitsToInt(x);
    int e;
    const float f = log_reduce(b, e);
    const float l = log_sum(f, 0, 0.0);
    precise float r = float(e) + l * 1.44269504089;
    const float ninf = uintBitsToFloat(0xff800000u), nan = uintBitsToFloat(0x7fc00000u);
    const bool zero = (b & 0x7fffffff) == 0, neg = b < 0, special = (b & 0x7f800000) == 0x7f800000;
    const float s = special ? x : r;
    const float t = neg ? nan : s;
    return zero ? ninf : t;
}

// log10(x) = log_f32(x) log10(e)
float log10_f32(float x) {
    precise float r = log_f32(x) * 0.43429448190325176;
    return r;
}

// x^e, as C's powf / torch.pow: exp_f32(e log_f32|x|) (flushed), the sign from an odd integer e
// where x < 0 (or x = -0), NaN for x < 0 and a fractional e, x^0 = 1 (NaN too), 0 and inf by
// their rules; x classified by its bits (a subnormal x is not 0). Relative error <= (3 + 3
// |e ln|x||) ulp: log's ulp grow by the product |e ln x| through exp.
float pow_f32(float x, float e) {
    const int b = floatBitsToInt(x);
    // (any / all of bvecs, not || / &&: glslang branches for those, and SwiftShader's compile
    // time grows with the branches)
    const bool integral = e == trunc(e);
    precise float h = abs(e) * 0.5;
    const bool odd = all(bvec3(integral, abs(e) < 16777216.0, h != trunc(h)));
    const bool zero = (b & 0x7fffffff) == 0, ainf = (b & 0x7fffffff) == 0x7f800000;
    const float inf = uintBitsToFloat(0x7f800000u);
    precise float t = e * log_f32(abs(x));
    const float v = ftz(exp_f32(ftz(t)));
    const bool epos = e > 0.0, neg = b < 0, nanin = any(bvec2(isnan(x), isnan(e)));
    const bool one = any(bvec3(e == 0.0, x == 1.0, all(bvec2(x == -1.0, isinf(e)))));     // (even 1^NaN, NaN^0: C's)
    const bool bad = all(bvec4(neg, !zero, !integral, !ainf));            // (-inf^0.75 = inf)
    const float zr = epos ? 0.0 : inf, ir = epos ? inf : 0.0;
    const float r1 = ainf ? ir : v;
    const float r2 = zero ? zr : r1;
    const float r3 = mix(r2, -r2, all(bvec2(odd, neg)));
    const float r4 = bad ? uintBitsToFloat(0x7fc00000u) : r3;
    precise float xe = x + e;
    const float r5 = nanin ? xe : r4;
    return one ? 1.0 : r5;
}

// e^x - 1: Kahan's (u - 1) x / log(u) with u = e^x rounded, which restores what u - 1 cancels
// near 0 (exp(x) - 1 alone is 0 for |x| < 2^-25), x / log(u) by recip_newton (2^26 |log u| in
// [4, 2^33]); u = 1: x, u = 0 (or subnormal): -1, inf: inf.
float expm1_f32(float x) {
    precise float u = exp_f32(x);
    precise float um1 = u - 1.0;
    const float l = log_f32(u);
    precise float q = abs(x) * (recip_newton(abs(l) * 67108864.0) * 67108864.0);     // x / log(u) > 0
    precise float r = um1 * q;
    const bool same = u == 1.0, low = um1 == -1.0, keep = isinf(u) || isnan(x);
    const float r1 = keep ? u : r;
    const float r2 = low ? -1.0 : r1;
    return same ? x : r2;
}

// 2^x: n = round(x) exactly, 2^(x - n) = e^((x - n) ln 2) by exp_f32 (|x - n| <= 1/2: exact),
// scaled by 2^n (exact; below 2^-126 flushed, as a device may: 0 from x = -127). Exact at integers, a few ulp
// elsewhere; overflow inf, NaN NaN.
float exp2_f32(float x) {
    const float x0 = x < -127.0 ? -127.0 : x;      // (a NaN stays NaN: replaced)
    const float xc = x0 > 128.0 ? 128.0 : x0;
    precise float n = roundEven(xc);
    precise float v = exp_f32((xc - n) * 0.693147180559945);
    const bool small = n < -125.0;
    const int k = small ? 24 : 0;
    const float sc = small ? 5.9604644775390625e-8 : 1.0;
    precise float w = ldexp(v, int(n) + k) * sc;
    const float wf = ftz(w);
    const float big = isnan(x) ? x : uintBitsToFloat(0x7f800000u);
    const float r1 = x < -127.0 ? 0.0 : wf;
    return !(x < 128.0) ? big : r1;
}

// atan(x): Cephes' atanf. |x| reduced to [0, tan(pi/8)] by pi/2 - atan(1/|x|) (|x| > tan 3pi/8)
// or pi/4 + atan((|x| - 1)/(|x| + 1)) (|x| > tan pi/8), then its odd degree-9 polynomial; the
// sign bit of x restored (atan(-0) = -0). ~2 ulp, and Vulkan's division in the reduction.
float atan_f32(float x) {
    float a = abs(x), y = 0.0, z = a;
    if (a > 2.414213562373095) { y = 1.5707963267948966; z = -1.0 / a; }
    else if (a > 0.4142135623730950) { y = 0.7853981633974483; z = (a - 1.0) / (a + 1.0); }
    float zz = z * z;
    float r = y + ((((8.05374449538e-2 * zz - 1.38776856032e-1) * zz + 1.99777106478e-1) * zz
                    - 3.33329491539e-1) * zz * z + z);
    return floatBitsToInt(x) < 0 ? -r : r;
}

// atan2(y, x) as C's: atan_f32(|y| / |x|) in the quadrant of (x, y), the signs of zeros kept
// (atan2(+-0, -0) = +-pi, atan2(+-0, +0) = +-0), both infinite: +-pi/4 or +-3pi/4; NaN NaN.
float atan2_f32(float y, float x) {
    if (isnan(x) || isnan(y)) return x + y;
    float ay = abs(y), ax = abs(x), t;
    if (isinf(ax) && isinf(ay)) t = 0.7853981633974483;
    else if (ay == 0.0 || isinf(ax)) t = 0.0;
    else t = atan_f32(ay / ax);                       // (x = 0 or y infinite: atan(inf) = pi/2)
    t = floatBitsToInt(x) < 0 ? 3.1415926535897932 - t : t;
    return floatBitsToInt(y) < 0 ? -t : t;
}

// asin(x): Cephes' asinf. |x| > 1/2: pi/2 - 2 asin(sqrt((1 - |x|) / 2)), the polynomial on
// [0, 1/2]; |x| > 1 NaN; the sign of x. acos from it as Cephes' acosf. A few ulp (asin), a few
// ulp of pi (acos near -1).
float asin_poly(float a) {      // asin(a) for 0 <= a <= 1/2
    float z = a * a;
    return a < 1e-4 ? a : ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z
                           + 7.4953002686e-2) * z + 1.6666752422e-1) * z * a + a;
}

float asin_f32(float x) {
    float a = abs(x);
    float r = a > 0.5 ? 1.5707963267948966 - 2.0 * asin_poly(sqrt(0.5 * (1.0 - a))) : asin_poly(a);
    r = a > 1.0 ? uintBitsToFloat(0x7fc00000u) : r;
    return floatBitsToInt(x) < 0 ? -r : r;
}

float acos_f32(float x) {
    if (!(abs(x) <= 1.0)) return uintBitsToFloat(0x7fc00000u);
    return x < -0.5 ? 3.1415926535897932 - 2.0 * asin_poly(sqrt(0.5 * (1.0 + x)))
         : x > 0.5 ? 2.0 * asin_poly(sqrt(0.5 * (1.0 - x)))
         : 1.5707963267948966 - asin_poly(abs(x)) * sign(x);
}

// a >= 0 as j pi/4 + r, j the even octant (0, 2, 4, 6) of its nearest multiple of pi/2 and r in
// [-pi/4, pi/4]. Below 8192 Cephes' reduction: the octant from a 4/pi, pi/4 subtracted in three
// parts (exact products there). From 8192 up Payne-Hanek's: a = m 2^s (m the 24-bit mantissa)
// times the 96 bits of 2/pi whose product with m lands near the binary point (the bits above
// add multiples of 4 quarter turns, those below under 2^-39 of a turn), a 120-bit integer
// product in 32-bit words; its bits at the point are the quarter turns and the fraction of one.
// (That reduction used to run at every a: float32's products lost their bits past 8192 and
// j's int overflowed past 2^31, so sin(1e30) was -inf.) Its callers make NaN of NaN and inf.
// 2 ulp measured on sin / cos, 3 on tan, from 1 to 1.6e38. A GPU skips the branch where no lane
// takes it; llvmpipe runs it masked, which made sin / cos / tan 1.5x slower there (tried: a
// loop of at most one turn, a subgroupAny condition; neither skipped it).
// (selects, not arrays: llvmpipe gave an indexed array memory of each lane's own, and the
// small-a path ran 9 times slower beside it)
uint two_over_pi(int i) {
    return i == 0 ? 0xA2F9836Eu : i == 1 ? 0x4E441529u : i == 2 ? 0xFC2757D1u
         : i == 3 ? 0xF534DDC0u : i == 4 ? 0xDB629599u : 0x3C439041u;
}

int reduce_octant_large(float a, out float r) {
    const uint bits = floatBitsToUint(a);
    const uint m = (bits & 0x7FFFFFu) | 0x800000u;
    const int s = int(bits >> 23) - 150;                   // a = m 2^s, s >= -10
    const int i0 = s >= 2 ? (s - 2) >> 5 : 0;              // the first word of 2/pi that counts
    uint h0, l0, h1, l1, h2, l2, c1, c2, c3;
    umulExtended(m, two_over_pi(i0 + 2), h0, l0);
    umulExtended(m, two_over_pi(i0 + 1), h1, l1);
    umulExtended(m, two_over_pi(i0), h2, l2);
    // the product, p1 the low word (p0 = p5 = 0: padding)
    const uint p1 = l0, p2 = uaddCarry(h0, l1, c1), t = uaddCarry(h1, l2, c2), p3 = uaddCarry(t, c1, c3);
    const uint p4 = h2 + c2 + c3;
    const int sh = 32 * i0 + 96 - s;                       // the product's fraction bits: 63 .. 106
    const int w = sh >> 5, b = sh & 31;                    // the point: bit b of word w + 1 (w: 1 .. 3)
    const uint wm1 = w == 1 ? 0u : w == 2 ? p1 : p2;      // words w - 1, w, w + 1, w + 2
    const uint w0 = w == 1 ? p1 : w == 2 ? p2 : p3;
    const uint w1 = w == 1 ? p2 : w == 2 ? p3 : p4;
    const uint w2 = w == 1 ? p3 : w == 2 ? p4 : 0u;
    const uint turns = b == 0 ? w1 : (w1 >> b) | (w2 << (32 - b));
    uint hi = b == 0 ? w0 : (w0 >> b) | (w1 << (32 - b));
    uint lo = b == 0 ? wm1 : (wm1 >> b) | (w0 << (32 - b));
    int k = int(turns & 3u);
    const bool up = hi >= 0x80000000u;                     // past half a quarter: the next one, r < 0
    if (up) {
        k += 1;
        lo = ~lo + 1u;
        hi = ~hi + (lo == 0u ? 1u : 0u);
    }
    precise float g = float(hi) * 2.3283064365386963e-10 + float(lo) * 5.421010862427522e-20;
    precise float v = g * 1.5707963267948966;
    r = up ? -v : v;
    return (2 * k) & 7;
}

int reduce_octant(float a, out float r) {
    if (!(a < 8192.0))
        return reduce_octant_large(a, r);
    int j = int(a * 1.27323954473516);          // 4 / pi
    j += j & 1;                                 // to the even octant: y = j pi/4 nearest below
    const float y = float(j);
    r = ((a - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    return j & 7;
}

// tan(x): Cephes' tanf: reduce_octant's r, its polynomial on [-pi/4, pi/4], -1/t in the odd
// quarter periods. ~3 ulp.
float tan_f32(float x) {
    const float a = abs(x);
    float z;
    const int j = reduce_octant(a, z);
    float zz = z * z;
    float t = a < 1e-4 ? z : (((((9.38540185543e-3 * zz + 3.11992232697e-3) * zz + 2.44301354525e-2) * zz
                             + 5.34112807005e-2) * zz + 1.33387994085e-1) * zz + 3.33331568548e-1) * zz * z + z;
    t = (j & 2) != 0 ? -1.0 / t : t;
    t = !(a <= 3.4028234663852886e38) ? uintBitsToFloat(0x7fc00000u) : t;           // NaN, +-inf
    return floatBitsToInt(x) < 0 ? -t : t;
}

// sinh, cosh: (e^|x| -+ e^-|x|) / 2; |x| > 9 (e^-|x| below half an ulp): (e^(|x|/2) / 2) e^(|x|/2),
// finite up to cosh's overflow at 89.4 (e^|x| is inf from 88.7); sinh |x| < 1 from expm1
// (no cancellation). A few ulp.
float cosh_f32(float x) {
    float a = abs(x);
    if (a > 9.0) { float h = exp_f32(0.5 * a); return isinf(a) ? a : (0.5 * h) * h; }
    float e = exp_f32(a);
    return 0.5 * e + 0.5 / e;
}

float sinh_f32(float x) {
    float a = abs(x), r;
    if (a > 9.0) { float h = exp_f32(0.5 * a); r = isinf(a) ? a : (0.5 * h) * h; }
    else if (a < 1.0) { float m = expm1_f32(a); r = 0.5 * (m + m / (m + 1.0)); }
    else { float e = exp_f32(a); r = 0.5 * e - 0.5 / e; }
    return floatBitsToInt(x) < 0 ? -r : r;
}

// asinh, acosh, atanh as glibc's float forms: log1p near the origin (1), log(2|x|) beyond 2^12;
// the sign of x (asinh, atanh); acosh(x < 1), |atanh x| > 1: NaN, atanh(+-1) = +-inf. A few ulp.
float asinh_f32(float x) {
    float a = abs(x), r;
    if (a > 4096.0) r = isinf(a) ? a : log_f32(a) + 0.693147180559945;
    else if (a > 2.0) r = log_f32(2.0 * a + 1.0 / (sqrt(a * a + 1.0) + a));
    else { float t = a * a; r = log1p_f32(a + t / (1.0 + sqrt(1.0 + t))); }
    return floatBitsToInt(x) < 0 ? -r : r;
}

float acosh_f32(float x) {
    if (!(x >= 1.0)) return uintBitsToFloat(0x7fc00000u);
    if (x > 4096.0) return isinf(x) ? x : log_f32(x) + 0.693147180559945;
    if (x > 2.0) return log_f32(2.0 * x - 1.0 / (x + sqrt(x * x - 1.0)));
    float t = x - 1.0;
    return log1p_f32(t + sqrt(2.0 * t + t * t));
}

float atanh_f32(float x) {
    float a = abs(x), r;
    if (!(a <= 1.0)) return uintBitsToFloat(0x7fc00000u);
    r = a == 1.0 ? uintBitsToFloat(0x7f800000u)
      : a < 0.5 ? 0.5 * log1p_f32(2.0 * a + 2.0 * a * a / (1.0 - a)) : 0.5 * log1p_f32(2.0 * a / (1.0 - a));
    return floatBitsToInt(x) < 0 ? -r : r;
}

// sqrt(x), correctly rounded (the same bits as IEEE's sqrt, numpy's and torch's; GLSL's sqrt is
// 3 ulp in Vulkan, and not the same on two devices): y = t rsqrt_newton(t) (~2 ulp), its residual
// t - y^2 exact by Dekker's product, y + (t - y^2) / (2 y) rounded once (the correction's error,
// ~2^-21 ulp, is far below the ~2^-5 ulp a float's sqrt keeps from a midpoint). t in [2^-60, 2^100)
// (the residual's products normal, y^2 finite); past it scaled by 2^+-100 (exact), a subnormal x
// as float(mantissa) 2^49 = x 2^198 by integers (the same where a device flushes it).
// sqrt(+-0) = +-0, x < 0 NaN, sqrt(inf) = inf (vkq/ops/float_math.py sqrt_f32, rsqrt_f32 are the twins).
float sqrt_core(float t, float r) {
    precise float y = t * r;
    float hi, lo;
    two_prod(y, y, hi, lo);
    precise float d = (t - hi) - lo;
    precise float s = y + d * (0.5 * r);
    return s;
}

float sqrt_scaled(int b, float x, out float sc, out float sr) {   // t = x 2^2k in [2^-60, 2^100); sc = 2^-k, sr = 2^k
    const bool sub = (b & 0x7f800000) == 0, small = (b & 0x7fffffff) < 0x21800000, big = (b & 0x7fffffff) >= 0x71800000;
    precise float ts = float(b & 0x7fffff) * 562949953421312.0;          // 2^49
    precise float tn = x * 1.2676506002282294e30;                         // 2^100
    precise float tb = x * 7.888609052210118e-31;                         // 2^-100
    const float t1 = big ? tb : x;
    const float t2 = small ? tn : t1;
    sc = sub ? 1.5777218104420236e-30 : small ? 8.881784197001252e-16 : big ? 1125899906842624.0 : 1.0;
    sr = sub ? 6.338253001141147e29 : small ? 1125899906842624.0 : big ? 8.881784197001252e-16 : 1.0;
    return sub ? ts : t2;
}

float sqrt_f32(float x) {
    const int b = floatBitsToInt(x);
    float sc, sr;
    const float t = sqrt_scaled(b, x, sc, sr);
    precise float s = sqrt_core(t, rsqrt_newton(t)) * sc;
    const bool zero = (b & 0x7fffffff) == 0, neg = b < 0, special = (b & 0x7f800000) == 0x7f800000;
    const float r1 = special ? x : s;
    const float r2 = neg ? uintBitsToFloat(0x7fc00000u) : r1;
    return zero ? x : r2;
}

// 1 / sqrt(x): rsqrt_newton (1.2 ulp) on sqrt_scaled's t; rsqrt(+-0) = +-inf, x < 0 NaN, rsqrt(inf) = 0
float rsqrt_f32(float x) {
    const int b = floatBitsToInt(x);
    float sc, sr;
    const float t = sqrt_scaled(b, x, sc, sr);
    precise float s = rsqrt_newton(t) * sr;
    const float inf = uintBitsToFloat(0x7f800000u);
    const bool zero = (b & 0x7fffffff) == 0, neg = b < 0, special = (b & 0x7f800000) == 0x7f800000;
    const float zr = neg ? -inf : inf;
    const float sp = isnan(x) ? x : 0.0;
    const float r1 = special ? sp : s;
    const float r2 = neg ? uintBitsToFloat(0x7fc00000u) : r1;
    return zero ? zr : r2;
}

// a / 6 correctly rounded (as IEEE's division, numpy's and torch's; GLSL's is 2.5 ulp) for a = 0
// or |a| in [2^-60, 2^100] (the remainder's steps normal): q = a fl(1/6) (~1 ulp), the remainder a - 6 q exact by Dekker's product,
// q + remainder fl(1/6) rounded once (checked against numpy on whole binades); other a scaled by
// 2^+-64 (exact; the result then flushed where subnormal), +-0, inf and NaN kept.
float div6_core(float a) {
    precise float q = a * 0.16666667;
    float hi, lo;
    two_prod(q, 6.0, hi, lo);
    precise float rem = (a - hi) - lo;
    precise float r = q + rem * 0.16666667;
    return r;
}

float div6_f32(float a) {
    const int b = floatBitsToInt(a) & 0x7fffffff;
    const bool big = b > 0x71800000, small = b < 0x21800000;     // (2^100, 2^-60)
    precise float ab = a * 5.421010862427522e-20, as = a * 1.8446744073709552e19;      // 2^-64, 2^64
    const float a1 = big ? ab : a;
    const float a2 = small ? as : a1;
    const float k = big ? 1.8446744073709552e19 : small ? 5.421010862427522e-20 : 1.0;
    precise float q = div6_core(a2) * k;
    const float qf = ftz(q);
    const bool keep = uint(b) - 1u >= 0x7f7fffffu;        // +-0 (its sign), inf, NaN
    return keep ? a : qf;
}

// sqrt(x^2 + y^2) without overflow or underflow in the squares: both scaled by 2^-k (exact), k
// the larger one's exponent; inf if either is inf (even with a NaN), else NaN with a NaN.
float hypot_f32(float x, float y) {
    float a = abs(x), b = abs(y);
    if (isinf(a) || isinf(b)) return uintBitsToFloat(0x7f800000u);
    if (isnan(a) || isnan(b)) return a + b;
    float m = max(a, b);
    if (m == 0.0) return 0.0;
    int k;
    frexp(m, k);
    k = clamp(k, -126, 126);
    float sa = ldexp(a, -k), sb = ldexp(b, -k);
    return ldexp(sqrt(sa * sa + sb * sb), k);
}

// softplus as torch: x where beta x > threshold, else log(1 + e^(beta x)) / beta, bit-exact
// (vkq/ops/float_math.py softplus_f32): the division a product by ibeta, 1 / beta rounded on the
// host; x, beta x, e^(beta x) and the result flushed where subnormal.
float softplus_f32(float x, float beta, float threshold, float ibeta) {
    const float xf = ftz(x);
    precise float bx = xf * beta;
    const float bxf = ftz(bx);
    const float e = ftz(exp_f32(bxf));
    precise float l = log1p_f32(e) * ibeta;
    const float lf = ftz(l);
    return bxf > threshold ? xf : lf;
}

// sin(x), cos(x): Cephes' sinf / cosf on reduce_octant's r, the sine or cosine polynomial on
// [-pi/4, pi/4]. Absolute error ~1e-7 (rotary embeddings: a position times a frequency <= 1;
// NeRF's encodings: 2^k pi x). NaN / inf give NaN.
float sincos_f32(float x, bool cosine) {
    float r;
    int j = reduce_octant(abs(x), r);
    float sgn = cosine ? 1.0 : sign(x);
    if (j > 3) { sgn = -sgn; j -= 4; }
    if (cosine && j > 1) sgn = -sgn;
    bool use_cos = (j == 2) != cosine;         // sin: the cosine polynomial in octants 2 (and 6)
    float z = r * r;
    float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
    float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
    float v = sgn * (use_cos ? c : s);
    return !(abs(x) <= 3.4028234663852886e38) ? uintBitsToFloat(0x7fc00000u) : v;    // NaN, +-inf
}

// log|Gamma(x)| for x >= 0.5 and below 8: stepped into [1.5, 2.5) by Gamma(x + 1) = x Gamma(x),
// where lgamma(2 + t) = t P(t) (P: a degree-8 least-squares fit of lgamma(2 + t) / t on
// [-1/2, 1/2], 2.6e-9 relative); below 1.5 lgamma(x) = lgamma(x + 1) - log1p(x - 1), with t = x - 1
// exact, so lgamma(1) = lgamma(2) = 0 exactly and stays accurate around them.
float lgamma_near_2(float t) {
    return t * ((((((((-2.66337621e-4 * t + 5.70185575e-4) * t - 1.1795943e-3) * t + 2.87889734e-3) * t
                - 7.38715437e-3) * t + 2.05816219e-2) * t - 6.73522324e-2) * t + 3.22467018e-1) * t + 4.22784335e-1);
}

float lgamma_mid(float x) {
    if (x < 1.5) {
        const float t = x - 1.0;
        return lgamma_near_2(t) - log1p_f32(t);
    }
    float z = 1.0;
    for (int i = 0; i < 6 && x >= 2.5; i++) {
        x -= 1.0;
        z *= x;
    }
    return lgamma_near_2(x - 2.0) + log_f32(z);
}

// lgamma(x) = log|Gamma(x)|, as torch.lgamma: x >= 8 Stirling's series to 1/(1260 x^5) (its
// remainder < 3e-10 there); 0.5 <= x < 8 lgamma_mid; 0 < x < 0.5 lgamma(x + 1) - log(x); x < 0 the
// reflection log(pi / |x sin(pi x)|) - lgamma(-x), sin(pi x) of the fraction of x (exact).
// inf at 0 and the negative integers, inf at +-inf. Measured on 20000 values a range, both drivers:
// 4 ulp for x > 0 (2 around 1 and 2); x < 0 3 ulp + 1e-6 absolute (the reflection's terms cancel
// near lgamma's zeros there, x = -2.457...).
float lgamma_pos(float x) {
    if (x >= 8.0) {
        const float l = log_f32(x), z = 1.0 / x, z2 = z * z;
        const float series = z * (0.083333333 - z2 * (2.7777778e-3 - z2 * 7.9365079e-4));
        return ((x - 0.5) * l - x) + (0.91893853 + series);     // (inf where lgamma passes FLT_MAX: x > 4e36)
    }
    return x >= 0.5 ? lgamma_mid(x) : lgamma_mid(x + 1.0) - log_f32(x);
}

float lgamma_f32(float x) {
    const float inf = uintBitsToFloat(0x7f800000u);
    if (isnan(x)) return x;
    if (isinf(x) || x == 0.0) return inf;
    if (x > 0.0) return lgamma_pos(x);
    const float q = -x, fl = floor(q);
    if (fl == q) return inf;                                   // the poles (every float from 2^23 is one)
    float z = q - fl;                                          // exact
    if (z > 0.5) z = 1.0 - z;                                  // exact: sin(pi z) = |sin(pi q)|
    // (log q + log sin, not the log of their product: that underflows for q = 1e-30)
    return 1.1447298858 - (log_f32(q) + log_f32(sincos_f32(3.14159265 * z, false))) - lgamma_pos(q);
}

// digamma(x) = d/dx log Gamma(x), as torch.digamma: below 10 stepped up by psi(x + 1) = psi(x) + 1/x,
// then log x - 1/(2x) - sum B_2k / (2k x^2k) to x^-10; x < 0 the reflection psi(1 - x) - pi / tan(pi x),
// tan of x's distance to the nearest integer (exact). psi(+0) = -inf, psi(-0) = inf, NaN at the
// negative integers and -inf, as torch. 5 ulp + 1e-6 absolute measured (the steps' roundings: near
// a zero of psi, x = 1.4616... and one between each two negative integers, that is what is left).
float digamma_f32(float x) {
    const float inf = uintBitsToFloat(0x7f800000u), nan = uintBitsToFloat(0x7fc00000u);
    if (isnan(x) || x == inf) return x;
    if (x == 0.0) return floatBitsToInt(x) < 0 ? inf : -inf;
    float r = 0.0;
    if (x < 0.0) {
        if (x == floor(x)) return nan;                         // -inf too
        r = -3.14159265 / tan_f32(3.14159265 * (x - roundEven(x)));
        x = 1.0 - x;
    }
    for (int i = 0; i < 10 && x < 10.0; i++) {
        r -= 1.0 / x;
        x += 1.0;
    }
    const float z = 1.0 / (x * x);
    const float series = z * (0.083333333 - z * (8.3333333e-3 - z * (3.9682540e-3 - z * (4.1666667e-3 - z * 7.5757576e-3))));
    return (r + log_f32(x)) - (0.5 / x + series);
}

// erfinv(x), |x| <= 1: Giles' single-precision approximation ("Approximating the erfinv function",
// GPU Computing Gems, 2011): a polynomial in w = -log((1 - x)(1 + x)) - 2.5 below w = 5, else in
// sqrt(w) - 3, times x. 3 ulp measured; +-inf at +-1, NaN past them.
float erfinv_f32(float x) {
    const float a = abs(x);
    if (!(a < 1.0)) return a == 1.0 ? x * uintBitsToFloat(0x7f800000u) : uintBitsToFloat(0x7fc00000u);
    float w = -log_f32((1.0 - x) * (1.0 + x)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    return p * x;
}

// Chebyshev series sum' c_i T_i(y / 2), y in [-2, 2], highest degree first, by Clenshaw's
// recurrence as Cephes' chbevl
float chbevl_7(float y, const float c[7]) {
    float b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int i = 1; i < 7; i++) { b2 = b1; b1 = b0; b0 = y * b1 - b2 + c[i]; }
    return 0.5 * (b0 - b2);
}

// Modified Bessel functions of the first kind, orders 0 and 1, and their scaled forms i0e(x) =
// e^-|x| I0(x), i1e. Up to |x| = 8 the power series I0 = sum q^k / k!^2, I1 / x = sum q^k /
// (2 k! (k + 1)!), q = x^2 / 4, 18 terms (the rest < 1e-10 of the sum), all positive, so Horner's
// rule keeps them to ~2 ulp (Cephes' float Chebyshev series on [0, 8], which torch uses, lost 14
// ulp near 8: Clenshaw's recurrence cancels at the interval's end). Past 8 Cephes' float32
// Chebyshev series of e^-x sqrt(x) I(x) in 32 / x - 2 (i0f.c, i1f.c). I0 and I1 take e^(x/2)
// twice, so they stay finite up to 91.9 where I(x) does (torch's exp(x) overflows from 88.7).
// +-inf: I0 inf, I1 +-inf, the scaled ones +-0. Measured on 20000 values to |x| = 91, both drivers:
// i0, i1 6 ulp, i0e, i1e 3 ulp.
const float I0_SERIES[18] = float[18](7.904291893e-30, 2.284340357e-27, 5.847911314e-25, 1.315780046e-22,
    2.578928890e-20, 4.358389823e-18, 6.276081346e-16, 7.594058428e-14, 7.594058428e-12, 6.151187327e-10,
    3.936759889e-08, 1.929012346e-06, 6.944444444e-05, 1.736111111e-03, 2.777777778e-02, 2.5e-01, 1.0, 1.0);
const float I1_SERIES[18] = float[18](2.195636637e-31, 6.718648109e-29, 1.827472286e-26, 4.385933486e-24,
    9.210460320e-22, 1.676303778e-19, 2.615033894e-17, 3.451844740e-15, 3.797029214e-13, 3.417326293e-11,
    2.460474931e-09, 1.377865961e-07, 5.787037037e-06, 1.736111111e-04, 3.472222222e-03, 4.166666667e-02,
    2.5e-01, 5.0e-01);
const float I0E_B[7] = float[7](3.39623202570838634515e-9, 2.26666899049817806459e-8,
    2.04891858946906374183e-7, 2.89137052083475648297e-6, 6.88975834691682398426e-5,
    3.36911647825569408990e-3, 8.04490411014108831608e-1);
const float I1E_B[7] = float[7](-3.83538038596423702205e-9, -2.63146884688951950684e-8,
    -2.51223623787020892529e-7, -3.88256480887769039346e-6, -1.10588938762623716291e-4,
    -9.76109749136146840777e-3, 7.78576235018280120474e-1);

float bessel_i_f32(float x, bool order1, bool scaled) {
    const float a = abs(x);
    float r;
    if (a <= 8.0) {
        const float q = 0.25 * (a * a);
        float s = 0.0;
        for (int k = 0; k < 18; k++) s = s * q + (order1 ? I1_SERIES[k] : I0_SERIES[k]);
        r = order1 ? s * a : s;
        if (scaled) r *= exp_f32(-a);
    } else {                                       // (and NaN)
        r = (order1 ? chbevl_7(32.0 / a - 2.0, I1E_B) : chbevl_7(32.0 / a - 2.0, I0E_B)) / sqrt(a);   // e^-a I(a)
        if (!scaled) {
            const float h = exp_f32(0.5 * a);
            r = a == uintBitsToFloat(0x7f800000u) ? a : (h * r) * h;
        }
    }
    return order1 && x < 0.0 ? -r : r;
}

// ndtri(p): the x with Phi(x) = p, Cephes' ndtri in float32 (torch's calc_ndtri): a rational
// function of (p - 1/2)^2 for exp(-2) < p < 1 - exp(-2), else of 1 / sqrt(-2 log y) with y the
// nearer tail (1 - p exact there). -inf at 0, inf at 1, NaN outside [0, 1]. Measured: 5 ulp (where
// the tail's form starts, p = 0.135 and 0.865).
float ndtri_f32(float p) {
    if (!(p > 0.0 && p < 1.0)) return p == 0.0 ? -uintBitsToFloat(0x7f800000u)
                                     : p == 1.0 ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(0x7fc00000u);
    const bool upper = p > 0.864664716763387308;      // 1 - exp(-2)
    const float y = upper ? 1.0 - p : p;
    if (y > 0.135335283236612692) {
        const float c = y - 0.5, c2 = c * c;
        const float num = (((-5.99633501014107895267e1 * c2 + 9.80010754185999661536e1) * c2
            - 5.66762857469070293439e1) * c2 + 1.39312609387279679503e1) * c2 - 1.23916583867381258016e0;
        const float den = (((((((c2 + 1.95448858338141759834e0) * c2 + 4.67627912898881538453e0) * c2
            + 8.63602421390890590575e1) * c2 - 2.25462687854119370527e2) * c2 + 2.00260212380060660359e2) * c2
            - 8.20372256168333339912e1) * c2 + 1.59056225126211695515e1) * c2 - 1.18331621121330003142e0;
        return (c + c * (c2 * num / den)) * 2.50662827463100050242;
    }
    const float t = sqrt(-2.0 * log_f32(y)), z = 1.0 / t;
    float num, den;
    if (t < 8.0) {
        num = (((((((4.05544892305962419923e0 * z + 3.15251094599893866154e1) * z + 5.71628192246421288162e1) * z
            + 4.40805073893200834700e1) * z + 1.46849561928858024014e1) * z + 2.18663306850790267539e0) * z
            - 1.40256079171354495875e-1) * z - 3.50424626827848203418e-2) * z - 8.57456785154685413611e-4;
        den = (((((((z + 1.57799883256466749731e1) * z + 4.53907635128879210584e1) * z + 4.13172038254672030440e1) * z
            + 1.50425385692907503408e1) * z + 2.50464946208309415979e0) * z - 1.42182922854787788574e-1) * z
            - 3.80806407691578277194e-2) * z - 9.33259480895457427372e-4;
    } else {
        num = (((((((3.23774891776946035970e0 * z + 6.91522889068984211695e0) * z + 3.93881025292474443415e0) * z
            + 1.33303460815807542389e0) * z + 2.01485389549179081538e-1) * z + 1.23716634817820021358e-2) * z
            + 3.01581553508235416007e-4) * z + 2.65806974686737550832e-6) * z + 6.23974539184983293730e-9;
        den = (((((((z + 6.02427039364742014255e0) * z + 3.67983563856160859403e0) * z + 1.37702099489081330271e0) * z
            + 2.16236993594496635890e-1) * z + 1.34204006088543189037e-2) * z + 3.28014464682127739104e-4) * z
            + 2.89247864745380683936e-6) * z + 6.79019408009981274425e-9;
    }
    const float x = (t - log_f32(t) / t) - z * num / den;
    return upper ? x : -x;
}

// erfcx(x) = e^(x^2) erfc(x): erfc_f32's t e^P(t) without its e^(-x^2) (the same 1.2e-7 relative
// form, and no overflow: erfcx(x) ~ 1 / (x sqrt(pi)) as x grows); below 0 2 e^(x^2) - erfcx(-x),
// x^2 split exactly as in erfc_f32 (inf past x = -9.4, where e^(x^2) leaves float32). Measured: 6 ulp.
float erfcx_f32(float x) {
    if (isnan(x)) return x;
    const float z = abs(x);
    precise float t = 1.0 / (1.0 + 0.5 * z);
    precise float p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806
        + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    precise float r = t * exp_f32(p);
    if (x >= 0.0) return r;
    float hi, lo;
    two_prod(z, z, hi, lo);
    precise float e = exp_f32(hi) * exp_f32(lo);
    return z > 9.5 ? uintBitsToFloat(0x7f800000u) : 2.0 * e - r;
}

// n! a^-n as a product of n factors i / a: nothing over- or underflows on the way where the result
// is a normal float (a up to 10 + n here, and a! / a^a >= e^-a)
float fact_pow(int n, float a) {
    float r = 1.0;
    for (int i = 1; i <= n; i++) r *= float(i) / a;
    return r;
}

// n! zeta(n + 1, q), q > 0: the first terms summed until q + k >= w = 10 + n, then Euler-Maclaurin
// at w: n! w^-n (1/n + 1/(2w) + sum_j B_2j / (2j)! (n+1)(n+2)...(n+2j-1) w^-2j), 6 terms (the
// next is below 1e-9 of the sum for every n).
float zeta_fact(int n, float q) {
    const float w0 = float(10 + n);
    float sum = 0.0, a = q;
    for (int i = 0; i < 64 && a < w0; i++) {
        sum += fact_pow(n, a) / a;
        a += 1.0;
    }
    const float s = float(n + 1), iw2 = 1.0 / (a * a);
    const float c[6] = float[6](8.3333333333e-2, -1.3888888889e-3, 3.3068783069e-5, -8.2671957672e-7,
                                2.0876756988e-8, -5.2841901387e-10);
    float h = s * iw2, bracket = 1.0 / float(n) + 0.5 / a + c[0] * h;
    for (int j = 2; j <= 6; j++) {
        h *= (s + float(2 * j - 3)) * (s + float(2 * j - 2)) * iw2;
        bracket += c[j - 1] * h;
    }
    return sum + fact_pow(n, a) * bracket;
}

// polygamma(n, x) = (-1)^(n+1) n! zeta(n + 1, x), n >= 1 (the lowering takes n <= 34: 35! passes
// FLT_MAX). x < 0 by the reflection psi^(n)(x) = -pi^(n+1) P_n(cot pi x) - n! zeta(n + 1, 1 - x), where
// d^n/dx^n cot(pi x) = pi^n P_n(cot pi x), P_0 = c, P_(k+1) = -(1 + c^2) P_k' (each P_n's coefficients
// share one sign, so Horner's rule in c does not cancel); the shader keeps Q_k = P_k / k!, whose
// coefficients stay below 2^k, and multiplies n! pi^(n+1) back in factor by factor (no intermediate
// overflow where the result is finite). Summing the terms left of 0 instead cancels: at n = 34,
// x = -0.5, two terms of 1e49 for a result of 2e32. Poles (x <= 0 integral): inf, -inf for even n
// (torch's signs); +inf: +-0; -inf: NaN. Measured on 10000 values an n, n = 1..34, both drivers:
// (4 + n) ulp for x > 0 (fact_pow's n factors: 3 at n = 1, 24 at n = 34); below 0 (6 + n) ulp of the
// larger of the two terms (they cancel near psi^(n)'s zeros).
float polygamma_f32(float x, int n) {
    const float sgn = (n & 1) == 1 ? 1.0 : -1.0;
    if (isnan(x)) return x;
    if (x == uintBitsToFloat(0x7f800000u)) return uintBitsToFloat((n & 1) == 1 ? 0u : 0x80000000u);   // (-0 by its bits: a product by -1 may lose the sign)
    if (x == -uintBitsToFloat(0x7f800000u)) return uintBitsToFloat(0x7fc00000u);
    if (x <= 0.0 && x == floor(x)) return sgn * uintBitsToFloat(0x7f800000u);
    if (x > 0.0) return sgn * zeta_fact(n, x);
    float q[37];                                   // Q_k's coefficients by power of c
    for (int j = 0; j < 37; j++) q[j] = j == 1 ? 1.0 : 0.0;
    for (int k = 0; k < n; k++) {                  // Q_(k+1) = -(1 + c^2) Q_k' / (k + 1), degree k + 2
        float prev = 0.0;
        for (int j = 0; j <= k + 2; j++) {
            const float cur = q[j];
            q[j] = -(float(j + 1) * q[j + 1] + float(j - 1) * prev) / float(k + 1);
            prev = cur;
        }
    }
    const float c = 1.0 / tan_f32(3.14159265 * (x - roundEven(x)));
    float poly = 0.0;
    for (int j = n + 1; j >= 0; j--) poly = poly * c + q[j];
    float a = poly * 3.14159265;                   // n! pi^(n+1) Q_n(c)
    for (int i = 1; i <= n; i++) a *= float(i) * 3.14159265;
    return -(a + zeta_fact(n, 1.0 - x));
}

// sigmoid, bit-exact (vkq/ops/float_math.py sigmoid_f32 is its twin): recip_newton(1 + exp_f32(-x))
// (s past 2^64 as 2^-64 recip_newton(s 2^-64), as silu_f32), flushed; 0 below -87.33654, where
// 1 / (1 + e^-x) is subnormal; NaN stays NaN.
float sigmoid_f32(float x) {
    precise float s = 1.0 + exp_f32(-x);
    const float k = s > 1.8446744e19 ? 5.421010862427522e-20 : 1.0;
    precise float y = recip_newton(s * k) * k;
    return x < -87.33654 ? 0.0 : ftz(y);
}

// SiLU, bit-exact (float_exact.glsl's rules; vkq/ops/float_math.py silu_f32 is its twin):
//   x < -87 or |x| < 2^-124 (zeros, subnormals): a zero of x's sign (-87: e^87 + 1 is the
//       largest 1 + e whose reciprocal stays normal; 2^-124: x / 2 stays normal), so
//       silu(-inf) = -0 (torch: NaN), silu(-100) = -0 (torch: -3.7e-42);
//   else x * recip_newton(1 + exp_f32(-x)) (s = 1 + e past 2^64 as 2^-64 recip_newton(s 2^-64)):
//   within 3 ulp of x / (1 + e^-x) (vkq/ops/float.py), silu(inf) = inf, NaN stays NaN.
float silu_f32(float x) {
    const int b = floatBitsToInt(x);
    precise float s = 1.0 + exp_f32(-x);
    const float k = s > 1.8446744e19 ? 5.421010862427522e-20 : 1.0;   // past 2^64: 1/s = 2^-64 / (s 2^-64),
    precise float y = x * (recip_newton(s * k) * k);                   // exact scalings: no step subnormal
    return x < -87.0 || (b & 0x7fffffff) < 0x01800000 ? intBitsToFloat(b & int(0x80000000u)) : y;
}

// GELU, erf form: 0.5 x (1 + erf(x / sqrt 2)); abs error <= 0.5 |x| 4e-7 + rounding. Not bit-exact:
// the bit-exact sequence (ftz'd input and products, precise, as gelu's erf_f32 twin would need)
// took SwiftShader's compiler 58 s to over 300 s for float_unary OP_GELU (erf alone: 0.4 s).
float gelu_erf(float x) { return 0.5 * x * (1.0 + erf_f32(x * 0.70710678118654752)); }

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
float gelu_tanh(float x) { return 0.5 * x * (1.0 + tanh_f32(0.79788456080286536 * (x + 0.044715 * x * x * x))); }
#endif
