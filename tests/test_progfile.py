"""The .vkq program file: round trip, and every kind of damage refused with a message.

A file cannot lie: any edit of a byte the program depends on is refused (the digest and the
constants' checksums), and a file that a (buggy) writer signed anyway is checked for types,
bounds and names. The fuzz test at the end throws a few hundred mutations of every kind at it.
"""
import io
import json
import os
import struct
import warnings
import zipfile

import numpy as np
import pytest

from vkq import progfile
from vkq.demo import roundtrip_program
from vkq.executor import VulkanExecutor, memory_aliases, plan_memory, run_reference
from vkq.ops.linear import linear_q8_params
from vkq.program import Node, Program, TensorSpec
from vkq.progfile import ProgramFileError, load_program, save_program
from vkq.runtime import CompiledProgram

from oputil import run_cli_without_torch


def _program_with_constant():
    """quantize -> repack with a constant riding along (as weights do)."""
    p = roundtrip_program((2, 5, 3, 7), 0.05, 3, "4W4C", "4H4W")
    p.tensors["w"] = TensorSpec((3, 4), "int32")
    p.constants["w"] = np.arange(12, dtype=np.int32).reshape(3, 4)
    p.meta["model"] = "roundtrip"
    return p


def _small_program():
    """float x (3, 7) -> quantize -> linear_q8 (int8 weights, float64 bias, int32 multiplier/shift)
    -> dequantize -> + a float32 constant: every constant dtype, attrs of every JSON kind."""
    rng = np.random.default_rng(5)
    x_scale, out_scale, w_scales = 0.05, 0.09, rng.uniform(0.004, 0.01, 5)
    bias, m, s, qmin, qmax = linear_q8_params(x_scale, w_scales, out_scale, rng.normal(0, 0.3, 5), "relu", -20)
    q8 = lambda shape, scale, zp: TensorSpec(shape, "int8", "4H4W", scale, zp)
    tensors = {"x": TensorSpec((3, 7)), "q": q8((3, 7), x_scale, 3), "w": TensorSpec((5, 7), "int8", "4H4W"),
               "b": TensorSpec((5,), "float64"), "m": TensorSpec((5,), "int32"), "s": TensorSpec((5,), "int32"),
               "h": q8((3, 5), out_scale, -20), "f": TensorSpec((3, 5)), "c": TensorSpec((3, 5)),
               "y": TensorSpec((3, 5))}
    constants = {"w": rng.integers(-127, 128, (5, 7)).astype(np.int8), "b": bias, "m": m, "s": s,
                 "c": rng.normal(0, 1, (3, 5)).astype(np.float32)}
    nodes = [Node("quantize", ["x"], ["q"], {"scale": x_scale, "zero_point": 3}),
             Node("linear_q8", ["q", "w", "b", "m", "s"], ["h"], {"x_zp": 3, "out_zp": -20, "qmin": qmin, "qmax": qmax}),
             Node("dequantize", ["h"], ["f"], {"scale": out_scale, "zero_point": -20}),
             Node("add", ["f", "c"], ["y"], {"alpha": 1})]
    return Program(tensors, nodes, ["x"], ["y"], constants, [("aten.add", "for the report")],
                   {"model": "small", "passes": ["a", "b"]})


_X = np.random.default_rng(6).normal(0, 2, (3, 7)).astype(np.float32)


def test_save_load_roundtrip(tmp_path):
    p = _program_with_constant()
    path = save_program(p, tmp_path / "m.vkq")
    q = load_program(path)
    assert [n.op for n in q.nodes] == [n.op for n in p.nodes] and q.meta == {"model": "roundtrip"}
    np.testing.assert_array_equal(q.constants["w"], p.constants["w"])
    x = np.random.default_rng(0).normal(0, 2, (2, 5, 3, 7)).astype(np.float32)
    np.testing.assert_array_equal(run_reference(q, x), run_reference(p, x))
    m = _manifest(path)
    assert m["version"] == 3 and m["digest"] == progfile.digest(m)



@pytest.mark.parametrize("shape, first, second", [((2, 3, 4, 5, 6), "ROW", "ROW"), ((3, 5, 7), "ROW", "4H4W"),
                                                  ((1, 6, 3, 5), "4W4C", "ROW")])
def test_row_layout_tensors_save_and_load(device, tmp_path, shape, first, second):
    """int8 tensors in the ROW layout (every rank-5+ int8 tensor: Swin's windows, video) were
    written by save but refused by load ("layout must be ... 4W4C, 4H4W")."""
    p = roundtrip_program(shape, 0.05, -3, first, second)
    q = load_program(save_program(p, tmp_path / "row.vkq"))
    assert (q.tensors["q"].layout, q.tensors["r"].layout) == (first, second)
    x = np.random.default_rng(3).normal(0, 2, shape).astype(np.float32)
    want = run_reference(p, x)
    np.testing.assert_array_equal(run_reference(q, x), want)
    np.testing.assert_array_equal(CompiledProgram(q, device)(x), want)

# -- editing files ----------------------------------------------------------------------------

def _entries(path):
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def _manifest(path):
    return json.loads(dict(_entries(path))["manifest.json"])


