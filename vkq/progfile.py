"""The .vkq program file: a zip holding `manifest.json` (format, version, digest, tensors,
nodes, inputs, outputs, constants, fallback report, meta) and one `.npy` per constant. No
pickle anywhere: loading a file runs no code from it.

A file cannot lie. Everything the program reads is covered by one sha256 digest stored in
the manifest: the manifest's own content (canonical JSON of everything but the digest, in
file order: attrs, tensor specs, node order, inputs, outputs...) and, through the sha256 of
each constant that the manifest records, every constant's bytes. Load checks the digest and
each constant's checksum, so an edited or corrupted byte that the program depends on is
refused; bytes nothing reads (zip timestamps, comments) may differ. The file is then checked
completely (types, bounds, names, sizes capped before anything is inflated) before anything
runs, and anything malformed raises ProgramFileError saying what is wrong.

Versions: 3 adds program state ("state": each state tensor's update and its initial value, a
.npy like a constant) and lets constants of equal bytes share one file (a tied embedding and
lm_head); 2 adds the digest; 1 (per-constant checksums only) still loads.
"""
from __future__ import annotations

import hashlib
import inspect
import io
import json
import math
import re
import struct
import zipfile
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from . import packing, symbolic
from .program import DTYPES, Node, Program, TensorSpec

FORMAT = "vkq-program"
VERSION = 3
_CONST_DTYPES = {"int8", "int32", "float32", "float64"}
MANIFEST = "manifest.json"

# Caps checked before reading: a tiny file must not inflate to gigabytes.
MAX_MANIFEST_BYTES = 64 << 20
MAX_ELEMENTS = 2**31 - 1           # shaders index tensors with 32-bit integers
_NPY_HEADER_MAX = 1 << 16          # .npy magic, version and header dict
_SHA256 = re.compile(r"[0-9a-f]{64}")

# What a damaged zip can raise from zipfile, zlib and struct while being read.
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, struct.error, UnicodeDecodeError,
               NotImplementedError, RuntimeError, ValueError, OverflowError)


class ProgramFileError(ValueError):
    """The file is not a valid vkq program (truncated, wrong version, edited, inconsistent...)."""


# -- saving ----------------------------------------------------------------------------------

def _jsonable(value, where: str):
    """Attrs as plain JSON: numpy scalars and arrays become numbers and lists."""
    if isinstance(value, (np.integer, np.bool_)):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v, where) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{where}: attribute value {value!r} ({type(value).__name__}) cannot be stored")


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array(array, order="C"), allow_pickle=False)  # (ascontiguousarray makes 0-d 1-d)
    return buf.getvalue()


def digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON: every key but "digest", in file order, compact,
    ASCII. The manifest records each constant's sha256, so this covers the constants too."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=True, allow_nan=True)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def save_program(program: Program, path) -> Path:
    """Write `program` to `path` (a .vkq zip), atomically. Returns the path."""
    program.validate()
    path = Path(path)
    files, by_sha = {}, {}

    def entry(name, value, folder, i):
        value = np.asarray(value)
        if value.dtype.name not in _CONST_DTYPES:
            raise TypeError(f"{folder[:-1]} {name!r} has dtype {value.dtype}; expected one of {sorted(_CONST_DTYPES)}")
        data = _npy_bytes(value)
        sha = hashlib.sha256(data).hexdigest()
        fname = by_sha.setdefault(sha, f"{folder}/{i:06d}.npy")     # (equal bytes: one file)
        files[fname] = data
        return {"file": fname, "dtype": value.dtype.name, "shape": list(value.shape), "sha256": sha}

    consts = {name: entry(name, value, "constants", i) for i, (name, value) in enumerate(program.constants.items())}
    state = {name: {"update": program.state[name], **entry(name, program.state_init[name], "state", i)}
             for i, name in enumerate(program.state)}
    manifest = {
        "format": FORMAT, "version": VERSION,
        "tensors": {n: {"shape": list(s.shape), "dtype": s.dtype, "layout": s.layout,
                        "scale": s.scale, "zero_point": s.zero_point} for n, s in program.tensors.items()},
        "nodes": [{"op": n.op, "inputs": n.inputs, "outputs": n.outputs, "name": n.name,
                   "attrs": _jsonable(n.attrs, n.name)} for n in program.nodes],
        "inputs": list(program.inputs), "outputs": list(program.outputs),
        "constants": consts,
        "fallback": [list(f) for f in program.fallback],
        "meta": _jsonable(program.meta, "meta"),
    }
    if program.symbols:
        manifest["symbols"] = {s: [int(lo), int(hi)] for s, (lo, hi) in program.symbols.items()}
    if program.checks:
        manifest["checks"] = list(program.checks)
    if state:
        manifest["state"] = state
    # What is saved is what load will see: JSON turns tuples into lists, keys into strings.
    manifest = json.loads(json.dumps(manifest))
    manifest["digest"] = digest(manifest)
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(MANIFEST, json.dumps(manifest, indent=1))
        for fname, data in files.items():
            z.writestr(fname, data)
    tmp.replace(path)   # never leave a half-written program under the real name
    return path


