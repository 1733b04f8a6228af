#ifndef VKQ_CONV_LANE_WORDS_GLSL
#define VKQ_CONV_LANE_WORDS_GLSL
// Words the G lanes of a group share (conv_common.glsl): a kernel's weight words (binding 1,
// WREGS a lane) and epilogue constants (binding 2, PREGS a lane), LANE_REGS(words per block)
// each (conv_common.glsl). Include after the kernel has defined WREGS and PREGS. In the buffer, block b holds G*NREGS words and its word k at
// b*G*NREGS + (k % G)*NREGS + k / G (vkq/ops/conv.py:lane_major): word k still comes from lane
// k % G, register k / G (SHARE), but a lane's own words are contiguous, so it loads them as
// ivec4s when NREGS % 4 == 0. Why: on CPU drivers a buffer load is a loop over the SIMD lanes
// with a bounds check each, and one ivec4 costs about what two single words cost.
#include "texel.glsl"
IVEC4_WORDS_INPUT(1, w4)        // texel.glsl
IVEC4_WORDS_INPUT(2, chan4)
#define W_WORD(i) WORD(w4, i)
#define CHAN_WORD(i) WORD(chan4, i)

// r[i] = word i*G + lane of weight block `block`
void load_weights(out int r[WREGS], int block) {
    const int base = block * G * WREGS + group_lane() * WREGS;
    if (WREGS % 4 == 0) {
        [[unroll]] for (int i = 0; i < WREGS; i += 4) {
            const ivec4 v = LOAD4(w4, base / 4 + i / 4);
            [[unroll]] for (int e = 0; e < 4; ++e) r[i + e] = v[e];
        }
    } else {
        [[unroll]] for (int i = 0; i < WREGS; ++i) r[i] = W_WORD(base + i);
    }
}

// r[i] = word i*G + lane of epilogue-constant block `block` (conv_epilogue.glsl's table)
void load_chan(out int r[PREGS], int block) {
    const int base = block * G * PREGS + group_lane() * PREGS;
    if (PREGS % 4 == 0) {
        [[unroll]] for (int i = 0; i < PREGS; i += 4) {
            const ivec4 v = LOAD4(chan4, base / 4 + i / 4);
            [[unroll]] for (int e = 0; e < 4; ++e) r[i + e] = v[e];
        }
    } else {
        [[unroll]] for (int i = 0; i < PREGS; ++i) r[i] = CHAN_WORD(base + i);
    }
}
#endif