def _zip(entries, out=None, compression=zipfile.ZIP_DEFLATED):
    """entries: (name, bytes) or (ZipInfo, bytes). Returns the bytes, or writes them to out."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # "Duplicate name": on purpose
        with zipfile.ZipFile(buf, "w", compression=compression) as z:
            for name, data in entries:
                z.writestr(name, data)
    if out is None:
        return buf.getvalue()
    out.write_bytes(buf.getvalue())
    return out


def _signed(m, version=2):
    """The manifest as a writer would sign it: version 2 with a fresh digest, or version 1."""
    m = json.loads(json.dumps(m))
    m.pop("digest", None)
    m["version"] = version
    if version >= 2:
        m["digest"] = progfile.digest(m)
    return m


def _rewrite(path, out, edit_manifest=None, drop=None, replace=None, resign=True, version=2):
    """Copy a program file with its manifest edited (and signed again unless resign=False),
    an entry dropped or replaced."""
    entries = []
    for name, data in _entries(path):
        if name == drop:
            continue
        if name == "manifest.json" and (edit_manifest or version != 2):
            m = json.loads(data)
            if edit_manifest:
                edit_manifest(m)
            data = json.dumps(_signed(m, version) if resign else m).encode()
        entries.append((name, (replace or {}).get(name, data)))
    return _zip(entries, out)


@pytest.fixture
def saved(tmp_path):
    return save_program(_program_with_constant(), tmp_path / "good.vkq")


@pytest.fixture
def small(tmp_path):
    return save_program(_small_program(), tmp_path / "small.vkq")


# -- what is refused, and what it says ---------------------------------------------------------

def test_truncated_file_is_refused(saved, tmp_path):
    bad = tmp_path / "trunc.vkq"
    bad.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    with pytest.raises(ProgramFileError, match="not a zip archive, or truncated|damaged"):
        load_program(bad)


def test_not_a_program_is_refused(tmp_path):
    bad = tmp_path / "x.vkq"
    bad.write_text("hello")
    with pytest.raises(ProgramFileError, match="not a vkq program file"):
        load_program(bad)
    with pytest.raises(ProgramFileError, match="no manifest.json inside"):
        load_program(_zip([("other.txt", b"hi")], tmp_path / "y.vkq"))


@pytest.mark.parametrize("version, message", [
    (4, r"version 4 is newer than this vkq reads \(versions 1 to 3\); update vkq"),
    (99, "version 99 is newer"), (0, "version 0 is not a version number"),
    ("2", "version '2' is not a version number"), (True, "version True is not"), (None, "version None")])
def test_wrong_version_is_refused(saved, tmp_path, version, message):
    bad = _rewrite(saved, tmp_path / "v.vkq", edit_manifest=lambda m: m.update(version=version), resign=False)
    with pytest.raises(ProgramFileError, match=message):
        load_program(bad)


def test_missing_weight_is_refused(saved, tmp_path):
    bad = _rewrite(saved, tmp_path / "m.vkq", drop="constants/000000.npy")
    with pytest.raises(ProgramFileError, match=r"constant 'w' is missing \(no constants/000000.npy"):
        load_program(bad)


def test_corrupted_weight_is_refused(saved, tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.zeros((3, 4), np.int32))
    bad = _rewrite(saved, tmp_path / "c.vkq", replace={"constants/000000.npy": buf.getvalue()})
    with pytest.raises(ProgramFileError, match="constant 'w' does not match its checksum"):
        load_program(bad)


def test_an_edited_number_that_still_parses_is_refused(small, tmp_path):
    """The silent wrong answer of version 1: one digit of a scale changed. The digest sees it."""
    text = dict(_entries(small))["manifest.json"].decode()
    edited = text.replace('"scale": 0.09', '"scale": 0.08', 1)
    assert edited != text
    bad = _zip([(n, edited.encode() if n == "manifest.json" else d) for n, d in _entries(small)], tmp_path / "e.vkq")
    with pytest.raises(ProgramFileError, match="does not match its digest: the file was edited or corrupted"):
        load_program(bad)
    # the same file signed anyway runs a different program: that is what the digest is for
    resigned = _rewrite(small, tmp_path / "r.vkq", edit_manifest=lambda m: m["nodes"][2]["attrs"].update(scale=0.08))
    assert not np.array_equal(run_reference(load_program(resigned), _X), run_reference(_small_program(), _X))


@pytest.mark.parametrize("edit", [
    lambda m: m["nodes"].reverse(), lambda m: m["inputs"].append("x"), lambda m: m.pop("digest"),
    lambda m: m.update(digest="sha256:" + "0" * 64), lambda m: m.update(digest=7),
    lambda m: m["tensors"]["q"].update(zero_point=4), lambda m: m["meta"].update(model="other"),
    lambda m: m.update(tensors=dict(reversed(m["tensors"].items())))])
def test_every_manifest_edit_is_refused_by_the_digest(small, tmp_path, edit):
    bad = _rewrite(small, tmp_path / "e.vkq", edit_manifest=edit, resign=False)
    with pytest.raises(ProgramFileError, match="digest"):
        load_program(bad)


def _dig(path):
    """m -> the object at path (keys and indices), for edits like ("tensors", "x", "shape")."""
    def get(m):
        for k in path:
            m = m[k]
        return m
    return get


# (edit of a manifest that is then signed as if a writer made it, what the refusal says)
MALFORMED = [
    (lambda m: m["tensors"]["w"].update(shape=[7, 5]), r"constant 'w': shape \[5, 7\], its tensor spec says \[7, 5\]"),
    (lambda m: m["constants"]["w"].update(shape=[7, 5]), r"constant 'w': shape \[7, 5\], its tensor spec"),
    (lambda m: m["nodes"][0].update(op="frobnicate"), "unknown op 'frobnicate'"),
    (lambda m: m["nodes"][1].update(inputs=["nowhere", "w", "b", "m", "s"]), "reads 'nowhere' before it is produced"),
    (lambda m: m["nodes"][2].update(outputs=["nowhere"]), "writes 'nowhere', which has no spec"),
    (lambda m: m["nodes"][2].update(outputs=["q"]), "writes 'q', which is already defined"),
    (lambda m: m.update(inputs=["x", "x"]), "input is named twice"),
    (lambda m: m.update(outputs=[]), "no outputs"),
    (lambda m: m.update(outputs=["nowhere"]), "output 'nowhere' is never produced"),
    (lambda m: m["tensors"].update(x=[3, 7]), "tensor 'x' must be an object, got a list"),
    (lambda m: m["tensors"]["x"].update(shape="3,7"), "tensor 'x': shape must be a list, got a string"),
    (lambda m: m["tensors"]["x"].update(shape={"0": 3}), "shape must be a list, got an object"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(0, -1), r"shape\[0\] must be a non-negative integer"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(0, 2**40), r"shape\[0\] must be a non-negative integer up to"),
    (lambda m: m["tensors"]["x"].update(shape=[2**20, 2**20]), "has more than 2147483647 elements"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(1, 7.0), r"shape\[1\] must be .*got a number 7.0"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(1, "s0"), r"'s0' uses undeclared symbol\(s\) s0"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(1, "__import__('os')"), r"shape\[1\]: .* is not integer arithmetic"),
    (lambda m: m.update(symbols={"s0": [4, 2]}), r"symbol 's0' has bounds"),
    (lambda m: m["nodes"][1]["attrs"].update(x_zp=300), r"node 'linear_q8:h' \(linear_q8\): attr 'x_zp' must be an "
                                                         r"integer in \[-128, 127\], got an integer 300"),
    (lambda m: m["nodes"][1]["attrs"].update(out_zp=None), "attr 'out_zp' must be an integer in"),
    (lambda m: m["nodes"][1]["attrs"].update(qmin=127, qmax=0), r"qmin 127 > qmax 0"),
    (lambda m: m["nodes"][0]["attrs"].update(scale=0.0), r"attr 'scale' must be a finite number > 0, got a number 0.0"),
    (lambda m: m["nodes"][2]["attrs"].update(scale=float("inf")), r"attr 'scale' must be a finite number > 0"),
    (lambda m: m["nodes"][0]["attrs"].update(zero_point=[1]), r"attr 'zero_point' must be an integer in"),
    (lambda m: m["meta"].update(symbol_names=[1]), "meta symbol_names must map symbols to Dim names"),
    (lambda m: m["meta"].update(symbol_names={"s0": ""}), "meta symbol_names must map symbols to Dim names"),
    (lambda m: m["meta"].update(output_dtypes={"y": "float8"}), "meta output_dtypes must map program outputs to"),
    (lambda m: m["meta"].update(output_dtypes={"x": "bool"}), "meta output_dtypes must map program outputs to"),
    (lambda m: m["meta"].update(output_dtypes=["bool"]), "meta output_dtypes must map program outputs to"),
    (lambda m: m.update(checks="s0 != 1"), "checks must be a list, got a string"),
    (lambda m: m.update(checks=[1]), "checks: every check is a condition string"),
    (lambda m: m.update(checks=["s0 != 1"]), r"'s0 != 1' uses undeclared symbol\(s\) s0"),
    (lambda m: m.update(checks=["__import__('os')"]), "is not a comparison of integer expressions"),
    (lambda m: m.update(checks=["1 < 2 < 3"]), "is not a comparison of integer expressions"),
    (lambda m: m["tensors"]["x"]["shape"].__setitem__(1, True), r"shape\[1\] must be .*got a boolean"),
    (lambda m: m["tensors"]["x"].update(dtype="float16"), "tensor 'x': dtype must be one of"),
    (lambda m: m["tensors"]["q"].update(layout="NCHW"), "tensor 'q': layout must be null or one of"),
    (lambda m: m["tensors"]["q"].update(layout=None), "tensor 'q': an int8 tensor needs a layout"),
    (lambda m: m["tensors"]["q"].update(scale=float("nan")), "tensor 'q': scale must be null or a finite positive"),
    (lambda m: m["tensors"]["q"].update(scale=-0.5), "scale must be null or a finite positive"),
    (lambda m: m["tensors"]["q"].update(zero_point=300), r"zero_point must be null or an integer in \[-128, 127\]"),
    (lambda m: m["tensors"]["q"].update(colour="red"), "tensor 'q' has an unknown key 'colour'"),
    (lambda m: m["tensors"]["q"].pop("dtype"), "tensor 'q' has no 'dtype'"),
    (lambda m: m.update(nodes={}), "nodes must be a list, got an object"),
    (lambda m: m["nodes"].__setitem__(1, "linear_q8"), "node 1 must be an object"),
    (lambda m: m["nodes"][0].update(attrs=[]), r"node 0 \('quantize.*'\): attrs must be an object"),
    (lambda m: m["nodes"][0].update(attrs={}), r"do not fit op 'quantize' \(missing a required (keyword-only )?argument: 'scale'\)"),  # 3.12 says keyword-only
    (lambda m: m["nodes"][0]["attrs"].update(colour=1), "do not fit op 'quantize'.*unexpected keyword argument 'colour'"),
    (lambda m: m["nodes"][1]["inputs"].pop(), "do not fit op 'linear_q8'"),
    (lambda m: m["nodes"][1]["inputs"].__setitem__(0, 3), r"inputs\[0\] must be a string, got an integer 3"),
    (lambda m: m["nodes"][1].update(name=None), "node 1: name must be a string, got null"),
    (lambda m: m.update(inputs="x"), "inputs must be a list, got a string"),
    (lambda m: m["constants"]["w"].update(sha256="00"), "constant 'w': sha256 must be 64 hex digits"),
    (lambda m: m["constants"]["w"].pop("dtype"), "constant 'w' has no 'dtype'"),
    (lambda m: m["constants"]["w"].update(dtype="float32"), "constant 'w': dtype .*its tensor spec says 'int8'"),
    (lambda m: m["constants"]["w"].update(file="manifest.json"), "constant 'w': file must name a .npy entry"),
    (lambda m: m["constants"]["w"].update(file="constants/000001.npy"), "two constants name the same file"),
    (lambda m: m["constants"].update(nowhere=m["constants"].pop("w")), "constant 'nowhere' has no tensor spec"),
    (lambda m: m.update(constants=[]), "constants must be an object, got a list"),
    (lambda m: m.update(extra=1), "manifest.json has an unknown key 'extra'"),
    (lambda m: m.pop("tensors"), "manifest.json has no 'tensors'"),
    (lambda m: m.update(fallback=[["aten.add"]]), r"fallback\[0\] must be \[op, reason\]"),
    (lambda m: m.update(meta=[]), "meta must be an object, got a list"),
    (lambda m: m.update(format="onnx"), "not a vkq program file"),
]


@pytest.mark.parametrize("version", [2, 1])
@pytest.mark.parametrize("edit, message", MALFORMED)
def test_malformed_manifest_is_refused_with_its_reason(small, tmp_path, edit, message, version):
    """What a buggy writer could sign (version 2) or an old file hold (version 1, no digest)."""
    bad = _rewrite(small, tmp_path / "b.vkq", edit_manifest=edit, version=version)
    with pytest.raises(ProgramFileError, match=message):
        load_program(bad)


def test_version_1_files_still_load(small, tmp_path):
    old = _rewrite(small, tmp_path / "v1.vkq", version=1)
    assert "digest" not in _manifest(old) and _manifest(old)["version"] == 1
    np.testing.assert_array_equal(run_reference(load_program(old), _X), run_reference(_small_program(), _X))
    with pytest.raises(ProgramFileError, match="unknown key 'digest'"):    # version 1 has none
        load_program(_rewrite(small, tmp_path / "v1d.vkq", edit_manifest=lambda m: m.update(version=1), resign=False))
    bad = dict(_entries(old))
    c = bytearray(bad["constants/000000.npy"])
    c[-1] ^= 0x10
    bad["constants/000000.npy"] = bytes(c)
    with pytest.raises(ProgramFileError, match="constant 'w' does not match its checksum"):
        load_program(_zip(bad.items(), tmp_path / "v1c.vkq"))


def _central_directory(data: bytes):
    """Offsets of the central directory headers of a zip's bytes."""
    eocd = data.rfind(b"PK\x05\x06")
    count, _, pos = struct.unpack_from("<HII", data, eocd + 10)
    offsets = []
    for _ in range(count):
        offsets.append(pos)
        nlen, elen, clen = struct.unpack_from("<HHH", data, pos + 28)
        pos += 46 + nlen + elen + clen
    return offsets


