#ifndef VKQ_COMMON_GLSL
#define VKQ_COMMON_GLSL
// Shared by every vkq shader. Specialization constants 0-2 are the workgroup size
// (vkq.device.Device.dispatch passes them); a shader's own constants start at id 3.
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

// Linear invocation index of a 1-D grid folded into y past the x limit (vkq.device.grid_1d).
int linear_invocation() {
    return int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x);
}

// v itself, computed on whole vectors before a store. On llvmpipe a storage-buffer store is a
// loop over the SIMD lanes, and LLVM moves the arithmetic that only feeds the stored value
// (packing bytes, the last requantize steps, a float conversion) into that loop, one lane at a
// time: several scalar instructions per value where a vector instruction did 16. A max with
// INT_MIN made of a value the compiler cannot know (the dispatch size: count >> 31 is 0) is an
// x86 intrinsic it does not split into lanes, so the value is complete before the loop
// (read in the JIT code with perf; add_q8 on 4 MiB 0.78-0.86x the time). One max a word on GPUs.
// Used where it measured faster (eltwise, max pool, repack); the conv, linear, quantize and
// dequantize stores took the same time with it (A-B-A-B), so they go without.
ivec4 before_store(ivec4 v) { return max(v, ivec4(int(0x80000000u) | (int(gl_NumWorkGroups.x) >> 31))); }

// n / d for 0 <= n < 2^30, 0 < d (int32), exactly, without an integer division: a CPU driver
// runs a division by a value it cannot know (a push constant) lane by lane, 16 scalar divisions
// for one vector instruction. A float quotient is within 2^-21 n/d + 1 of the true one (n, d
// and the division each rounded, the division within Vulkan's 2.5 ulp), so the remainder it
// leaves, n - q d, is within d + 512 of [0, d); a float quotient of that remainder, within one
// of the rest, and a last step of one make q exact (shaders/selftest_div.comp tests it).
int div_exact(int n, int d) {
    const float fd = float(d);
    int q = int(float(n) / fd);
    q += int(floor(float(n - q * d) / fd));
    const int r = n - q * d;
    return q + (r >= d ? 1 : 0) - (r < 0 ? 1 : 0);
}

// f % d, leaving f / d in f (div_exact's bounds): an index peeled dim by dim, innermost first
int peel(inout int f, int d) {
    const int q = div_exact(f, d), r = f - q * d;
    f = q;
    return r;
}
#endif
