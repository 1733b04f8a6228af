#ifndef VKQ_DOT4X8_GLSL
#define VKQ_DOT4X8_GLSL
// Integer dot product of packed int8x4 words (SPV_KHR_integer_dot_product; the device must enable
// shaderIntegerDotProduct). Debian's glslang 12 lacks GL_EXT_integer_dot_product, so the
// instruction is declared through GL_EXT_spirv_intrinsics: the including shader puts
//   #extension GL_EXT_spirv_intrinsics : require
// among its #extension lines.
//   dot4_acc(a, b, acc) = acc + sum_i int8(a, i) * int8(b, i)      (OpSDotAccSat, 4x8 packed)
// The instruction saturates the final sum to int32. vkq's kernels never reach that: their
// accumulators hold partial sums of at most taps * 128 * 128 in magnitude, which the host keeps
// below 2^31 with the bias included (vkq/ops/conv.py:_check_acc_range), so every partial sum
// is exact and the saturation never changes a result.

// OpSDotAccSat (4453), capabilities DotProduct (6019) and DotProductInput4x8BitPacked (6018);
// packed_format 0 = PackedVectorFormat4x8Bit
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4453)
int sdot4x8_acc_sat(int a, int b, int acc, spirv_literal int packed_format);

int dot4_acc(int a, int b, int acc) { return sdot4x8_acc_sat(a, b, acc, 0); }
#endif