def _patch_central(data: bytes, index: int, fmt: str, at: int, value) -> bytes:
    """Set a field of the index-th central directory header (flags +8, method +10, size +24)."""
    out = bytearray(data)
    struct.pack_into(fmt, out, _central_directory(data)[index] + at, value)
    return bytes(out)


def _non_utf8_name(data: bytes) -> bytes:
    """The last entry's name made invalid UTF-8 in both headers, with the UTF-8 flag set."""
    out = bytearray(data)
    pos = _central_directory(data)[-1]
    local = struct.unpack_from("<I", out, pos + 42)[0]
    for header, name_at, flags_at in ((pos, 46, 8), (local, 30, 6)):
        struct.pack_into("<H", out, header + flags_at, struct.unpack_from("<H", out, header + flags_at)[0] | 0x800)
        out[header + name_at] = 0xFF
    return bytes(out)


def test_archive_tricks_are_refused(small, tmp_path):
    entries = _entries(small)
    good = small.read_bytes()
    cases = {
        "more than once|2 times": _zip(entries + [entries[1]]),
        "2 times": _zip(entries + [("manifest.json", b"{}")]),
        "an entry nothing uses: 'constants/evil.npy'": _zip(entries + [("constants/evil.npy", b"x")]),
        "compression method 12": _zip(entries, compression=zipfile.ZIP_BZIP2),
        "compression method 14": _zip(entries, compression=zipfile.ZIP_LZMA),
        "is encrypted": _patch_central(good, 0, "<H", 8, 1),
        "claims 4294967295 bytes, more than the 67108864": _patch_central(good, 0, "<I", 24, 2**32 - 1),
        "claims .* bytes, more than the .* it can hold": _patch_central(good, 2, "<I", 24, 10**9),
        "not a zip archive.*UnicodeDecodeError": _non_utf8_name(good),
    }
    for message, data in cases.items():
        path = tmp_path / "t.vkq"
        path.write_bytes(data)
        with pytest.raises(ProgramFileError, match=message):
            load_program(path)


