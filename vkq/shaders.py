"""GLSL -> SPIR-V: find shader sources, compile variants with glslangValidator, cache on disk.

A variant is a set of preprocessor defines. Each shader lists the variants it is built in
on lines of its own, next to its code:
    //! variant OUT_FLOAT ACT=RELU
(no such line: the shader has one variant, with no defines). Integer choices that do not
change the code path (tile sizes, workgroup shape) are specialization constants instead;
ids 0, 1, 2 are always the workgroup size (see device.Device.dispatch).

The cache key is the compiler's version, the variant and the text of the shader and of every
file it includes, so editing an include or upgrading glslang recompiles.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

TARGET_ENV = "vulkan1.1"  # SPIR-V 1.3: every Vulkan 1.1 device, no optional features


class ShaderCompileError(RuntimeError):
    """glslangValidator rejected a shader variant; carries the compiler's message."""

    def __init__(self, shader: str, defines: dict, message: str):
        self.shader, self.defines, self.message = shader, dict(defines), message
        variant = " ".join(f"{k}={v}" for k, v in sorted(defines.items())) or "(default variant)"
        super().__init__(f"shader {shader!r} variant [{variant}] failed to compile:\n{message.strip()}")


def shader_dir() -> Path:
    """The GLSL sources: vkq/shaders/ inside an installed vkq (the wheel puts the repo's
    shaders/ there), else the repo's shaders/ folder. Found by path: the name vkq.shaders is
    this module, so importlib.resources cannot reach the folder."""
    here = Path(__file__).resolve().parent
    installed = here / "shaders"
    if installed.is_dir() and any(installed.glob("*.comp")):
        return installed
    return here.parent / "shaders"


def cache_dir() -> Path:
    d = Path(os.environ.get("VKQ_CACHE_DIR") or Path.home() / ".cache" / "vkq" / "spirv")
    d.mkdir(parents=True, exist_ok=True)
    return d


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found on PATH: install Debian's "
                           f"{'glslang-tools' if name.startswith('glslang') else 'spirv-tools'} "
                           "(tools/setup.sh does)")
    return path


@functools.lru_cache(maxsize=None)
def compiler_version() -> str:
    out = subprocess.run([_tool("glslangValidator"), "--version"], capture_output=True, text=True)
    return out.stdout.strip()


def source_path(shader: str) -> Path:
    p = shader_dir() / f"{shader}.comp"
    if not p.is_file():
        known = ", ".join(sorted(s for s in list_shaders()))
        raise FileNotFoundError(f"no shader named {shader!r} in {shader_dir()} (known: {known})")
    return p


def list_shaders() -> list[str]:
    return sorted(p.stem for p in shader_dir().glob("*.comp"))


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def source_files(path: Path, seen=None) -> list[Path]:
    """A shader's source file and every file it includes, recursively."""
    seen = set() if seen is None else seen
    if path in seen:
        return []
    seen.add(path)
    out = [path]
    for inc in _INCLUDE.findall(path.read_text()):
        for base in (path.parent, shader_dir() / "include"):
            if (base / inc).is_file():
                out += source_files(base / inc, seen)
                break
    return out


def _sources(path: Path) -> list[tuple[str, str]]:
    """(name, text) of a shader and of everything it includes."""
    return [(p.name, p.read_text()) for p in source_files(path)]


def variants(shader: str) -> list[dict]:
    """The define sets a shader declares with '//! variant' lines."""
    found = []
    for line in source_path(shader).read_text().splitlines():
        if line.startswith("//! variant"):
            defs = {}
            for tok in line[len("//! variant"):].split():
                k, _, v = tok.partition("=")
                defs[k] = v or "1"
            found.append(defs)
    return found or [{}]


def _normalize(defines) -> dict:
    if defines is None:
        return {}
    if isinstance(defines, dict):
        return {str(k): str(v) for k, v in defines.items()}
    return {str(d): "1" for d in defines}


def cache_path(shader: str, defines=None) -> Path:
    """Where the disk cache keeps one variant: keyed by the compiler, the defines and every
    source file it includes."""
    defines = _normalize(defines)
    h = hashlib.sha256()
    h.update(compiler_version().encode())
    h.update(TARGET_ENV.encode())
    h.update(repr(sorted(defines.items())).encode())
    for name, text in _sources(source_path(shader)):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return cache_dir() / f"{shader}-{h.hexdigest()[:24]}.spv"


def compile_shader(shader: str, defines=None) -> bytes:
    """SPIR-V bytes of one variant, from the disk cache when the key matches."""
    defines = _normalize(defines)
    path = source_path(shader)
    cached = cache_path(shader, defines)
    if cached.is_file():
        return cached.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [_tool("glslangValidator"), "-V", "--target-env", TARGET_ENV,
               "-I" + str(shader_dir() / "include"), "-o", str(out)]
        cmd += [f"-D{k}={v}" for k, v in sorted(defines.items())]
        cmd.append(str(path))
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0 or not out.is_file():
            raise ShaderCompileError(shader, defines, res.stdout + res.stderr)
        spirv = out.read_bytes()
    tmp_cached = cached.with_suffix(f".{os.getpid()}.tmp")
    tmp_cached.write_bytes(spirv)
    os.replace(tmp_cached, cached)  # atomic: parallel processes never see half a file
    return spirv


