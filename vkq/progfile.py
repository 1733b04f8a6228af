"""The .vkq program file: a zip holding `manifest.json` (format, version, tensors, nodes,
inputs, outputs, fallback report) and one `.npy` per constant. No pickle anywhere: loading
a file runs no code from it. A file is checked completely before anything runs, and a
malformed one is refused with a ProgramFileError that says what is wrong.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np

from .program import Node, Program, TensorSpec

FORMAT = "vkq-program"
VERSION = 1
_CONST_DTYPES = {"int8", "int32", "float32"}


class ProgramFileError(ValueError):
    """The file is not a valid vkq program (truncated, wrong version, inconsistent...)."""


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


def save_program(program: Program, path) -> Path:
    """Write `program` to `path` (a .vkq zip). Returns the path."""
    program.validate()
    path = Path(path)
    consts = {}
    files = {}
    for i, (name, value) in enumerate(program.constants.items()):
        value = np.asarray(value)
        if value.dtype.name not in _CONST_DTYPES:
            raise TypeError(f"constant {name!r} has dtype {value.dtype}; expected one of {sorted(_CONST_DTYPES)}")
        data = _npy_bytes(value)
        fname = f"constants/{i:06d}.npy"
        files[fname] = data
        consts[name] = {"file": fname, "dtype": value.dtype.name, "shape": list(value.shape),
                        "sha256": hashlib.sha256(data).hexdigest()}
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
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest, indent=1))
        for fname, data in files.items():
            z.writestr(fname, data)
    tmp.replace(path)   # never leave a half-written program under the real name
    return path


def _require(cond, msg):
    if not cond:
        raise ProgramFileError(msg)


# Op names that files from older vkq versions use, and the op that now runs them (the float
# twins of the shape ops became one op per name for every dtype).
OP_ALIASES = {"reshape_f32": "reshape", "permute_f32": "permute", "transpose_f32": "transpose",
              "expand_f32": "expand", "cat_f32": "cat"}


def load_program(path) -> Program:
    """Read and fully check a .vkq file; raise ProgramFileError on anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no program file at {path}")
    try:
        z = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ProgramFileError(f"{path}: not a vkq program file (not a zip archive, or truncated)") from None
    with z:
        try:
            manifest = json.loads(z.read("manifest.json"))
        except KeyError:
            raise ProgramFileError(f"{path}: no manifest.json inside: not a vkq program file") from None
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise ProgramFileError(f"{path}: the file is damaged or truncated ({e})") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ProgramFileError(f"{path}: manifest.json is not valid JSON ({e})") from None
        _require(isinstance(manifest, dict) and manifest.get("format") == FORMAT,
                 f"{path}: not a vkq program (format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
        version = manifest.get("version")
        _require(version == VERSION, f"{path}: program file version {version!r}; this vkq reads version {VERSION}")
        for key in ("tensors", "nodes", "inputs", "outputs", "constants"):
            _require(key in manifest, f"{path}: manifest.json has no {key!r}")
        try:
            tensors = {n: TensorSpec(tuple(t["shape"]), t["dtype"], t.get("layout"), t.get("scale"),
                                     t.get("zero_point")) for n, t in manifest["tensors"].items()}
            nodes = [Node(OP_ALIASES.get(n["op"], n["op"]), n["inputs"], n["outputs"], dict(n.get("attrs") or {}),
                          n.get("name", "")) for n in manifest["nodes"]]
        except (KeyError, TypeError, ValueError) as e:
            raise ProgramFileError(f"{path}: malformed tensor or node entry ({e})") from None
        constants = {}
        for name, entry in manifest["constants"].items():
            _require(name in tensors, f"{path}: constant {name!r} has no tensor spec")
            try:
                data = z.read(entry["file"])
            except KeyError:
                raise ProgramFileError(f"{path}: constant {name!r} is missing ({entry.get('file')})") from None
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise ProgramFileError(f"{path}: constant {name!r} is damaged ({e})") from None
            _require(hashlib.sha256(data).hexdigest() == entry.get("sha256"),
                     f"{path}: constant {name!r} does not match its checksum (corrupted)")
            try:
                value = np.load(io.BytesIO(data), allow_pickle=False)
            except ValueError as e:
                raise ProgramFileError(f"{path}: constant {name!r} is not a valid array ({e})") from None
            _require(value.dtype.name == entry.get("dtype") and list(value.shape) == list(entry.get("shape", [])),
                     f"{path}: constant {name!r} is {value.dtype}{list(value.shape)}, "
                     f"the manifest says {entry.get('dtype')}{entry.get('shape')}")
            constants[name] = value
    program = Program(tensors, nodes, list(manifest["inputs"]), list(manifest["outputs"]), constants,
                      [tuple(f) for f in manifest.get("fallback", [])], dict(manifest.get("meta") or {}))
    try:
        program.validate()
    except ValueError as e:
        raise ProgramFileError(f"{path}: inconsistent program: {e}") from None
    return program
