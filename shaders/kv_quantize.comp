#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// kv_quantize (vkq/ops/kv_q8.py): rows of D float32 values (a token's key or value of one KV
// head) -> the int8 KV cache's rows of W + 1 int32 words (include/kv_q8.glsl says how), to a
// tensor of their own. An invocation a row.
#include "common.glsl"

layout(constant_id = 3) const int D = 64;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { int o[]; };
layout(push_constant) uniform Params { int rows; } p;

float kv_q8_in(int i) { return x[i]; }
void kv_q8_out(int i, int word) { o[i] = word; }
#include "kv_q8.glsl"

void main() {
    const int r = linear_invocation();
    if (r >= p.rows) return;
    kv_q8_row(r * D, r * (KV_Q8_W + 1));
}
