#ifndef VKQ_FLOAT_EXACT_GLSL
#define VKQ_FLOAT_EXACT_GLSL
// Bit-exact float32 (issue 59): the rules a kernel follows to give the same bits on every
// device and in its numpy reference (vkq/ops/float_math.py holds the twins of what is here and in
// float_math.glsl: ftz, recip_newton, rsqrt_newton, exp_f32, log_f32, erf_f32, tanh_f32,
// sigmoid_f32, silu_f32, gelu_*, div_f32, sum_canonical, matmul_f32).
//  1. Only + - * and comparisons/selects on floats (each one IEEE rounding in Vulkan), every one
//     whose rounding matters `precise` (SPIR-V NoContraction: no fused multiply-add chosen by the
//     compiler); the twin does the same float32 operations in the same order (numpy float32
//     + - * round once each; no np.sum, no BLAS, no float64).
//  2. No division, sqrt, inversesqrt, exp, log, pow...: Vulkan leaves their precision open
//     (division 2.5 ulp). 1/s: recip_newton; x / y correctly rounded: div_f32 (float_math.glsl);
//     1/sqrt(t): rsqrt_newton; exp: exp_f32.
//  3. Sums in a canonical order, a function of the row length alone, never of the lanes, the
//     subgroup size, the workgroup or the vec4/texel path: the row shaders' canonical sum
//     (float_workgroup.glsl ROW_CANON: 64 fixed partials, then a fixed tree; the norms and
//     softmaxes), float_matmul.comp's groups of 4 products added in k order.
//  4. Subnormals: some devices flush them, some keep them. Wherever one may arise (an input, a
//     product), ftz() makes it a zero of its sign explicitly, so both kinds agree.
//  5. Constants that depend on a shape (1/D) are float32 values computed on the host.

// v, or a zero of v's sign where v is subnormal (bitwise: the same on a device that flushes)
float ftz(float v) {
    const int b = floatBitsToInt(v);
    return mix(v, intBitsToFloat(b & int(0x80000000u)), (b & 0x7f800000) == 0);    // (mix: a select, no branch)
}
vec4 ftz(vec4 v) {
    const ivec4 b = floatBitsToInt(v);
    return mix(v, intBitsToFloat(b & int(0x80000000u)), equal(b & 0x7f800000, ivec4(0)));
}

// 1/s for s in [1, 2^100] (every step normal: past ~2^109 the correction y (1 - s y) is
// subnormal, which some devices flush): a bit-pattern guess, two Newton steps y (2 - s y), the
// last written as a correction added to y, y + y (1 - s y): 1.21 ulp at most (three plain steps,
// vkq/ops/linear.py reciprocal's: 1.97), 1/1 = 1 and 1/2 = 0.5 exactly. NaN gives NaN.
// (vkq/ops/float.py recip_newton is its twin)
float recip_newton(float s) {
    precise float y = uintBitsToFloat(0x7EF311C7u - floatBitsToUint(s));
    for (int i = 0; i < 2; ++i) {
        precise float yn = y * (2.0 - s * y);
        y = yn;
    }
    precise float r = y + y * (1.0 - s * y);
    return r;
}

// 1 / sqrt(t), t > 0 normal, ~1 ulp (vkq/ops/float.py rsqrt_newton): a bit-pattern seed, two
// Newton steps, the last correction added (1.2 ulp, not 2.1)
float rsqrt_newton(float t) {
    precise float y = intBitsToFloat(0x5f375a86 - (floatBitsToInt(t) >> 1));
    precise float h = 0.5 * t;
    for (int i = 0; i < 2; ++i) {
        precise float yn = y * (1.5 - h * y * y);
        y = yn;
    }
    precise float r = y + y * (0.5 - h * y * y);
    return r;
}
#endif