# -- checking values -------------------------------------------------------------------------

def _require(cond, msg):
    if not cond:
        raise ProgramFileError(msg)


# Op names that files from older vkq versions use, and the op that now runs them (the float
# twins of the shape ops became one op per name for every dtype).
OP_ALIASES = {"reshape_f32": "reshape", "permute_f32": "permute", "transpose_f32": "transpose",
              "expand_f32": "expand", "cat_f32": "cat"}


def _kind(value) -> str:
    """How a wrong value is named in a message: its JSON type and a short repr."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "an integer", float: "a number"}
    text = repr(value)
    return f"{names.get(type(value), type(value).__name__)} {text[:40]}{'...' if len(text) > 40 else ''}"


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _typed(value, kind, where):
    what = {dict: "an object", list: "a list", str: "a string"}[kind]
    _require(isinstance(value, kind), f"{where} must be {what}, got {_kind(value)}")
    return value


def _names(value, where) -> list:
    for i, v in enumerate(_typed(value, list, where)):
        _typed(v, str, f"{where}[{i}]")
    return list(value)


def _keys(entry: dict, required, optional, where):
    for k in required:
        _require(k in entry, f"{where} has no {k!r}")
    for k in entry:
        _require(k in required or k in optional, f"{where} has an unknown key {k!r}")


def check_dim(d, where):
    """One entry of a tensor shape: a non-negative integer, or (dynamic shapes) an integer
    expression in the program's input symbols (vkq.symbolic; Program.validate checks the
    symbols are declared, and shapes at the symbols' bounds are checked when the executor
    sizes its buffers)."""
    if isinstance(d, str):
        _require(len(d) <= 256, f"{where}: a symbolic dimension of {len(d)} characters")
        try:
            symbolic.check(d)
        except symbolic.SymbolicError as e:
            raise ProgramFileError(f"{where}: {e}") from None
        return d
    _require(_is_int(d) and 0 <= d <= MAX_ELEMENTS,
             f"{where} must be a non-negative integer up to {MAX_ELEMENTS} or an expression, got {_kind(d)}")
    return d


def check_shape(shape, where) -> tuple:
    dims = tuple(check_dim(d, f"{where}[{i}]") for i, d in enumerate(_typed(shape, list, where)))
    known = [d for d in dims if _is_int(d)]
    _require(math.prod(known) <= MAX_ELEMENTS, f"{where} {list(dims)} has more than {MAX_ELEMENTS} elements")
    return dims


def _tensor_spec(name, entry) -> TensorSpec:
    where = f"tensor {name!r}"
    _keys(_typed(entry, dict, where), ("shape", "dtype"), ("layout", "scale", "zero_point"), where)
    shape = check_shape(entry["shape"], f"{where}: shape")
    dtype, layout = entry["dtype"], entry.get("layout")
    _require(isinstance(dtype, str) and dtype in DTYPES, f"{where}: dtype must be one of {DTYPES}, got {_kind(dtype)}")
    _require(layout is None or (isinstance(layout, str) and layout in packing.ALL_LAYOUTS),
             f"{where}: layout must be null or one of {packing.ALL_LAYOUTS}, got {_kind(layout)}")
    _require(dtype != "int8" or layout is not None, f"{where}: an int8 tensor needs a layout {packing.ALL_LAYOUTS}")
    scale, zp = entry.get("scale"), entry.get("zero_point")
    _require(scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool)
                               and math.isfinite(scale) and scale > 0),
             f"{where}: scale must be null or a finite positive number, got {_kind(scale)}")
    _require(zp is None or (_is_int(zp) and -128 <= zp <= 127),
             f"{where}: zero_point must be null or an integer in [-128, 127], got {_kind(zp)}")
    try:
        return TensorSpec(shape, dtype, layout, None if scale is None else float(scale), zp)
    except ValueError as e:
        raise ProgramFileError(f"{where}: {e}") from None


def _node(i, entry) -> Node:
    where = f"node {i}"
    _keys(_typed(entry, dict, where), ("op", "inputs", "outputs"), ("attrs", "name"), where)
    name = entry.get("name", "")
    _typed(name, str, f"{where}: name")
    where = f"node {i} ({name!r})" if name else where
    op = _typed(entry["op"], str, f"{where}: op")
    op = OP_ALIASES.get(op, op)
    attrs = _typed(entry.get("attrs", {}), dict, f"{where}: attrs")
    return Node(op, _names(entry["inputs"], f"{where}: inputs"), _names(entry["outputs"], f"{where}: outputs"),
                dict(attrs), name)


def _constant_entry(name, entry, tensors, where=None) -> dict:
    where = where or f"constant {name!r}"
    _keys(_typed(entry, dict, where), ("file", "dtype", "shape", "sha256"), (), where)
    _require(name in tensors, f"{where} has no tensor spec")
    spec = tensors[name]
    _require(isinstance(entry["file"], str) and entry["file"] != MANIFEST,
             f"{where}: file must name a .npy entry, got {_kind(entry['file'])}")
    _require(entry["dtype"] == spec.dtype and entry["dtype"] in _CONST_DTYPES,
             f"{where}: dtype {_kind(entry['dtype'])}, its tensor spec says {spec.dtype!r}")
    _require(check_shape(entry["shape"], f"{where}: shape") == spec.shape,
             f"{where}: shape {entry['shape']}, its tensor spec says {list(spec.shape)}")
    _require(isinstance(entry["sha256"], str) and _SHA256.fullmatch(entry["sha256"]),
             f"{where}: sha256 must be 64 hex digits, got {_kind(entry['sha256'])}")
    return entry


def _symbols(value) -> dict:
    """The dynamic dims' bounds: {symbol: [min, max]} (Program.validate checks their order)."""
    out = {}
    for sym, bounds in _typed(value, dict, "symbols").items():
        _require(sym.isidentifier(), f"symbols: {sym!r} is not a symbol name")
        _require(isinstance(bounds, list) and len(bounds) == 2 and all(_is_int(b) for b in bounds),
                 f"symbols: {sym!r} must be [min, max] integers, got {_kind(bounds)}")
        out[sym] = (int(bounds[0]), int(bounds[1]))
    return out