def test_zip_bomb_is_refused_before_it_inflates(small, tmp_path):
    """80 MiB of spaces inside valid JSON (same content, same digest) deflate to ~80 KB."""
    entries = dict(_entries(small))
    entries["manifest.json"] = entries["manifest.json"][:1] + b" " * (80 << 20) + entries["manifest.json"][1:]
    bomb = _zip(entries.items(), tmp_path / "bomb.vkq")
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(ProgramFileError, match=r"manifest.json claims 8388\d+ bytes, more than the 67108864"):
        load_program(bomb)


def test_failed_loads_leave_no_file_open(small, tmp_path):
    bad = [tmp_path / f"{i}.vkq" for i in range(3)]
    bad[0].write_bytes(small.read_bytes()[:-30])
    _rewrite(small, bad[1], edit_manifest=lambda m: m.update(nodes={}))
    _rewrite(small, bad[2], replace={"constants/000000.npy": b"\x93NUMPY"})
    for path in bad:
        with pytest.raises(ProgramFileError):
            load_program(path)
    assert not _open_files_under(tmp_path)


def _open_files_under(folder):
    fds = "/proc/self/fd"
    out = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


# -- the fuzz ---------------------------------------------------------------------------------

BAD_VALUES = ["", "s0", "nowhere", "float16", "NCHW", -1, 2**40, 1.5, True, None, float("nan"), float("inf")]


