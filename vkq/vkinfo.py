"""Query Vulkan physical devices through the loader with ctypes.

Kompute's Python API reports only a few properties; shader variants depend on more
(subgroup size, shared memory, storage-buffer range, optional features), so we ask
the loader directly. Enumeration order equals the order `kp.Manager(i)` uses: both
call vkEnumeratePhysicalDevices on an instance of the same loader and environment.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass, field, asdict

_T = {"u32": ctypes.c_uint32, "i32": ctypes.c_int32, "u64": ctypes.c_uint64,
      "f32": ctypes.c_float, "usize": ctypes.c_size_t}

# VkPhysicalDeviceLimits, field by field as in vulkan_core.h (type:name[count]).
_LIMITS = """
u32:maxImageDimension1D u32:maxImageDimension2D u32:maxImageDimension3D u32:maxImageDimensionCube
u32:maxImageArrayLayers u32:maxTexelBufferElements u32:maxUniformBufferRange
u32:maxStorageBufferRange u32:maxPushConstantsSize u32:maxMemoryAllocationCount
u32:maxSamplerAllocationCount u64:bufferImageGranularity u64:sparseAddressSpaceSize
u32:maxBoundDescriptorSets u32:maxPerStageDescriptorSamplers
u32:maxPerStageDescriptorUniformBuffers u32:maxPerStageDescriptorStorageBuffers
u32:maxPerStageDescriptorSampledImages u32:maxPerStageDescriptorStorageImages
u32:maxPerStageDescriptorInputAttachments u32:maxPerStageResources u32:maxDescriptorSetSamplers
u32:maxDescriptorSetUniformBuffers u32:maxDescriptorSetUniformBuffersDynamic
u32:maxDescriptorSetStorageBuffers u32:maxDescriptorSetStorageBuffersDynamic
u32:maxDescriptorSetSampledImages u32:maxDescriptorSetStorageImages
u32:maxDescriptorSetInputAttachments u32:maxVertexInputAttributes u32:maxVertexInputBindings
u32:maxVertexInputAttributeOffset u32:maxVertexInputBindingStride u32:maxVertexOutputComponents
u32:maxTessellationGenerationLevel u32:maxTessellationPatchSize
u32:maxTessellationControlPerVertexInputComponents
u32:maxTessellationControlPerVertexOutputComponents
u32:maxTessellationControlPerPatchOutputComponents u32:maxTessellationControlTotalOutputComponents
u32:maxTessellationEvaluationInputComponents u32:maxTessellationEvaluationOutputComponents
u32:maxGeometryShaderInvocations u32:maxGeometryInputComponents u32:maxGeometryOutputComponents
u32:maxGeometryOutputVertices u32:maxGeometryTotalOutputComponents u32:maxFragmentInputComponents
u32:maxFragmentOutputAttachments u32:maxFragmentDualSrcAttachments
u32:maxFragmentCombinedOutputResources u32:maxComputeSharedMemorySize
u32:maxComputeWorkGroupCount[3] u32:maxComputeWorkGroupInvocations u32:maxComputeWorkGroupSize[3]
u32:subPixelPrecisionBits u32:subTexelPrecisionBits u32:mipmapPrecisionBits
u32:maxDrawIndexedIndexValue u32:maxDrawIndirectCount f32:maxSamplerLodBias
f32:maxSamplerAnisotropy u32:maxViewports u32:maxViewportDimensions[2] f32:viewportBoundsRange[2]
u32:viewportSubPixelBits usize:minMemoryMapAlignment u64:minTexelBufferOffsetAlignment
u64:minUniformBufferOffsetAlignment u64:minStorageBufferOffsetAlignment i32:minTexelOffset
u32:maxTexelOffset i32:minTexelGatherOffset u32:maxTexelGatherOffset f32:minInterpolationOffset
f32:maxInterpolationOffset u32:subPixelInterpolationOffsetBits u32:maxFramebufferWidth
u32:maxFramebufferHeight u32:maxFramebufferLayers u32:framebufferColorSampleCounts
u32:framebufferDepthSampleCounts u32:framebufferStencilSampleCounts
u32:framebufferNoAttachmentsSampleCounts u32:maxColorAttachments u32:sampledImageColorSampleCounts
u32:sampledImageIntegerSampleCounts u32:sampledImageDepthSampleCounts
u32:sampledImageStencilSampleCounts u32:storageImageSampleCounts u32:maxSampleMaskWords
u32:timestampComputeAndGraphics f32:timestampPeriod u32:maxClipDistances u32:maxCullDistances
u32:maxCombinedClipAndCullDistances u32:discreteQueuePriorities f32:pointSizeRange[2]
f32:lineWidthRange[2] f32:pointSizeGranularity f32:lineWidthGranularity u32:strictLines
u32:standardSampleLocations u64:optimalBufferCopyOffsetAlignment
u64:optimalBufferCopyRowPitchAlignment u64:nonCoherentAtomSize
"""


def _fields(spec: str):
    out = []
    for item in spec.split():
        typ, name = item.split(":")
        ctype = _T[typ]
        if "[" in name:
            name, n = name.rstrip("]").split("[")
            ctype = ctype * int(n)
        out.append((name, ctype))
    return out


def _bools(names: str, header: bool = True):
    fields = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p)] if header else []
    return fields + [(n, ctypes.c_uint32) for n in names.split()]


class _Limits(ctypes.Structure):
    _fields_ = _fields(_LIMITS)


class _Properties(ctypes.Structure):
    _fields_ = [("apiVersion", ctypes.c_uint32), ("driverVersion", ctypes.c_uint32),
                ("vendorID", ctypes.c_uint32), ("deviceID", ctypes.c_uint32),
                ("deviceType", ctypes.c_int32), ("deviceName", ctypes.c_char * 256),
                ("pipelineCacheUUID", ctypes.c_uint8 * 16), ("limits", _Limits),
                ("sparseProperties", ctypes.c_uint32 * 5)]


class _Properties2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("properties", _Properties)]


class _SubgroupProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("subgroupSize", ctypes.c_uint32),
                ("supportedStages", ctypes.c_uint32), ("supportedOperations", ctypes.c_uint32),
                ("quadOperationsInAllStages", ctypes.c_uint32)]


class _DriverProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("driverID", ctypes.c_int32),
                ("driverName", ctypes.c_char * 256), ("driverInfo", ctypes.c_char * 256),
                ("conformanceVersion", ctypes.c_uint8 * 4)]


_FEATURES_10 = ("robustBufferAccess fullDrawIndexUint32 imageCubeArray independentBlend geometryShader "
    "tessellationShader sampleRateShading dualSrcBlend logicOp multiDrawIndirect drawIndirectFirstInstance "
    "depthClamp depthBiasClamp fillModeNonSolid depthBounds wideLines largePoints alphaToOne multiViewport "
    "samplerAnisotropy textureCompressionETC2 textureCompressionASTC_LDR textureCompressionBC "
    "occlusionQueryPrecise pipelineStatisticsQuery vertexPipelineStoresAndAtomics fragmentStoresAndAtomics "
    "shaderTessellationAndGeometryPointSize shaderImageGatherExtended shaderStorageImageExtendedFormats "
    "shaderStorageImageMultisample shaderStorageImageReadWithoutFormat shaderStorageImageWriteWithoutFormat "
    "shaderUniformBufferArrayDynamicIndexing shaderSampledImageArrayDynamicIndexing "
    "shaderStorageBufferArrayDynamicIndexing shaderStorageImageArrayDynamicIndexing shaderClipDistance "
    "shaderCullDistance shaderFloat64 shaderInt64 shaderInt16 shaderResourceResidency shaderResourceMinLod "
    "sparseBinding sparseResidencyBuffer sparseResidencyImage2D sparseResidencyImage3D sparseResidency2Samples "
    "sparseResidency4Samples sparseResidency8Samples sparseResidency16Samples sparseResidencyAliased "
    "variableMultisampleRate inheritedQueries")
_FEATURES_12 = ("samplerMirrorClampToEdge drawIndirectCount storageBuffer8BitAccess "
    "uniformAndStorageBuffer8BitAccess storagePushConstant8 shaderBufferInt64Atomics shaderSharedInt64Atomics "
    "shaderFloat16 shaderInt8") + " pad" * 39  # the rest of VkPhysicalDeviceVulkan12Features
_FEATURES_13 = ("robustImageAccess inlineUniformBlock descriptorBindingInlineUniformBlockUpdateAfterBind "
    "pipelineCreationCacheControl privateData shaderDemoteToHelperInvocation shaderTerminateInvocation "
    "subgroupSizeControl computeFullSubgroups synchronization2 textureCompressionASTC_HDR "
    "shaderZeroInitializeWorkgroupMemory dynamicRendering shaderIntegerDotProduct maintenance4")


class _Features10(ctypes.Structure):
    _fields_ = _bools(_FEATURES_10, header=False)


class _Features2(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("features", _Features10)]


class _Features12(ctypes.Structure):
    _fields_ = [(f"{n}{i}" if n == "pad" else n, t) for i, (n, t) in enumerate(_bools(_FEATURES_12))]


class _Features13(ctypes.Structure):
    _fields_ = _bools(_FEATURES_13)


class _SubgroupSizeControlProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("minSubgroupSize", ctypes.c_uint32),
                ("maxSubgroupSize", ctypes.c_uint32), ("maxComputeWorkgroupSubgroups", ctypes.c_uint32),
                ("requiredSubgroupSizeStages", ctypes.c_uint32)]


# VkPhysicalDeviceShaderIntegerDotProductProperties: 30 VkBool32 "...Accelerated" flags; vkq
# reads the two for signed 4x8-bit packed operands (plain and accumulating-saturating).
_DOT_PACKED_SIGNED, _DOT_ACC_SAT_PACKED_SIGNED = 4, 19


class _DotProductProperties(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("accelerated", ctypes.c_uint32 * 30)]


class _ExtensionProperties(ctypes.Structure):
    _fields_ = [("extensionName", ctypes.c_char * 256), ("specVersion", ctypes.c_uint32)]


class _SubgroupSizeControlFeatures(ctypes.Structure):
    _fields_ = _bools("subgroupSizeControl computeFullSubgroups")


class _DotProductFeatures(ctypes.Structure):
    _fields_ = _bools("shaderIntegerDotProduct")


class _AppInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("pApplicationName", ctypes.c_char_p),
                ("applicationVersion", ctypes.c_uint32), ("pEngineName", ctypes.c_char_p),
                ("engineVersion", ctypes.c_uint32), ("apiVersion", ctypes.c_uint32)]


class _InstanceInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int32), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.POINTER(_AppInfo)), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


# VkStructureType values
_ST_APP, _ST_INSTANCE = 0, 1
_ST_FEATURES_2, _ST_PROPERTIES_2 = 1000059000, 1000059001
_ST_SUBGROUP, _ST_DRIVER = 1000094000, 1000196000
_ST_FEATURES_12, _ST_FEATURES_13 = 51, 53
_ST_SUBGROUP_SIZE_CONTROL, _ST_DOT_PRODUCT = 1000225000, 1000280001
_ST_SUBGROUP_SIZE_CONTROL_FEATURES, _ST_DOT_PRODUCT_FEATURES = 1000225002, 1000280000

# The device extensions that carry the optional features vkq's shaders may use (kp opens its
# instance at Vulkan 1.1, so these are enabled as extensions even where 1.3 made them core;
# None: a Vulkan 1.0 core feature, enabled through VkPhysicalDeviceFeatures).
FEATURE_EXTENSIONS = {"shaderInt64": None,
                      "shaderIntegerDotProduct": "VK_KHR_shader_integer_dot_product",
                      "subgroupSizeControl": "VK_EXT_subgroup_size_control",
                      "computeFullSubgroups": "VK_EXT_subgroup_size_control"}

DEVICE_TYPES = {0: "other", 1: "integrated-gpu", 2: "discrete-gpu", 3: "virtual-gpu", 4: "cpu"}
SUBGROUP_OPERATIONS = {1: "basic", 2: "vote", 4: "arithmetic", 8: "ballot", 16: "shuffle",
                       32: "shuffle_relative", 64: "clustered", 128: "quad"}
_STAGE_COMPUTE = 0x20


def _version(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


@dataclass
class DeviceInfo:
    """What vkq needs to know about one Vulkan physical device."""
    index: int
    name: str
    driver: str
    driver_info: str
    type: str
    api_version: str
    vendor_id: int
    max_workgroup_invocations: int
    max_workgroup_size: tuple
    max_workgroup_count: tuple
    max_shared_memory_bytes: int
    max_storage_buffer_range: int
    max_push_constants_bytes: int
    subgroup_size: int
    subgroup_operations: tuple   # in compute shaders: "basic", "shuffle", "arithmetic", ...
    timestamp_period_ns: float
    timestamps: bool
    features: dict = field(default_factory=dict)
    extensions: tuple = ()
    min_subgroup_size: int = 0       # subgroup size control (0: the device cannot control it)
    max_subgroup_size: int = 0
    max_compute_workgroup_subgroups: int = 0
    subgroup_size_control_compute: bool = False
    dot_product_accelerated: bool = False   # signed 4x8-bit packed, accumulating-saturating
    max_texel_buffer_elements: int = 65536  # the Vulkan minimum (uniform texel buffers: texel.glsl)

    @property
    def fixed_subgroups(self) -> bool:
        """Can a compute pipeline rely on full subgroups of exactly `subgroup_size` lanes?
        Yes where the pipeline can require them (subgroup size control + full subgroups), or
        where the device has only one size; no where its compiler may pick a size per shader
        (Intel, AMD wave32/64, Adreno without the extension)."""
        control = (self.features.get("subgroupSizeControl") and self.features.get("computeFullSubgroups")
                   and self.subgroup_size_control_compute
                   and self.min_subgroup_size <= self.subgroup_size <= self.max_subgroup_size)
        return bool(control) or (0 < self.min_subgroup_size == self.max_subgroup_size == self.subgroup_size)

    @property
    def shuffle_lanes(self) -> int:
        """The lanes a kernel may assume share data through subgroupShuffle (full subgroups of
        this size, shuffle supported in compute), or 0: use a variant without subgroups."""
        sg = self.subgroup_size
        if sg < 2 or sg & (sg - 1) or "shuffle" not in self.subgroup_operations or not self.fixed_subgroups:
            return 0
        return sg

    @property
    def loop_budget(self) -> int | None:
        """Loop iterations one invocation may run, all its loops together, or None (no limit):
        llvmpipe (Mesa's gallivm) stops an invocation's loops after 65535 iterations, with no
        error (its guard against endless loops), so a longer loop silently leaves work undone.
        Kernels whose loops scale with a tensor's size check this (float.py _row_dispatch)."""
        return 65535 if "llvmpipe" in self.name.lower() else None

    def check_loop_budget(self, iterations: int, what: str) -> None:
        """Raise DeviceLimit (the node then runs on the CPU) where one invocation's loops would
        run `iterations` times in all, past the loop budget."""
        if self.loop_budget is not None and iterations > self.loop_budget:
            raise DeviceLimit(f"{what}: {iterations} loop iterations an invocation, past {self.name}'s loop "
                              f"budget of {self.loop_budget} (its loop limiter would leave work undone silently)")

    @property
    def is_software(self) -> bool:
        return self.type == "cpu" or any(s in (self.name + self.driver).lower()
                                         for s in ("llvmpipe", "swiftshader", "lavapipe"))

    def as_dict(self) -> dict:
        d = asdict(self)
        d["is_software"] = self.is_software
        return d


class DeviceLimit(ValueError):
    """An op's build() found that this device cannot run the node (a limit of the device, such
    as llvmpipe's loop budget, not of the op): the executor runs the node on the CPU instead."""


class VulkanUnavailable(RuntimeError):
    """The Vulkan loader or an instance could not be created."""


def _load_loader():
    name = ctypes.util.find_library("vulkan") or "libvulkan.so.1"
    try:
        return ctypes.CDLL(name)
    except OSError as e:
        raise VulkanUnavailable(f"cannot load the Vulkan loader ({name}): {e}. "
                                "Install libvulkan1 and a driver (tools/setup.sh does)") from None


def query_devices() -> list[DeviceInfo]:
    """Every physical device the loader sees, in vkEnumeratePhysicalDevices order."""
    vk = _load_loader()
    app = _AppInfo(_ST_APP, None, b"vkq", 1, b"vkq", 1, (1 << 22) | (3 << 12))
    info = _InstanceInfo(_ST_INSTANCE, None, 0, ctypes.pointer(app), 0, None, 0, None)
    inst = ctypes.c_void_p()
    res = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(inst))
    if res != 0:
        raise VulkanUnavailable(f"vkCreateInstance failed (VkResult {res}): no Vulkan driver is installed?")
    try:
        count = ctypes.c_uint32()
        vk.vkEnumeratePhysicalDevices(inst, ctypes.byref(count), None)
        handles = (ctypes.c_void_p * count.value)()
        vk.vkEnumeratePhysicalDevices(inst, ctypes.byref(count), handles)
        return [_describe(vk, i, ctypes.c_void_p(h)) for i, h in enumerate(handles[:count.value])]
    finally:
        vk.vkDestroyInstance(inst, None)