def _fallback(value) -> list:
    where = "fallback"
    for i, f in enumerate(_typed(value, list, where)):
        _require(isinstance(f, list) and len(f) == 2 and all(isinstance(s, str) for s in f),
                 f"{where}[{i}] must be [op, reason], got {_kind(f)}")
    return [tuple(f) for f in value]


# -- reading the zip -------------------------------------------------------------------------

class _Archive:
    """The zip, read defensively: names unique, each entry's size capped before it is
    inflated, stored or deflated only, every zip/zlib error a ProgramFileError."""

    def __init__(self, zf: zipfile.ZipFile):
        self.zf = zf
        names = Counter(i.filename for i in zf.infolist())
        for name, n in names.items():
            _require(n == 1, f"the archive holds {name!r} {n} times")
        self.infos = {i.filename: i for i in zf.infolist()}

    def read(self, name, limit: int, what: str) -> bytes:
        info = self.infos.get(name)
        _require(info is not None, f"{what} is missing (no {name} in the archive)")
        _require(not info.flag_bits & 0x1, f"{what} is encrypted")
        _require(info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED),
                 f"{what} uses zip compression method {info.compress_type}; vkq writes stored or deflated entries")
        _require(info.file_size <= limit, f"{what} claims {info.file_size} bytes, more than the {limit} it can hold")
        try:
            return self.zf.read(info)     # reads at most file_size bytes, and checks the CRC
        except _ZIP_ERRORS as e:
            raise ProgramFileError(f"{what} is damaged or truncated ({type(e).__name__}: {e})") from None


def _parse_manifest(data: bytes) -> dict:
    def no_duplicates(pairs):
        obj = dict(pairs)
        if len(obj) != len(pairs):
            twice = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
            raise ProgramFileError(f"{MANIFEST} has the key {twice!r} twice in one object")
        return obj
    try:
        manifest = json.loads(data.decode("utf-8"), object_pairs_hook=no_duplicates)
    except ProgramFileError:
        raise
    except (ValueError, RecursionError) as e:     # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ProgramFileError(f"{MANIFEST} is not valid JSON ({type(e).__name__}: {e})") from None
    _require(isinstance(manifest, dict), f"{MANIFEST} must hold a JSON object, got {_kind(manifest)}")
    return manifest