def _json_paths(m):
    """Every value's path in the manifest (attrs as a whole: their values are each op's)."""
    def walk(obj, path):
        if path:
            yield path
        if path[-1:] == ("attrs",):
            return
        items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
        for k, v in items:
            if not (path == () and k == "digest"):
                yield from walk(v, path + (k,))
    return list(walk(m, ()))


def _signed_edit(m, rng):
    """A value of the wrong type or out of range, a key renamed or dropped; signed anyway."""
    m = json.loads(json.dumps(m))
    path = _json_paths(m)[rng.integers(len(_json_paths(m)))]
    parent = _dig(path[:-1])(m)
    old, how = parent[path[-1]], rng.integers(3)
    if how == 0 or not isinstance(parent, dict):
        choices = BAD_VALUES + ([{}] if isinstance(old, list) else [[]] if isinstance(old, dict) else [[], {}])
        parent[path[-1]] = choices[rng.integers(len(choices))]
    elif how == 1:
        parent["nowhere"] = parent.pop(path[-1])
    else:
        del parent[path[-1]]
    return _signed(m, version=int(rng.choice([1, 2])))


def _mutations(path, seed=0):
    """(kind, file bytes) for a few hundred damaged copies of the program file at path."""
    rng = np.random.default_rng(seed)
    good, entries = path.read_bytes(), _entries(path)
    manifest = json.loads(dict(entries)["manifest.json"])
    text = dict(entries)["manifest.json"]
    names = [n for n, _ in entries]

    def with_entry(name, data):
        return _zip([(n, data if n == name else d) for n, d in entries])

    for _ in range(100):   # random bytes changed anywhere
        out = bytearray(good)
        for at in rng.integers(0, len(good), rng.integers(1, 5)):
            out[at] ^= int(rng.integers(1, 256))
        yield "byte flips", bytes(out)
    for _ in range(30):
        yield "truncation", good[:rng.integers(0, len(good))]
    digits = [i for i, ch in enumerate(text) if chr(ch).isdigit()]
    for _ in range(40):    # one digit of the manifest, inside a well-formed zip
        at = digits[rng.integers(len(digits))]
        new = (text[at] - 48 + int(rng.integers(1, 10))) % 10 + 48
        yield "manifest digit", with_entry("manifest.json", text[:at] + bytes([new]) + text[at + 1:])
    for _ in range(30):    # one bit of a constant, inside a well-formed zip
        name = names[rng.integers(1, len(names))]
        data = bytearray(dict(entries)[name])
        at = int(rng.integers(len(data)))
        data[at] ^= 1 << int(rng.integers(8))
        yield "constant bit", with_entry(name, bytes(data))
    for _ in range(120):
        yield "signed edit", with_entry("manifest.json", json.dumps(_signed_edit(manifest, rng)).encode())
    for i in range(45):    # the archive itself
        name, data = entries[rng.integers(len(entries))]
        kind = ["duplicate", "extra", "dropped", "method", "encrypted", "size", "utf8", "stored", "comment",
                "timestamp", "json"][i % 11]
        if kind == "duplicate":
            yield kind, _zip(entries + [(name, data if rng.integers(2) else data[:-1])])
        elif kind == "extra":
            yield kind, _zip(entries + [(f"constants/{rng.integers(1000):06d}.npy", data)])
        elif kind == "dropped":
            yield kind, _zip([e for e in entries if e[0] != name])
        elif kind == "method":
            yield kind, _zip(entries, compression=[zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA][i % 2])
        elif kind == "encrypted":
            yield kind, _patch_central(good, int(rng.integers(len(entries))), "<H", 8, 1)
        elif kind == "size":
            yield kind, _patch_central(good, int(rng.integers(len(entries))), "<I", 24,
                                       int(rng.choice([0, 1, 100, 2**31, 2**32 - 1])))
        elif kind == "utf8":
            yield kind, _non_utf8_name(good)
        elif kind == "stored":      # nothing depends on how the bytes were compressed
            yield kind, _zip(entries, compression=zipfile.ZIP_STORED)
        elif kind == "comment":     # nor on the zip comment
            out = io.BytesIO(good)
            with zipfile.ZipFile(out, "a") as z:
                z.comment = b"a comment"
            yield kind, out.getvalue()
        elif kind == "timestamp":   # nor on the entries' timestamps
            yield kind, _zip([(zipfile.ZipInfo(n, (1999, 12, 31, 23, 59, 58)), d) for n, d in entries])
        else:                       # valid JSON that is not a program: unsigned
            yield kind, with_entry("manifest.json", [b"[]", b'{"format": 1}', b"[" * 100000, b"\xff\xfe{}",
                                                     text.replace(b'"nodes"', b'"nodes": 1, "nodes"', 1)][i % 5])