def _chain(*structs):
    """Link structs through pNext in order; returns the first (or None)."""
    for a, b in zip(structs, structs[1:]):
        a.pNext = ctypes.cast(ctypes.pointer(b), ctypes.c_void_p)
    return structs[0] if structs else None


def _extensions(vk, pd) -> tuple:
    count = ctypes.c_uint32()
    vk.vkEnumerateDeviceExtensionProperties(pd, None, ctypes.byref(count), None)
    props = (_ExtensionProperties * count.value)()
    vk.vkEnumerateDeviceExtensionProperties(pd, None, ctypes.byref(count), props)
    return tuple(sorted(p.extensionName.decode(errors="replace") for p in props[:count.value]))


def _describe(vk, index: int, pd) -> DeviceInfo:
    base = _Properties()
    vk.vkGetPhysicalDeviceProperties(pd, ctypes.byref(base))
    api = base.apiVersion
    exts = _extensions(vk, pd)
    v12, v13 = api >= (1 << 22) | (2 << 12), api >= (1 << 22) | (3 << 12)
    has_size_control = v13 or "VK_EXT_subgroup_size_control" in exts
    has_dot = v13 or "VK_KHR_shader_integer_dot_product" in exts
    driver = _DriverProperties(_ST_DRIVER, None)
    subgroup = _SubgroupProperties(_ST_SUBGROUP, None)
    size_control = _SubgroupSizeControlProperties(_ST_SUBGROUP_SIZE_CONTROL, None)
    dot = _DotProductProperties(_ST_DOT_PRODUCT, None)
    props = _Properties2(_ST_PROPERTIES_2, None)
    if api >= (1 << 22) | (1 << 12):  # Vulkan 1.1: properties2 and subgroups are core
        _chain(props, subgroup, *([driver] if v12 else []), *([size_control] if has_size_control else []),
               *([dot] if has_dot else []))
        vk.vkGetPhysicalDeviceProperties2(pd, ctypes.byref(props))
    else:
        props.properties = base
    p = props.properties
    lim = p.limits

    f10 = _Features10()
    vk.vkGetPhysicalDeviceFeatures(pd, ctypes.byref(f10))
    f12, f13 = _Features12(_ST_FEATURES_12, None), _Features13(_ST_FEATURES_13, None)
    size_feat = _SubgroupSizeControlFeatures(_ST_SUBGROUP_SIZE_CONTROL_FEATURES, None)
    dot_feat = _DotProductFeatures(_ST_DOT_PRODUCT_FEATURES, None)
    if v12:
        # 1.3 devices report these in Vulkan13Features; older ones through their extensions
        ext_feats = [] if v13 else [*([size_feat] if has_size_control else []), *([dot_feat] if has_dot else [])]
        f2 = _Features2(_ST_FEATURES_2, None)
        _chain(f2, f12, *([f13] if v13 else ext_feats))
        vk.vkGetPhysicalDeviceFeatures2(pd, ctypes.byref(f2))
        if v13:
            size_feat.subgroupSizeControl, size_feat.computeFullSubgroups = f13.subgroupSizeControl, f13.computeFullSubgroups
            dot_feat.shaderIntegerDotProduct = f13.shaderIntegerDotProduct
    features = {
        "shaderInt8": bool(f12.shaderInt8), "storageBuffer8BitAccess": bool(f12.storageBuffer8BitAccess),
        "shaderInt16": bool(f10.shaderInt16), "shaderInt64": bool(f10.shaderInt64),
        "shaderFloat16": bool(f12.shaderFloat16), "shaderFloat64": bool(f10.shaderFloat64),
        "shaderIntegerDotProduct": bool(dot_feat.shaderIntegerDotProduct),
        "subgroupSizeControl": bool(size_feat.subgroupSizeControl),
        "computeFullSubgroups": bool(size_feat.computeFullSubgroups),
    }
    return DeviceInfo(
        index=index,
        name=p.deviceName.decode(errors="replace"),
        driver=driver.driverName.decode(errors="replace") or "unknown",
        driver_info=driver.driverInfo.decode(errors="replace"),
        type=DEVICE_TYPES.get(p.deviceType, "other"),
        api_version=_version(api),
        vendor_id=p.vendorID,
        max_workgroup_invocations=lim.maxComputeWorkGroupInvocations,
        max_workgroup_size=tuple(lim.maxComputeWorkGroupSize),
        max_workgroup_count=tuple(lim.maxComputeWorkGroupCount),
        max_shared_memory_bytes=lim.maxComputeSharedMemorySize,
        max_storage_buffer_range=lim.maxStorageBufferRange,
        max_texel_buffer_elements=lim.maxTexelBufferElements,
        max_push_constants_bytes=lim.maxPushConstantsSize,
        subgroup_size=subgroup.subgroupSize,
        subgroup_operations=tuple(name for bit, name in SUBGROUP_OPERATIONS.items()
                                  if subgroup.supportedOperations & bit
                                  and subgroup.supportedStages & _STAGE_COMPUTE),
        timestamp_period_ns=lim.timestampPeriod,
        timestamps=bool(lim.timestampComputeAndGraphics),
        features=features,
        extensions=exts,
        min_subgroup_size=size_control.minSubgroupSize,
        max_subgroup_size=size_control.maxSubgroupSize,
        max_compute_workgroup_subgroups=size_control.maxComputeWorkgroupSubgroups,
        subgroup_size_control_compute=bool(size_control.requiredSubgroupSizeStages & _STAGE_COMPUTE),
        dot_product_accelerated=bool(dot.accelerated[_DOT_ACC_SAT_PACKED_SIGNED]),
    )
