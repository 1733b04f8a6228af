"""The device layer: Vulkan devices, buffers, dispatches and recorded sequences.

This is the only module that imports kp (Kompute). Everything above it speaks in
Buffers, Dispatches and numpy arrays.

Choosing a device, everywhere (API argument, CLI --device, VKQ_DEVICE): an index, or a
name matched case-insensitively against the device and driver names ("llvmpipe",
"lavapipe", "swiftshader", "nvidia", ...). The default prefers a real GPU over a
software driver.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
import threading

import numpy as np

from .vkinfo import FEATURE_EXTENSIONS, DeviceInfo, DeviceLimit, query_devices

# SwiftShader ships with Chromium but does not register itself with the loader.
SWIFTSHADER_ICDS = ("/usr/lib/chromium/vk_swiftshader_icd.json",
                    "/usr/lib/chromium-browser/vk_swiftshader_icd.json")
NAME_ALIASES = {"lavapipe": "llvmpipe", "lvp": "llvmpipe"}
_TYPE_RANK = {"discrete-gpu": 0, "integrated-gpu": 1, "virtual-gpu": 2, "other": 3, "cpu": 4}


def _register_known_icds() -> None:
    """Let the loader see SwiftShader beside the installed drivers, unless the user has
    pinned the driver list (VK_ICD_FILENAMES / VK_DRIVER_FILES). Must run before the
    first Vulkan call of the process."""
    if os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES"):
        return
    added = [p for p in os.environ.get("VK_ADD_DRIVER_FILES", "").split(":") if p]
    for icd in SWIFTSHADER_ICDS:
        if os.path.isfile(icd) and icd not in added:
            added.append(icd)
            break
    if added:
        os.environ["VK_ADD_DRIVER_FILES"] = ":".join(added)


_register_known_icds()

# The x86 feature flags (Linux /proc/cpuinfo names) under which lavapipe is given 512-bit vectors
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl")


def _cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _widen_lavapipe() -> None:
    """Let lavapipe (llvmpipe) use the CPU's whole vector width, unless the user has chosen one
    (LP_NATIVE_VECTOR_WIDTH). llvmpipe JIT-compiles a shader for one SIMD width and runs one
    invocation per lane; it caps that width at 256 bits by default, even on a CPU with AVX-512.
    With 512 bits (16 lanes, subgroup size 16) MobileNetV2's kernels took 0.63-0.71x the GPU
    time on this project's AVX-512 machine (bench/LOG.md); torch's own CPU kernels use
    AVX-512 there too. Only llvmpipe reads the variable, and only at its first device in the
    process: this runs on import, before any Vulkan call. The kernels' lane sharing follows the
    subgroup size (tools/test.sh runs them at 4, 8 and 16 lanes)."""
    if "LP_NATIVE_VECTOR_WIDTH" in os.environ:
        return
    if set(AVX512_FLAGS) <= _cpu_flags():
        os.environ["LP_NATIVE_VECTOR_WIDTH"] = "512"


_widen_lavapipe()


class DeviceNotFound(LookupError):
    pass


@functools.lru_cache(maxsize=1)
def devices() -> tuple[DeviceInfo, ...]:
    """Every Vulkan device the loader can see (cached for the process)."""
    return tuple(query_devices())


def _listing(infos) -> str:
    return "\n".join(f"  [{d.index}] {d.name} (driver {d.driver}, {d.type})" for d in infos) or "  (none)"


def select(spec=None) -> DeviceInfo:
    """Resolve a device choice (None -> $VKQ_DEVICE -> default) to its DeviceInfo."""
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        spec = os.environ.get("VKQ_DEVICE") or None
    infos = devices()
    if not infos:
        raise DeviceNotFound("no Vulkan device found: install a driver (mesa-vulkan-drivers gives lavapipe)")
    if spec is None:
        return min(infos, key=lambda d: (_TYPE_RANK.get(d.type, 3), "swiftshader" in d.name.lower(), d.index))
    if isinstance(spec, DeviceInfo):
        return spec
    text = str(spec).strip().lower()
    if text.lstrip("-").isdigit():
        i = int(text)
        if 0 <= i < len(infos):
            return infos[i]
        raise DeviceNotFound(f"no Vulkan device with index {i}; the devices are:\n{_listing(infos)}")
    text = NAME_ALIASES.get(text, text)
    matches = [d for d in infos if text in d.name.lower() or text in d.driver.lower()]
    if not matches:
        raise DeviceNotFound(f"no Vulkan device matches {spec!r}; the devices are:\n{_listing(infos)}")
    return matches[0]


def _normalize_defines(defines) -> dict:
    from .shaders import _normalize
    return _normalize(defines)


def _log_variant(shader: str, defines: tuple) -> None:
    """With $VKQ_DISPATCH_LOG set, append each shader variant a dispatch is built from, with
    the pytest test that built it: tools/select_tests.py turns the log of the lavapipe test
    pass into the cheapest set of tests that runs every variant under GPU-assisted validation,
    and into the tests that run a subgroup kernel (for the other subgroup sizes)."""
    path = os.environ.get("VKQ_DISPATCH_LOG")
    if path:
        import json
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, "shader": shader, "defines": dict(defines)}) + "\n")


_open_devices: dict[tuple, "Device"] = {}
_open_lock = threading.Lock()

# Optional features vkq's shaders may use; a device enables those it offers, nothing else.
WANTED_FEATURES = ("shaderInt64", "shaderIntegerDotProduct", "subgroupSizeControl", "computeFullSubgroups")


def enabled_features(info: DeviceInfo) -> list:
    """The WANTED_FEATURES this device offers (with the extension that carries each)."""
    return [f for f in WANTED_FEATURES if info.features.get(f)
            and (FEATURE_EXTENSIONS[f] is None or FEATURE_EXTENSIONS[f] in info.extensions)]


def default_dot_product(info: DeviceInfo) -> bool:
    """Whether int8 kernels use the integer dot product instructions on a device, unless the
    caller forces it (get_device(..., dot_product=)): where the device says the signed 4x8-bit
    packed accumulating dot product is accelerated. CPU drivers emulate it (not accelerated)."""
    return bool(info.features.get("shaderIntegerDotProduct")) and info.dot_product_accelerated


def default_texel_loads(info: DeviceInfo) -> bool:
    """Whether kernels read their large ivec4 inputs as uniform texel buffers (the TEXEL
    variants, shaders/include/texel.glsl) on a device, unless the caller forces it
    (get_device(..., texel_loads=)). Measured, so chosen per driver: on llvmpipe a texel fetch
    is a vector gather and a storage-buffer load a loop over the lanes (MobileNetV2's kernels
    7.6% less GPU time, depthwise 14%; bench/LOG.md). SwiftShader: no gain (convs that fit
    its 64K texels took 1.01-1.10x the time) and no GPU measured yet: storage buffers there."""
    return info.driver == "llvmpipe"


def get_device(spec=None, *, dot_product: bool | None = None, subgroups: bool = True,
               texel_loads: bool | None = None) -> "Device":
    """The opened Device for a choice: one per physical device and kernel choice per process.
    dot_product: None chooses per device (default_dot_product); True/False forces the int8
    kernels' integer-dot-product variants on or off (True on a device without the feature is
    an error). subgroups=False hides the device's subgroup operations from the kernels, so
    they take the variants written for devices without them (tests run those too).
    texel_loads: None chooses per device (default_texel_loads); True/False forces the TEXEL
    variants on or off (on, a kernel still takes storage buffers where one of its inputs is
    larger than the device's texel buffers: Device.texel_variant)."""
    info = select(spec)
    if dot_product is None:
        dot_product = default_dot_product(info)
    elif dot_product and not info.features.get("shaderIntegerDotProduct"):
        raise DeviceNotFound(f"{info.name} has no shaderIntegerDotProduct: the integer dot product "
                             "kernels cannot run there")
    if texel_loads is None:
        texel_loads = default_texel_loads(info)
    key = (info.index, bool(dot_product), bool(subgroups), bool(texel_loads))
    with _open_lock:
        if key not in _open_devices:
            _open_devices[key] = Device(info, dot_product=bool(dot_product), subgroups=subgroups,
                                        texel_loads=bool(texel_loads))
        return _open_devices[key]


def push_constants(*values) -> np.ndarray:
    """Pack push-constant values in order as 32-bit words: Python ints and integer arrays
    as int32, floats and float arrays as float32 (bit patterns), like a std430 block of
    int/float members. Kompute sends the words as they are."""
    words = []
    for v in values:
        a = np.asarray(v)
        if a.dtype.kind in "iub":
            words.append(a.astype(np.int32).reshape(-1).view(np.uint32))
        elif a.dtype.kind == "f":
            words.append(a.astype(np.float32).reshape(-1).view(np.uint32))
        else:
            raise TypeError(f"push constant of dtype {a.dtype} is not supported")
    return np.concatenate(words) if words else np.zeros(0, np.uint32)


MAX_GROUPS = 65535     # workgroups a grid dimension may count on every device (Vulkan's minimum maxComputeWorkGroupCount)


CPU_WORKGROUPS_PER_THREAD = 8   # invocation_rows keeps this many workgroups a CPU thread
MAX_INVOCATION_ROWS = 32


LP_MAX_THREADS = 32   # llvmpipe's cap on its threads (lp_limits.h, Mesa 22.3 as in Debian 12)


def cpu_threads() -> int:
    """Threads a CPU driver runs a dispatch's workgroups on: lavapipe's LP_NUM_THREADS where set,
    else one per CPU this process may use (lavapipe and SwiftShader size their pools so), at most
    LP_MAX_THREADS."""
    try:
        return min(LP_MAX_THREADS, max(1, int(os.environ["LP_NUM_THREADS"])))
    except (KeyError, ValueError):
        pass
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return min(LP_MAX_THREADS, max(1, n))


def cpu_rounds(workgroups: int) -> int:
    """Workgroups the busiest thread of a CPU driver runs: the threads take a dispatch's
    workgroups one at a time, so its time is this many workgroups, not workgroups / threads
    (5 on 2 threads take as long as 6)."""
    return -(-workgroups // cpu_threads())


def invocation_rows(info: DeviceInfo, groups_per_row: int, rows: int) -> int:
    """Rows (of blocks) each invocation of a grid-shaped dispatch runs down, given the
    workgroups that cover one row and the rows to cover (quantize/dequantize: int8x4.glsl
    io_blocks). GPUs: 1, the most invocations. A CPU driver runs an
    invocation's fixed cost (its coordinates, bounds, constants) once per SIMD vector of lanes,
    so fewer, longer invocations win while every thread keeps CPU_WORKGROUPS_PER_THREAD
    workgroups (cpu_threads). lavapipe, 4 MiB
    quantize: 11.1 ms at 1 row, 4.0 at 16, 3.9 at 32, flat beyond (MAX_INVOCATION_ROWS). Not
    taken by repack_blocks.comp (4 ivec4s in and out an invocation): a grid with 1 or 32 row
    blocks an invocation was within noise of its linear index on 4 MiB."""
    if info.type != "cpu":
        return 1
    want = CPU_WORKGROUPS_PER_THREAD * cpu_threads()
    return max(1, min(MAX_INVOCATION_ROWS, rows, groups_per_row * rows // want))


def grid_1d(n: int, local: int, max_groups: int = MAX_GROUPS) -> tuple[int, int, int]:
    """Workgroup counts covering n invocations in 1-D, folded into y beyond the x limit.
    Shaders recover the linear index with linear_invocation() (shaders/include/common.glsl)."""
    groups = max(1, -(-n // local))
    if groups <= max_groups:
        return (groups, 1, 1)
    return (max_groups, -(-groups // max_groups), 1)


_KP_DTYPES = {np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.float32)}
_SERIALS = itertools.count()


class Buffer:
    """A device buffer of 32-bit words (int32, uint32 or float32). Packed int8 tensors
    live in int32 buffers (four values a word)."""

    def __init__(self, device: "Device", tensor, dtype, size: int, host_visible: bool):
        self.device, self.tensor, self.dtype, self.size = device, tensor, np.dtype(dtype), size
        self.host_visible = host_visible
        self.serial = next(_SERIALS)     # identity that is never reused (keys of cached pipelines)

    @property
    def nbytes(self) -> int:
        return self.size * 4

    def write(self, array) -> None:
        """Copy into the host staging copy (sent up by an upload in run/record): the whole
        buffer, or its first words (a tensor smaller than the bound it was sized for)."""
        self._check_host()
        a = np.asarray(array)
        if a.size > self.size:
            raise ValueError(f"buffer holds {self.size} words, got an array of {a.size}")
        self.tensor.data()[:a.size] = a.reshape(-1).astype(self.dtype, copy=False)

    def read(self, words: int | None = None) -> np.ndarray:
        """A copy of the host staging copy (fetched by a download in run/record), or of its
        first `words` words."""
        self._check_host()
        n = self.size if words is None else words
        if n > self.size:
            raise ValueError(f"buffer holds {self.size} words, asked for {n}")
        return np.array(self.tensor.data()[:n], dtype=self.dtype, copy=True)

    def _check_host(self):
        if not self.host_visible:
            raise RuntimeError("this buffer is device-only (an intermediate); it has no host copy")

    def __repr__(self):
        return f"Buffer({self.size} x {self.dtype}, {'host+device' if self.host_visible else 'device'})"


class Dispatch:
    """One compute dispatch: a shader variant bound to its buffers, with its workgroup
    counts, specialization and push constants fixed when it is built. reads / writes are
    the Buffers it may read / write (from the shader's own readonly/writeonly qualifiers)."""

    def __init__(self, name: str, algorithm, groups, push, reads=frozenset(), writes=frozenset(), defines=(),
                 spec=()):
        self.name, self.algorithm, self.groups, self.push = name, algorithm, groups, push
        self.spec = tuple(spec)                # specialization constants 3, 4, ... (after the workgroup size)
        self.reads, self.writes = frozenset(reads), frozenset(writes)
        self.defines = frozenset(defines)      # the variant: define names (the benchmark reads DOT)
        values = defines.items() if isinstance(defines, dict) else ((d, "1") for d in defines)
        # the variant as a report names it: shader(DEFINE, NAME=value, ...) (vkq verify)
        self.variant = name + (f"({', '.join(k if str(v) == '1' else f'{k}={v}' for k, v in sorted(values))})"
                               if self.defines else "")

    def op(self):
        import kp    # the workgroup counts go with the op: a cached pipeline serves several shapes
        return kp.OpAlgoDispatch(self.algorithm, self.push, list(self.groups))

    def __repr__(self):
        return f"Dispatch({self.name}, groups={self.groups})"


# vulkan_core.h: VkPipelineStageFlagBits, VkAccessFlagBits
_STAGE_COMPUTE, _STAGE_TRANSFER = 0x800, 0x1000
_SHADER_READ, _SHADER_WRITE, _TRANSFER_READ, _TRANSFER_WRITE = 0x20, 0x40, 0x800, 0x1000
_STAGES = _STAGE_COMPUTE | _STAGE_TRANSFER


class _Hazards:
    """Which buffers were read and written since the last barrier. An access needs a barrier
    first when it reads or writes a buffer written since (RAW, WAW) or writes one read since
    (WAR); the memory arena gives one buffer to many tensors, so WAR and WAW are common."""

    def __init__(self):
        self.reads, self.writes = set(), set()

    def conflict(self, reads, writes) -> bool:
        return not self.writes.isdisjoint(reads) or not self.writes.isdisjoint(writes) \
            or not self.reads.isdisjoint(writes)

    def add(self, reads, writes):
        self.reads.update(reads)
        self.writes.update(writes)

    def clear(self):
        self.reads.clear()
        self.writes.clear()


def _barrier():
    """One global memory barrier: compute and transfer writes before it are complete and
    visible to compute and transfer reads and writes after it. A global barrier costs what a
    buffer barrier costs on current drivers (llama.cpp and ncnn use them too) and one covers
    every buffer; the stages are narrow (no graphics, no host), the accesses cover
    RAW, WAR and WAW alike."""
    import kp
    return kp.OpBarrier(_STAGES, _STAGES, _SHADER_WRITE | _TRANSFER_WRITE,
                        _SHADER_READ | _SHADER_WRITE | _TRANSFER_READ | _TRANSFER_WRITE)


class Recording:
    """A Kompute sequence recorded once: uploads, dispatches, downloads. run() replays it.

    Ordering: the sequence opens with one barrier (against whatever the previous submission
    on this queue did with the same buffers), then each dispatch, upload or download gets a
    barrier before it only if it depends on an access since the last barrier (_Hazards), so
    independent dispatches stay free to overlap on a GPU. barriers=False records none of
    them: for the test that proves the synchronization validation catches the hazard."""

    def __init__(self, device: "Device", steps, upload, download, timestamps: bool, barriers: bool = True):
        import kp
        self.device, self.steps = device, list(steps)
        ops, self._dispatch_at = [], []
        hazards = _Hazards()

        def access(op, reads, writes):
            if barriers and hazards.conflict(reads, writes):
                ops.append(_barrier())
                hazards.clear()
            hazards.add(reads, writes)
            ops.append(op)

        if barriers and (self.steps or upload or download):
            ops.append(_barrier())
        self._upload_at = self._download_at = None
        if upload:
            access(kp.OpTensorSyncDevice([b.tensor for b in upload]), (), set(upload))
            self._upload_at = len(ops) - 1
        for s in self.steps:
            access(s.op(), s.reads, s.writes)
            self._dispatch_at.append(len(ops) - 1)
        if download:
            access(kp.OpTensorSyncLocal([b.tensor for b in download]), set(download), ())
            self._download_at = len(ops) - 1
        self.barriers = sum(isinstance(op, kp.OpBarrier) for op in ops)
        with device.lock:
            self.seq = device._mgr.sequence(0, len(ops) + 1) if timestamps else device._mgr.sequence()
            for op in ops:
                self.seq.record(op)
        self.timestamps = timestamps

    def run(self) -> None:
        with self.device.lock:      # one queue: submissions from several threads take turns
            self.seq.eval()

    def dispatch_times_ns(self) -> list[float]:
        """GPU time of each dispatch of the last run, from Vulkan timestamps (ticks times the
        device's timestampPeriod: 1 ns on the CPU drivers and NVIDIA, other values elsewhere)."""
        if not self.timestamps:
            raise RuntimeError("record(..., timestamps=True) to time dispatches")
        ts, period = self.seq.get_timestamps(), self.device.info.timestamp_period_ns or 1.0
        return [float(ts[k + 1] - ts[k]) * period for k in self._dispatch_at]

    def transfer_times_ns(self) -> tuple[float, float]:
        """GPU time of the upload and of the download of the last run (0 where none)."""
        if not self.timestamps:
            raise RuntimeError("record(..., timestamps=True) to time transfers")
        ts, period = self.seq.get_timestamps(), self.device.info.timestamp_period_ns or 1.0
        return tuple(0.0 if k is None else float(ts[k + 1] - ts[k]) * period for k in (self._upload_at, self._download_at))


class Device:
    """An opened Vulkan device (a kp.Manager) and what vkq knows about it.

    features_enabled: the optional features enabled at creation (WANTED_FEATURES that the
    device offers with their extensions). dot_product: whether int8 kernels take their
    integer-dot-product variants here. texel_loads: whether they take their TEXEL variants
    (texel_variant). lock: held while the device's queue or its kp objects are used, so that
    threads may share a device."""

    def __init__(self, info: DeviceInfo, dot_product: bool = False, subgroups: bool = True,
                 texel_loads: bool = False):
        import kp
        self.info = info if subgroups else dataclasses.replace(info, subgroup_operations=("basic",))
        self.features_enabled = frozenset(enabled_features(info))
        if dot_product and "shaderIntegerDotProduct" not in self.features_enabled:
            raise DeviceNotFound(f"{info.name}: the integer dot product cannot be enabled")
        self.dot_product = bool(dot_product)
        self.texel_loads = bool(texel_loads)
        extensions = sorted({FEATURE_EXTENSIONS[f] for f in self.features_enabled} - {None})
        self._mgr = kp.Manager(info.index, [], extensions, sorted(self.features_enabled))
        self._spirv: dict = {}
        self._owners: dict = {}            # variant -> kp algorithm (_pipeline_owner)
        self._placeholder: Buffer | None = None
        self.lock = threading.RLock()

    @property
    def subgroup_size_control(self) -> bool:
        """Pipelines can require the subgroup size (and full subgroups) here."""
        return {"subgroupSizeControl", "computeFullSubgroups"} <= self.features_enabled \
            and self.info.subgroup_size_control_compute

    @property
    def wide_stores(self) -> bool:
        """STORE4_PAIR (texel.glsl) writes its two ivec4s as one 32-byte store here: the TEXEL
        variants where shaderInt64 is enabled (llvmpipe, where a storage-buffer store is a loop
        over the lanes whose passes cost the time, not the bytes: bench/LOG.md, "Stores on
        llvmpipe"). Elsewhere it is two ivec4 stores, and kernels keep one block an invocation."""
        return self.texel_loads and "shaderInt64" in self.features_enabled

    def __repr__(self):
        return f"Device([{self.info.index}] {self.info.name})"

    def _texel_choice(self, shader: str, buffers, defines: dict) -> dict:
        """The variant a dispatch takes: the shader's declared TEXEL variant of `defines`
        (texel.glsl) where the device takes texel loads and every buffer that variant binds as
        texels fits (texel_variant), else `defines` as given. One place for every kernel: the
        compiled variant itself says which bindings are texels."""
        from .shaders import reflect, variants
        if not self.texel_loads or "TEXEL" in defines:
            return defines
        declared = variants(shader)
        names = set().union(*declared)        # the rest (float_matmul's TM) are parameters
        if {**{k: v for k, v in defines.items() if k in names}, "TEXEL": "1"} not in declared:
            return defines
        want = {**defines, "TEXEL": "1"}
        texels = reflect(self.spirv(shader, want, log=False)).texels
        return want if self.texel_variant(*(buffers[b] for b in texels if b < len(buffers))) else defines

    def texel_variant(self, *buffers) -> bool:
        """Whether a kernel whose TEXEL variant binds these buffers as uniform texel buffers
        takes that variant here: the device's choice (texel_loads), and every buffer whole
        ivec4s (a view holds whole texels: the words of a partial one would read as 0) within
        maxTexelBufferElements of them (the Vulkan minimum is 64K: 1 MiB)."""
        return self.texel_loads and all(map(self._texel_buffer_fits, buffers))

    def _texel_buffer_fits(self, b) -> bool:
        return b.size % 4 == 0 and b.size <= 4 * self.info.max_texel_buffer_elements

    # -- buffers ------------------------------------------------------------------
    def buffer(self, data=None, *, size: int | None = None, dtype=np.int32, host_visible: bool = True) -> Buffer:
        """A buffer initialised from `data`, or of `size` zero words. host_visible=False makes
        a device-only buffer (no staging copy) for intermediates."""
        import kp
        if data is not None:
            arr = np.ascontiguousarray(np.asarray(data).reshape(-1))
            dtype = arr.dtype
        else:
            if size is None:
                raise ValueError("buffer() needs data or size")
            arr = np.zeros(size, dtype=dtype)
        if np.dtype(dtype) not in _KP_DTYPES:
            raise TypeError(f"device buffers hold int32, uint32 or float32 words, not {np.dtype(dtype)}")
        n = arr.size
        if n > self.info.max_storage_buffer_range // 4:
            raise DeviceLimit(f"a buffer of {n * 4} bytes exceeds {self.info.name}'s storage buffer "
                             f"range of {self.info.max_storage_buffer_range} bytes")
        backing = arr if n else np.zeros(1, dtype=arr.dtype)  # Vulkan has no empty buffers
        kind = kp.TensorTypes.device if host_visible else kp.TensorTypes.storage
        with self.lock:
            tensor = self._mgr.tensor_t(backing, kind)
        return Buffer(self, tensor, arr.dtype, n, host_visible)

    # -- dispatches ---------------------------------------------------------------
    def spirv(self, shader: str, defines=None, log: bool = True) -> bytes:
        """The SPIR-V of a variant, compiled once per device. log=False: a look at a variant
        that may not be dispatched (the dispatch log lists built variants only)."""
        from . import shaders
        key = (shader, tuple(sorted(shaders._normalize(defines).items())))
        if key not in self._spirv:
            self._spirv[key] = shaders.compile_shader(
                shader, shaders.device_defines(dict(key[1]), "shaderInt64" in self.features_enabled))
        if log:
            _log_variant(*key)
        return self._spirv[key]

    def dispatch(self, shader: str, buffers, groups, *, local=(64, 1, 1), spec=(), push=(),
                 defines=None, pipelines: dict | None = None) -> Dispatch:
        """Build a dispatch of `shader` over `buffers` (bindings 0, 1, ...). Specialization
        constants 0-2 are the workgroup size `local`; `spec` fills ids 3, 4, ... as int32.
        A shader that uses subgroup operations gets a pipeline that requires the device's
        subgroup size (and full subgroups where the workgroup width allows), where the device
        can require it: kernels choose their lane sharing from info.subgroup_size.
        pipelines: a dict that keeps built kp algorithms for reuse by dispatches of the same
        shader variant, constants, buffers and push-constant size (an executor's builds for
        several shapes). Whatever the dict, a dispatch shares the compiled pipeline of the
        device's one algorithm of its shader variant, constants, binding count and push-constant
        size (_pipeline_owner; kp's algorithm_like: a descriptor set of its own, nothing
        compiled). One pipeline per kernel variant and device, not per dispatch or per program:
        a 64-step LSTM's 1921 dispatches have 15 variants; with a pipeline each, llvmpipe took
        0.21 ms a dispatch (its JIT code for 1921 pipelines) against 0.03 with 50 pipelines, and
        compiled each. Across programs it is compile time: SwiftShader has no disk cache, and
        its pipeline cache keys on the pipeline layout object, so each algorithm of its own
        compiled anew — in tests/test_conv.py + test_float_ops.py (SwiftShader, 2714 pipelines
        of 946 variants) pipeline creation was 447 s of 475."""
        with self.lock:
            return self._dispatch(shader, buffers, groups, local, spec, push, defines, pipelines)

    def _dispatch(self, shader, buffers, groups, local, spec, push, defines, pipelines) -> Dispatch:
        local = tuple(int(x) for x in local) + (1,) * (3 - len(local))
        groups = tuple(int(x) for x in groups) + (1,) * (3 - len(groups))
        lim = self.info
        if np.prod(local) > lim.max_workgroup_invocations or any(
                l > m for l, m in zip(local, lim.max_workgroup_size)):
            raise ValueError(f"{shader}: workgroup {local} exceeds {lim.name}'s limits "
                             f"({lim.max_workgroup_invocations} invocations, sizes {lim.max_workgroup_size})")
        if any(g < 1 or g > m for g, m in zip(groups, lim.max_workgroup_count)):
            raise ValueError(f"{shader}: workgroup count {groups} outside {lim.name}'s limits "
                             f"{lim.max_workgroup_count}")
        spec_arr = np.array(list(local) + [int(s) for s in spec], dtype=np.int32)
        push_arr = push if isinstance(push, np.ndarray) and push.dtype == np.uint32 else push_constants(*push)
        if push_arr.nbytes > lim.max_push_constants_bytes:
            raise ValueError(f"{shader}: {push_arr.nbytes} bytes of push constants exceed "
                             f"{lim.max_push_constants_bytes}")
        from .shaders import reflect
        defines = self._texel_choice(shader, buffers, _normalize_defines(defines))
        spirv = self.spirv(shader, defines)
        use = reflect(spirv)
        if max(use.reads | use.writes, default=-1) >= len(buffers):
            raise ValueError(f"{shader}: the shader binds {max(use.reads | use.writes) + 1} buffers, got {len(buffers)}")
        key = (shader, tuple(sorted(_normalize_defines(defines).items())), spec_arr.tobytes(),
               tuple(b.serial for b in buffers), push_arr.nbytes)
        for b in use.texels:
            if not self._texel_buffer_fits(buffers[b]):
                raise ValueError(f"buffer {b} ({buffers[b].size} words) cannot be a texel buffer on {lim.name}: "
                                 f"it must be whole ivec4s, at most {lim.max_texel_buffer_elements} of them")
        algo = pipelines.get(key) if pipelines is not None else None
        if algo is None:
            owner = self._pipeline_owner(spirv, use, len(buffers), local, spec_arr, push_arr)
            algo = self._algorithm(spirv, use, buffers, groups, local, spec_arr, push_arr, owner)
            if pipelines is not None:
                pipelines[key] = algo
        return Dispatch(shader, algo, groups, push_arr,
                        reads={buffers[i] for i in use.reads}, writes={buffers[i] for i in use.writes},
                        defines=_normalize_defines(defines), spec=spec_arr[3:].tolist())

    OWNERS_KEPT = 4096   # compiled pipelines a device keeps (least recently used dropped first)

    def _pipeline_owner(self, spirv, use, n_buffers, local, spec_arr, push_arr):
        """The device's algorithm of a variant (SPIR-V, constants, binding count, push-constant
        size: defines that compile to the same code share it), whose pipeline every dispatch
        of it shares. It is built over one
        4-word placeholder buffer at every binding and never dispatched, so that it keeps no
        program's buffers alive. An algorithm sharing a pipeline keeps its owner alive, so
        dropping an owner from the cache frees nothing in use."""
        variant = (spirv, spec_arr.tobytes(), n_buffers, push_arr.nbytes)
        owner = self._owners.pop(variant, None)
        if owner is None:
            if self._placeholder is None:
                self._placeholder = self.buffer(size=4, host_visible=False)
            owner = self._algorithm(spirv, use, [self._placeholder] * n_buffers, (1, 1, 1), local,
                                    spec_arr, np.zeros_like(push_arr))
            while len(self._owners) >= self.OWNERS_KEPT:
                self._owners.pop(next(iter(self._owners)))
        self._owners[variant] = owner      # (last in the dict: the most recently used)
        return owner

    def _algorithm(self, spirv, use, buffers, groups, local, spec_arr, push_arr, owner=None):
        """A kp algorithm (descriptor set + compute pipeline) for a shader over buffers; with
        owner (an algorithm of the same variant, constants and push size), owner's pipeline."""
        lim = self.info
        args = ([b.tensor for b in buffers], spirv, list(groups), spec_arr, push_arr)
        sg, size, full = lim.subgroup_size, 0, False
        if use.subgroups and self.subgroup_size_control:
            # a required size caps the workgroup at maxComputeWorkgroupSubgroups subgroups
            size = sg if np.prod(local) <= sg * lim.max_compute_workgroup_subgroups else 0
            full = local[0] % (size or lim.max_subgroup_size) == 0
        if owner is not None:
            return self._mgr.algorithm_like(owner, size, full, sorted(use.texels), *args)
        if size or full or use.texels:
            return self._mgr.algorithm_subgroups(size, full, sorted(use.texels), *args)
        return self._mgr.algorithm(*args)

    # -- running ------------------------------------------------------------------
    def record(self, steps, upload=(), download=(), timestamps: bool = False, barriers: bool = True) -> Recording:
        return Recording(self, steps, list(upload), list(download), timestamps, barriers)

    def run(self, steps, upload=(), download=()) -> None:
        """Record and evaluate once: upload host copies, dispatch in order, download."""
        self.record(steps, upload, download).run()