def test_fuzz_every_damaged_file_is_refused_or_runs_unchanged(small, tmp_path):
    """Hundreds of mutations, fixed seed: each is refused with ProgramFileError, or (when it
    touched only bytes nothing reads) loads and gives bit-identical output. Nothing else."""
    want = run_reference(load_program(small), _X)
    outcomes = {}
    path = tmp_path / "fuzzed.vkq"
    for i, (kind, data) in enumerate(_mutations(small)):
        path.write_bytes(data)
        try:
            program = load_program(path)
        except ProgramFileError as e:
            assert str(e).startswith(str(path)) and "\n" not in str(e), (kind, i, str(e))
            outcomes.setdefault(kind, []).append("refused")
            continue
        got = run_reference(program, _X)
        assert got.dtype == want.dtype and np.array_equal(got, want), f"mutation {i} ({kind}) changed the output"
        outcomes.setdefault(kind, []).append("same")
    total = sum(len(v) for v in outcomes.values())
    refused = {k: v.count("refused") for k, v in outcomes.items()}
    assert total >= 300
    # every corruption of what the program reads is refused; the harmless ones load
    for kind in ("manifest digit", "constant bit", "duplicate", "extra", "dropped", "method", "encrypted",
                 "utf8", "json"):
        assert refused[kind] == len(outcomes[kind]), (kind, outcomes[kind])
    for kind in ("stored", "comment", "timestamp"):
        assert refused[kind] == 0, (kind, outcomes[kind])
    assert refused["byte flips"] > 0.8 * len(outcomes["byte flips"]) and refused["signed edit"] > 60
    assert not _open_files_under(tmp_path)


def test_fuzzed_files_that_load_run_unchanged_on_the_device(device, small, tmp_path):
    want = VulkanExecutor(_small_program(), device)(_X)
    np.testing.assert_array_equal(want, run_reference(_small_program(), _X))
    path, ran = tmp_path / "fuzzed.vkq", 0
    for kind, data in _mutations(small, seed=1):
        if kind not in ("byte flips", "signed edit", "size"):
            continue
        path.write_bytes(data)
        try:
            program = load_program(path)
        except ProgramFileError:
            continue
        np.testing.assert_array_equal(VulkanExecutor(program, device)(_X), want)
        ran += 1
        if ran == 4:
            break
    assert ran == 4


_VALUES = [0, -1, 1, 300, -129, 2 ** 31, 2 ** 63, 1e308, float("nan"), float("inf"), "", "s0", "x", [], {}, None,
           True, [1], [2, 2], {"expr": "s0"}, 3.5, -128, 127, 0.0, "4W4C", "int8"]