def validate_spirv(spirv: bytes, what: str = "shader") -> None:
    """Run spirv-val on SPIR-V bytes; raise with its message on failure."""
    with tempfile.NamedTemporaryFile(suffix=".spv") as f:
        f.write(spirv)
        f.flush()
        res = subprocess.run([_tool("spirv-val"), "--target-env", TARGET_ENV, f.name],
                             capture_output=True, text=True)
    if res.returncode != 0:
        raise ShaderCompileError(what, {}, "spirv-val: " + res.stdout + res.stderr)


def device_defines(defines: dict, int64: bool) -> dict:
    """A declared variant's defines as a device compiles it: the TEXEL variants (llvmpipe's I/O,
    texel.glsl) also write their ivec4 / vec4 outputs as 64-bit stores where the device enabled
    shaderInt64 (INT64_STORES). Not a variant of its own: the same kernel and the same bytes."""
    return {**defines, "INT64_STORES": "1"} if int64 and "TEXEL" in defines else defines


def compile_all(validate: bool = True, progress=None) -> list[tuple[str, dict]]:
    """Compile (and spirv-val) every declared variant of every shader, each also as a device
    with shaderInt64 compiles it (device_defines); returns what was built."""
    built = []
    for shader in list_shaders():
        for declared in variants(shader):
            int64 = device_defines(declared, True)
            for defs in [declared] + ([int64] if int64 != declared else []):
                spirv = compile_shader(shader, defs)
                if validate:
                    validate_spirv(spirv, f"{shader} {defs}")
                built.append((shader, defs))
                if progress:
                    progress(shader, defs)
    return built


# -- reflection: what a compiled shader reads and writes ---------------------------------------

# SPIR-V opcodes, decorations and capabilities read below (SPIR-V spec, section 3)
_OP_CAPABILITY, _OP_TYPE_POINTER, _OP_VARIABLE, _OP_DECORATE, _OP_MEMBER_DECORATE = 17, 32, 59, 71, 72
_OP_TYPE_IMAGE, _OP_TYPE_SAMPLED_IMAGE, _DIM_BUFFER = 25, 27, 5
_DEC_NON_WRITABLE, _DEC_NON_READABLE, _DEC_BINDING = 24, 25, 33
_CAP_GROUP_NON_UNIFORM = range(61, 69)   # GroupNonUniform .. GroupNonUniformQuad


@dataclass(frozen=True)
class Reflection:
    """reads / writes: the bindings a shader may read / write (a binding without readonly or
    writeonly counts as both); subgroups: it uses subgroup operations, so its lanes depend
    on the pipeline's subgroup size. texels: the bindings that are uniform texel buffers
    (`uniform isamplerBuffer`, read-only; texel.glsl), bound as ivec4 views of the buffer.
    capabilities: its OpCapability operands (e.g. 11, Int64: the device must enable shaderInt64)."""
    reads: frozenset
    writes: frozenset
    subgroups: bool
    texels: frozenset = frozenset()
    capabilities: frozenset = frozenset()


@functools.lru_cache(maxsize=None)
def reflect(spirv: bytes) -> Reflection:
    """The buffer accesses and subgroup use of a SPIR-V module, from its decorations. The
    device layer orders dispatches by these (barriers), so they come from the compiled
    shader itself and cannot drift from the GLSL."""
    words = memoryview(spirv).cast("I")
    if len(words) < 5 or words[0] != 0x07230203:
        raise ValueError("not a SPIR-V module (bad magic number)")
    binding, var_type, pointee, caps = {}, {}, {}, set()
    buffer_images, sampled = set(), {}      # OpTypeImage ids of Dim Buffer; sampled image -> image
    decorated: dict[int, set] = {}          # id -> {decoration}
    member_dec: dict[int, dict] = {}        # struct id -> {member: {decoration}}
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        args = words[i + 1:i + count]
        if count == 0:
            raise ValueError("malformed SPIR-V (zero-length instruction)")
        if op == _OP_CAPABILITY:
            caps.add(args[0])
        elif op == _OP_DECORATE:
            decorated.setdefault(args[0], set()).add(args[1])
            if args[1] == _DEC_BINDING:
                binding[args[0]] = args[2]
        elif op == _OP_MEMBER_DECORATE:
            member_dec.setdefault(args[0], {}).setdefault(args[1], set()).add(args[2])
        elif op == _OP_TYPE_POINTER:
            pointee[args[0]] = args[2]
        elif op == _OP_VARIABLE:
            var_type[args[1]] = args[0]
        elif op == _OP_TYPE_IMAGE and args[2] == _DIM_BUFFER:
            buffer_images.add(args[0])
        elif op == _OP_TYPE_SAMPLED_IMAGE:
            sampled[args[0]] = args[1]
        i += count
    reads, writes, texels = set(), set(), set()
    for var, b in binding.items():
        struct = pointee.get(var_type.get(var))
        if sampled.get(struct) in buffer_images:
            reads.add(b)
            texels.add(b)
            continue
        members = member_dec.get(struct, {}).values()

        def everywhere(dec):
            return dec in decorated.get(var, ()) or (bool(members) and all(dec in m for m in members))
        if not everywhere(_DEC_NON_READABLE):
            reads.add(b)
        if not everywhere(_DEC_NON_WRITABLE):
            writes.add(b)
    return Reflection(frozenset(reads), frozenset(writes), any(c in caps for c in _CAP_GROUP_NON_UNIFORM),
                      frozenset(texels), frozenset(int(c) for c in caps))
