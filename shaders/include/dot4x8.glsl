#ifndef VKQ_DOT4X8_GLSL
#define VKQ_DOT4X8_GLSL
// Integer dot product of packed int8x4 words (SPV_KHR_integer_dot_product, core in Vulkan 1.3;
// the device must enable the shaderIntegerDotProduct feature):
//   sdot4x8_acc_sat(a, b, acc, 0) = saturate_int32(acc + sum_i int8_at(a, i) * int8_at(b, i))
// Debian 12's glslang 12 lacks GL_EXT_integer_dot_product (dotPacked4x8AccSatEXT), so the
// instruction is declared through GL_EXT_spirv_intrinsics: OpSDotAccSat (4453) with
// PackedVectorFormat4x8Bit (0); capabilities DotProduct (6019), DotProductInput4x8BitPacked (6018).
// Saturation never triggers: an int8 x int8 product is at most 2^14 in magnitude, and the host
// takes these variants only where every partial sum, bias included, stays inside int32
// (vkq/ops/linear.py:use_dot_product, vkq/ops/conv.py:_check_acc_range). The result then equals
// the int32 sum of the kernels without the dot product, bit for bit.
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4453)
int sdot4x8_acc_sat(int a, int b, int acc, spirv_literal int packed_format);

// (OpSDot (4450) followed by an add, which never saturates, measured no faster on lavapipe
// (0.65 vs 0.79 of the int32 roofline on a 128x384x384 GEMM) nor on SwiftShader.)
int dot4x8_acc(int a, int b, int acc) { return sdot4x8_acc_sat(a, b, acc, 0); }
#endif