def test_signed_value_edits_are_refused_or_run_or_name_the_node(device, small, tmp_path):
    """What a buggy writer could sign: one or two values of the manifest replaced by others of
    any JSON kind (seeded). Each file is refused at load (the attrs whose name fixes their
    meaning are checked: zero points and clamps int8, multipliers int32, scales finite > 0), or
    runs, or fails at run time with a ValueError naming the node (NodeError), on the CPU and on
    the device; where both run, they agree bit for bit. Never another exception. (Not caught:
    an output spec edited to a shape its op does not make; the reference refuses it, naming the
    node, and the device trusts the specs.)"""
    import random
    rng = random.Random(7)
    manifest = json.loads(dict(_entries(small))["manifest.json"])
    paths = []

    def walk(o, at=()):
        if at and at[0] != "digest":
            paths.append(at)
        for k, v in (o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()):
            walk(v, at + (k,))
    walk(manifest)
    counts = {"refused": 0, "ran": 0, "named": 0}
    for i in range(400):
        edits = [(rng.choice(paths), rng.choice(_VALUES)) for _ in range(rng.randint(1, 2))]

        def edit(m):
            for at, value in edits:
                o = m
                for k in at[:-1]:
                    o = o[k] if isinstance(o, (dict, list)) and (k in o if isinstance(o, dict) else k < len(o)) else None
                if isinstance(o, dict) or (isinstance(o, list) and at[-1] < len(o)):
                    o[at[-1]] = value
        try:
            program = load_program(_rewrite(small, tmp_path / "v.vkq", edit_manifest=edit))
        except ProgramFileError:
            counts["refused"] += 1
            continue
        outs = []
        for run in (lambda: run_reference(program, _X), lambda: VulkanExecutor(program, device)(_X)):
            try:
                outs.append(run())
            except ValueError as e:
                assert "node '" in str(e) or "input" in str(e), (edits, str(e))
                outs.append(None)
        if all(o is not None for o in outs):
            np.testing.assert_array_equal(outs[0], outs[1], err_msg=str(edits))
        counts["ran" if outs[0] is not None else "named"] += 1
    assert counts["refused"] > 300 and counts["ran"] > 10 and counts["named"] > 0, counts


def test_cli_and_api_report_a_damaged_file_in_one_line(small, tmp_path):
    import vkq
    bad = _rewrite(small, tmp_path / "bad.vkq", edit_manifest=lambda m: m["tensors"]["q"].update(scale=0.06),
                   resign=False)
    np.save(tmp_path / "x.npy", _X)
    with pytest.raises(ProgramFileError, match="does not match its digest"):
        vkq.load(bad)
    for command in ("run", "compare"):
        res = run_cli_without_torch(command, bad, "--input", tmp_path / "x.npy")
        assert res.returncode == 2, res.stderr[-2000:]
        assert res.stderr.startswith("vkq: ") and res.stderr.count("\n") == 1 and "digest" in res.stderr, res.stderr
    future = _rewrite(small, tmp_path / "future.vkq", edit_manifest=lambda m: m.update(version=4), resign=False)
    res = run_cli_without_torch("run", future, "--input", tmp_path / "x.npy")
    assert res.returncode == 2 and "version 4 is newer than this vkq reads" in res.stderr


# -- the rest of the format -------------------------------------------------------------------

def test_memory_plan_shares_disjoint_lifetimes():
    """A chain a->b->c->d->e: b and d can share, c has b's and d's neighbours alive."""
    t = {n: TensorSpec((4, 4), "int8", "4H4W") for n in "abcde"}
    t["c"] = TensorSpec((8, 8), "int8", "4H4W")
    nodes = [Node("repack", [x], [y]) for x, y in zip("abcd", "bcde")]
    p = Program(t, nodes, ["a"], ["e"])
    plan = plan_memory(p, exclude={"a", "e"})
    assert plan["b"][0] == plan["d"][0] != plan["c"][0]


def test_memory_plan_aliases_share_a_slot_and_live_together():
    """b is a's words (an alias): one slot, alive until b's last reader, so c (written after
    a's last reader, while b still lives) cannot take it; f can once b is done."""
    t = {n: TensorSpec((4, 4), "int8", "4H4W") for n in "xabcdfe"}
    nodes = [Node("repack", ["x"], ["a"]), Node("repack", ["a"], ["b"]), Node("repack", ["x"], ["c"]),
             Node("add", ["b", "c"], ["d"]), Node("repack", ["d"], ["f"]), Node("repack", ["f"], ["e"])]
    p = Program(t, nodes, ["x"], ["e"])
    plain = plan_memory(p, exclude={"x", "e"})
    assert plain["a"][0] != plain["b"][0] and plain["c"][0] == plain["a"][0]     # a is dead at node 2
    plan = plan_memory(p, exclude={"x", "e"}, aliases={"b": "a"})
    assert plan["a"][0] == plan["b"][0] != plan["c"][0]
    assert plan["f"][0] == plan["a"][0]          # free again after node 3, where b was last read
    # an alias of an excluded tensor (a program input or output) is not planned into it
    assert plan_memory(p, exclude={"x", "a", "e"}, aliases={"b": "a"})["b"][0] is not None


