#ifndef VKQ_FLOAT_MATH_GLSL
#define VKQ_FLOAT_MATH_GLSL
// Float32 functions with a stated accuracy that does not depend on the driver's exp/erf
// (Vulkan allows exp an error of 3 + 2|x| ulp). vkq/ops/float.py tests them against numpy.

// exp(x): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' expf polynomial for
// e^r, scaled by 2^n with ldexp (exact). Relative error <= 2 ulp for x in [-87.3, 88.7];
// inputs are clamped to that range (exp(-87.3) = 1.2e-38, the smallest normal's order).
float exp_f32(float x) {
    x = clamp(x, -87.33654, 88.72283);
    float n = roundEven(x * 1.44269504089);
    float r = x - n * 0.693359375;     // ln2 high part: 9 significant bits, n * it is exact
    r = r + n * 2.12194440e-4;         // ln2 = 0.693359375 - 2.12194440e-4
    float p = 1.9875691500e-4;
    p = p * r + 1.3981999507e-3;
    p = p * r + 8.3334519073e-3;
    p = p * r + 4.1665795894e-2;
    p = p * r + 1.6666665459e-1;
    p = p * r + 5.0000001201e-1;
    p = p * (r * r) + r + 1.0;
    return ldexp(p, int(n));
}

// erf(x): the rational approximation x P(x^2) / Q(x^2) of Eigen and XLA (float32), with x
// clamped to [-4, 4] (|erf(4)| = 1 - 1.5e-8, 1 in float32). Max abs error 4.0e-7 measured
// in float32 against math.erf on [-6, 6] (vkq/ops/float.py: erf_f32 is its numpy twin);
// unlike Abramowitz-Stegun 7.1.26 (max abs error 1.5e-7 in exact arithmetic, but 1 - t P(t)
// e^{-x^2} loses relative accuracy near 0) it is accurate relative to erf near 0 too.
float erf_f32(float x) {
    x = clamp(x, -4.0, 4.0);
    float x2 = x * x;
    float p = -2.72614225801306e-10;
    p = p * x2 + 2.77068142495902e-08;
    p = p * x2 - 2.10102402082508e-06;
    p = p * x2 - 5.69250639462346e-05;
    p = p * x2 - 7.34990630326855e-04;
    p = p * x2 - 2.95459980854025e-03;
    p = p * x2 - 1.60960333262415e-02;
    float q = -1.45660718464996e-05;
    q = q * x2 - 2.13374055278905e-04;
    q = q * x2 - 1.68282697438203e-03;
    q = q * x2 - 7.37332916720468e-03;
    q = q * x2 - 1.42647390514189e-02;
    return x * p / q;
}

// tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)); below |x| = 1/16 the series x - x^3/3 + 2x^5/15
// (no cancellation). Abs error <= 2e-7.
float tanh_f32(float x) {
    float a = abs(x);
    if (a < 0.0625) {
        float x2 = x * x;
        return x + x * x2 * (-0.333333333 + x2 * 0.133333333);
    }
    float e = exp_f32(2.0 * a);
    return sign(x) * (1.0 - 2.0 / (e + 1.0));
}

float sigmoid_f32(float x) { return 1.0 / (1.0 + exp_f32(-x)); }

// GELU, exact (erf) form: 0.5 x (1 + erf(x / sqrt 2)); abs error <= 0.5 |x| 4e-7 + rounding
float gelu_erf(float x) { return 0.5 * x * (1.0 + erf_f32(x * 0.70710678118654752)); }

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
float gelu_tanh(float x) { return 0.5 * x * (1.0 + tanh_f32(0.79788456080286536 * (x + 0.044715 * x * x * x))); }
#endif