def _check_version(manifest: dict) -> int:
    fmt = manifest.get("format")
    _require(fmt == FORMAT, f"not a vkq program file (format {fmt!r})")
    version = manifest.get("version")
    _require(_is_int(version) and version >= 1, f"program file version {version!r} is not a version number")
    _require(version <= VERSION, f"program file version {version} is newer than this vkq reads "
             f"(versions 1 to {VERSION}); update vkq to load it")
    if version >= 2:
        _require("digest" in manifest, f"{MANIFEST} has no digest")
        stored = manifest["digest"]
        _require(isinstance(stored, str) and stored.startswith("sha256:"),
                 f"{MANIFEST}: digest must be 'sha256:<64 hex digits>', got {_kind(stored)}")
        try:
            actual = digest(manifest)
        except (ValueError, RecursionError) as e:
            raise ProgramFileError(f"{MANIFEST} cannot be digested ({e})") from None
        _require(stored == actual, "the program does not match its digest: the file was edited or corrupted "
                 "after it was saved")
    return version


def _program_from(manifest: dict, version: int, archive: _Archive) -> Program:
    top = ("format", "version", "tensors", "nodes", "inputs", "outputs", "constants")
    _keys(manifest, top + (("digest",) if version >= 2 else ()),
          ("fallback", "meta", "symbols", "checks") + (("state",) if version >= 3 else ()), MANIFEST)
    tensors = {name: _tensor_spec(name, t) for name, t in _typed(manifest["tensors"], dict, "tensors").items()}
    nodes = [_node(i, n) for i, n in enumerate(_typed(manifest["nodes"], list, "nodes"))]
    inputs, outputs = _names(manifest["inputs"], "inputs"), _names(manifest["outputs"], "outputs")
    _require(outputs, "the program has no outputs")
    entries = {name: _constant_entry(name, c, tensors)
               for name, c in _typed(manifest["constants"], dict, "constants").items()}
    fallback = _fallback(manifest.get("fallback", []))
    meta = _typed(manifest.get("meta", {}), dict, "meta")
    symbols = _symbols(manifest.get("symbols", {}))
    checks = _typed(manifest.get("checks", []), list, "checks")
    _require(all(isinstance(c, str) for c in checks), "checks: every check is a condition string")

    state_entries = {}
    for name, st in _typed(manifest.get("state", {}), dict, "state").items():
        where = f"state {name!r}"
        _typed(st, dict, where)
        _require(isinstance(st.get("update"), str), f"{where} has no update tensor name")
        state_entries[name] = _constant_entry(name, {k: v for k, v in st.items() if k != "update"}, tensors, where)
    files = [c["file"] for c in list(entries.values()) + list(state_entries.values())]
    shared = {}
    for c in list(entries.values()) + list(state_entries.values()):     # (version 3: equal bytes, one file)
        _require(shared.setdefault(c["file"], c["sha256"]) == c["sha256"] and (version >= 3 or files.count(c["file"]) == 1),
                 f"two constants name the same file {c['file']!r} with different contents")
    for extra in sorted(set(archive.infos) - set(files) - {MANIFEST}):
        raise ProgramFileError(f"the archive holds an entry nothing uses: {extra!r}")
    read = {}
    def value_of(name, entry):
        key = (entry["file"], entry["dtype"], tuple(entry["shape"]))
        if key not in read:
            read[key] = _read_constant(archive, name, entry, tensors[name])
        return read[key]
    constants = {name: value_of(name, entry) for name, entry in entries.items()}
    state = {name: st["update"] for name, st in manifest.get("state", {}).items()}
    state_init = {name: value_of(name, entry).copy() for name, entry in state_entries.items()}

    program = Program(tensors, nodes, inputs, outputs, constants, fallback, dict(meta), symbols, checks,
                      state=state, state_init=state_init)
    try:
        program.validate()
    except ValueError as e:
        raise ProgramFileError(f"inconsistent program: {e}") from None
    for node in program.nodes:
        _check_call(node, program.symbols)
    return program


def _check_call(node: Node, symbols: dict) -> None:
    """The node's inputs and attrs fit its op's reference(*inputs, **attrs), the op's contract,
    and the attrs whose meaning is fixed by their name hold values of that meaning."""
    from .registry import get_op
    signature = inspect.signature(get_op(node.op).reference)
    params = signature.parameters
    try:
        signature.bind(*node.inputs, **node.attrs)
    except TypeError as e:
        raise ProgramFileError(f"node {node.name!r}: its inputs and attrs do not fit op {node.op!r} ({e})") from None
    for key, value in node.attrs.items():
        kind = ATTR_KINDS.get(key)
        if kind is not None and not (value is None and key in params and params[key].default is None):
            what = _attr_fault(value, *kind, symbols)
            _require(what is None, f"node {node.name!r} ({node.op}): attr {key!r} must be {what}, got {_kind(value)}")
    a = node.attrs
    if _is_int(a.get("qmin")) and _is_int(a.get("qmax")):
        _require(a["qmin"] <= a["qmax"], f"node {node.name!r} ({node.op}): qmin {a['qmin']} > qmax {a['qmax']}")


