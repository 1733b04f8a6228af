#ifndef VKQ_COMMON_GLSL
#define VKQ_COMMON_GLSL
// Shared by every vkq shader. Specialization constants 0-2 are the workgroup size
// (vkq.device.Device.dispatch passes them); a shader's own constants start at id 3.
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;

// Linear invocation index of a 1-D grid folded into y past the x limit (vkq.device.grid_1d).
int linear_invocation() {
    return int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x);
}
#endif
