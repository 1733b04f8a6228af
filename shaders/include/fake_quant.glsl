#ifndef VKQ_FAKE_QUANT_GLSL
#define VKQ_FAKE_QUANT_GLSL
// PT2E's quantize -> dequantize pair on a float, where nothing reads the int8 value: each step
// as quantize.comp and dequantize.comp compute it, so the result is theirs bit for bit
// (vkq/quant.py fake_quantize, fake_quant_push for the push-constant words):
//   q = clamp(roundEven(x * inv_scale) + zero_point, qmin, qmax)   (a NaN x: 0)
//   y = float(q - zero_point) * scale
// quantize_vec4 is the first step alone, 4 values at a time.
// Used by fake_quantize.comp, and as an epilogue by the float kernels a fake_quantize folds into
// (vkq/ops/float.py fold_fake_quantize: float_binary, float_matmul).
struct FakeQuant {     // push constants, 32-bit words in this order
    float inv_scale, scale;     // float32(1 / scale), as PyTorch forms it; the scale
    int zero_point, qmin, qmax;
};

// The quantize step on 4 values (quantize.comp VEC, float_layer_norm.comp Q8's stores)
ivec4 quantize_vec4(vec4 v, float inv_scale, int zero_point, int qmin, int qmax) {
    precise vec4 t = roundEven(v * inv_scale) + float(zero_point);
    return mix(ivec4(clamp(t, float(qmin), float(qmax))), ivec4(0), isnan(t));
}

float fake_quantize(float v, FakeQuant f) {
    precise float t = roundEven(v * f.inv_scale) + float(f.zero_point);
    const int q = isnan(t) ? 0 : int(clamp(t, float(f.qmin), float(f.qmax)));
    precise float r = float(q - f.zero_point) * f.scale;
    return r;
}
#endif