# Attrs whose name fixes their meaning in every op that takes them: (kind, lowest, highest, one
# value or a list of them). An int may be an expression {"expr": ...} in a dynamic program. The
# shaders take these as 32-bit push or specialization constants, and an int8 op's zero points
# and clamp as int8 values: a file outside these ranges would compute something else there.
_INT8, _INT32, _SIZE = (-128, 127), (-2 ** 31, 2 ** 31 - 1), (0, MAX_ELEMENTS)
ATTR_KINDS = {
    **{k: ("int", *_INT8, False) for k in ("a_zp", "b_zp", "x_zp", "out_zp", "in_zp", "zero_point", "qmin",
                                            "qmax")},
    "in_zps": ("int", *_INT8, True),
    **{k: ("int", *_INT32, False) for k in ("a_mult", "b_mult", "multiplier", "shift")},
    **{k: ("int", *_INT32, True) for k in ("multipliers", "shifts")},
    **{k: ("int", 1, MAX_ELEMENTS, True) for k in ("stride", "dilation", "kernel")},
    "groups": ("int", 1, MAX_ELEMENTS, False),
    **{k: ("int", *_SIZE, True) for k in ("padding", "output_size", "out_size")},
    "shape": ("int", -1, MAX_ELEMENTS, True),        # (reshape's and expand's -1: the size it keeps or infers)
    **{k: ("positive", 0, math.inf, False) for k in ("scale", "x_scale", "out_scale")},
    "eps": ("number", 0, math.inf, False),
}


def _attr_fault(value, kind, lo, hi, many, symbols) -> str | None:
    """What the value should have been, or None where it is one (a list of them where many)."""
    one = {"int": f"an integer in [{lo}, {hi}]", "positive": "a finite number > 0",
           "number": f"a finite number >= {lo}"}[kind]
    want = f"a list of {one.removeprefix('an ').removeprefix('a ')}s" if many else one
    if many and not isinstance(value, list):
        return want
    for v in value if many else [value]:
        if kind == "int" and isinstance(v, dict) and set(v) == {"expr"}:      # a symbolic size
            try:
                symbolic.check(v["expr"], symbols)
            except symbolic.SymbolicError:
                return want
        elif kind == "int" and not (_is_int(v) and lo <= v <= hi):
            return want
        elif kind != "int" and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                    and (v > 0 if kind == "positive" else v >= lo)):
            return want
    return None


def _read_constant(archive: _Archive, name, entry, spec: TensorSpec) -> np.ndarray:
    what = f"constant {name!r}"
    nbytes = math.prod(spec.shape) * np.dtype(spec.dtype).itemsize
    data = archive.read(entry["file"], nbytes + _NPY_HEADER_MAX, what)
    _require(hashlib.sha256(data).hexdigest() == entry["sha256"],
             f"{what} does not match its checksum (corrupted)")
    try:
        value = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, EOFError, OSError, SyntaxError) as e:
        raise ProgramFileError(f"{what} is not a valid .npy array ({e})") from None
    _require(isinstance(value, np.ndarray) and value.dtype.name == spec.dtype and value.shape == spec.shape,
             f"{what} holds {getattr(value, 'dtype', '?')}{list(getattr(value, 'shape', ()))}, "
             f"the manifest says {spec.dtype}{list(spec.shape)}")
    return value


def load_program(path) -> Program:
    """Read and fully check a .vkq file; raise ProgramFileError on anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no program file at {path}")
    with open(path, "rb") as f:      # closed on every error below
        try:
            zf = zipfile.ZipFile(f)
        except _ZIP_ERRORS as e:
            raise ProgramFileError(f"{path}: not a vkq program file (not a zip archive, or truncated: "
                                   f"{type(e).__name__}: {e})") from None
        with zf:
            try:
                archive = _Archive(zf)
                _require(MANIFEST in archive.infos, f"no {MANIFEST} inside: not a vkq program file")
                manifest = _parse_manifest(archive.read(MANIFEST, MAX_MANIFEST_BYTES, MANIFEST))
                version = _check_version(manifest)
                return _program_from(manifest, version, archive)
            except ProgramFileError as e:
                raise ProgramFileError(f"{path}: {e}") from None