def _alias_program(n, c, symbols=None):
    """quantize (n, c, 1, 1) 4W4C -> repack to (n, c) 4H4W -> repack to ROW (n*c,) ->
    reshape of the dequantized float to (n, c) -> plus one: the repacks and the reshape move
    words, the rest computes."""
    q = dict(scale=0.1, zero_point=-3)
    nc = n * c if isinstance(n, int) else f"{n}*{c}"
    dim = (lambda d: d) if isinstance(n, int) else (lambda d: d if isinstance(d, int) else {"expr": d})
    t = {"x": TensorSpec((n, c, 1, 1)), "q": TensorSpec((n, c, 1, 1), "int8", "4W4C", **q),
         "r": TensorSpec((n, c), "int8", "4H4W", **q), "s": TensorSpec((n, c), "int8", "ROW", **q),
         "u": TensorSpec((n, c), "int8", "ROW", **q), "f": TensorSpec((n, c)), "g": TensorSpec((nc,)),
         "y": TensorSpec((nc,))}
    nodes = [Node("quantize", ["x"], ["q"], q), Node("repack", ["q"], ["r"], {"shape": [dim(n), c]}),
             Node("repack", ["r"], ["s"], {"shape": [dim(n), c]}), Node("repack", ["s"], ["u"], {"shape": [dim(n), c]}),
             Node("dequantize", ["u"], ["f"], q), Node("reshape", ["f"], ["g"], {"shape": [dim(nc)]}),
             Node("add", ["g", "g"], ["y"], {})]
    return Program(t, nodes, ["x"], ["y"], symbols=symbols or {}, meta={"symbol_names": {"s0": "batch"}} if symbols else {})


@pytest.mark.parametrize("n,c,aliased", [(1, 6, {"r", "u", "g"}), (1, 16, {"r", "u", "g"}), (2, 6, {"u", "g"})])
def test_reshapes_that_move_nothing_build_no_dispatch(device, n, c, aliased):
    """A repack between equal packed images ((1, C, 1, 1) 4W4C and (1, C) 4H4W; ROW to ROW) and a
    float reshape share their input's buffer and build nothing; every other one still runs; the
    answer is the reference's either way, and with every buffer its own (vkq compare's mode)."""
    p = _alias_program(n, c)
    assert set(memory_aliases(p, p)) == aliased
    x = np.random.default_rng(n * c).normal(0, 2, (n, c, 1, 1)).astype(np.float32)
    want = run_reference(p, x)
    for host_visible_all in (False, True):
        ex = VulkanExecutor(p, device, host_visible_all=host_visible_all)
        dispatches = sum(len(seg[1].steps) for seg in ex.segments if seg[0] == "vulkan")
        assert dispatches == len(p.nodes) - (0 if host_visible_all else len(aliased))
        np.testing.assert_array_equal(ex(x), want)


def test_dynamic_program_aliases_only_shape_free_reshapes(device):
    """In a dynamic program a blocked image can be equal at one shape and not at another, so
    only float words and ROW to ROW share; every shape still gives the reference's answer."""
    p = _alias_program("s0", 6, symbols={"s0": [1, 4]})
    sized = p.specialize(p.max_bindings())
    assert set(memory_aliases(p, sized)) == {"u", "g"}
    ex = VulkanExecutor(p, device)
    for n in (1, 3, 4, 1):
        x = np.random.default_rng(n).normal(0, 2, (n, 6, 1, 1)).astype(np.float32)
        np.testing.assert_array_equal(ex(x), run_reference(p, x))


def test_arena_report(device):
    shape = (1, 8, 4, 4)
    t = {"x": TensorSpec(shape), "y": TensorSpec(shape)}
    q = dict(scale=0.1, zero_point=0)
    names = ["q0", "q1", "q2", "q3"]
    for n in names:
        t[n] = TensorSpec(shape, "int8", "4W4C", **q)
    nodes = [Node("quantize", ["x"], ["q0"], q)] + [Node("repack", [a], [b]) for a, b in zip(names, names[1:])] \
        + [Node("dequantize", ["q3"], ["y"], q)]
    prog = CompiledProgram(Program(t, nodes, ["x"], ["y"]), device)
    x = np.random.default_rng(1).normal(0, 3, shape).astype(np.float32)
    np.testing.assert_array_equal(prog(x), prog.run_reference(x))
    assert prog.memory["arena_bytes"] < prog.memory["naive_bytes"]


def test_runner_works_without_torch(device, tmp_path):
    p = roundtrip_program((1, 3, 5, 7), 0.05, -3, "4W4C", "4H4W")
    path = save_program(p, tmp_path / "r.vkq")
    x = np.random.default_rng(2).normal(0, 2, (1, 3, 5, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                "--device", device.info.name)
    assert res.returncode == 0, res.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run_reference(p, x))


def test_zero_dim_constant_keeps_its_shape(tmp_path):
    p = _program_with_constant()
    p.tensors["s"] = TensorSpec((), "float32")
    p.constants["s"] = np.array(-3.25e38, np.float32)
    q = load_program(save_program(p, tmp_path / "z.vkq"))
    assert q.constants["s"].shape == () and q.constants["s"] == np.float32(-3.25e38)


def test_cli_run_refuses_wrong_inputs_with_a_message(tmp_path):
    path = save_program(roundtrip_program((1, 3, 5, 7), 0.05, 0, "4W4C", "4H4W"), tmp_path / "r.vkq")
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy")
    assert res.returncode == 2 and "must have shape (1, 3, 5, 7)" in res.stderr
    res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--input", tmp_path / "x.npy")
    assert res.returncode == 2 and "takes 1 input(s)" in res.stderr
