"""`vkq compile`: a torch.export.save'd .pt2 (or module:function) and calibration files -> a .vkq
that `vkq run` (no torch) runs with the same bytes as the program compiled in-process, whose
reference is within one step of PT2E; and clear errors for what cannot be used."""
import contextlib
import io
import sys
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

import vkq
from vkq.calibration import ImageTransform, InputSpec, calibration_batches
from vkq.cli import main
from vkq.executor import run_reference
from vkq.progfile import load_program

from oputil import run_cli_without_torch

SHAPE = (1, 3, 21, 21)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IMAGE_ARGS = ["--resize", "23", "--crop", "21", "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD))]
TRANSFORM = ImageTransform(23, 21, MEAN, STD)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn = nn.Conv2d(3, 12, 3, padding=1), nn.BatchNorm2d(12)
        self.conv2 = nn.Conv2d(12, 20, 3, stride=2)
        self.fc = nn.Linear(20, 7)

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _small_cnn():
    torch.manual_seed(0)
    model = SmallCNN().train()
    with torch.no_grad():                 # batch-norm statistics that are not the identity
        for _ in range(3):
            model(torch.randn(8, *SHAPE[1:]) * 2 + 0.5)
    return model.eval()


def _images(folder):
    """Seven smooth random images of odd sizes, RGB and grey, PNG and JPEG."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(26, 31), (40, 23), (23, 23), (50, 61), (31, 26), (24, 29), (33, 37)]):
        small = rng.integers(0, 256, (h // 4 + 1, w // 4 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((w, h), Image.Resampling.BICUBIC)
        (img.convert("L") if i == 3 else img).save(folder / (f"{i}.jpg" if i == 5 else f"{i}.png"))
    return folder


def _run_main(*args):
    """(exit code, stdout, stderr) of `vkq ARGS` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    """The model saved as .pt2, a folder of images, the CLI's .vkq, and the same compiled in-process."""
    tmp = tmp_path_factory.mktemp("compile_cli")
    model, example = _small_cnn(), torch.randn(*SHAPE)
    pt2 = tmp / "cnn.pt2"
    torch.export.save(torch.export.export(model, (example,)), pt2)
    images = _images(tmp / "images")
    out = tmp / "cnn.vkq"
    code, stdout, stderr = _run_main("compile", pt2, "-o", out, "--calibration", images, *IMAGE_ARGS, "--no-device")
    assert code == 0, stderr[-3000:]

    batches = calibration_batches([images], [InputSpec(SHAPE, np.dtype(np.float32))], TRANSFORM, progress=False)
    calibration = [tuple(torch.from_numpy(a) for a in b) for b in batches]
    prog = vkq.compile(model, (example,), calibration)
    pt2e = vkq.quantize(model, (example,), calibration)
    x = np.random.default_rng(1).normal(0.2, 1.1, SHAPE).astype(np.float32)
    return SimpleNamespace(model=model, pt2=pt2, images=images, out=out, stdout=stdout, stderr=stderr,
                           batches=batches, prog=prog, pt2e=pt2e, x=x, tmp=tmp)


def test_compile_shows_each_stage_while_it_works(cnn, tmp_path):
    """Quantizing and lowering a large model takes minutes: stderr says which stage runs, with bars
    over the calibration batches and the passes (a log gets a line a stage, in order); --no-progress
    shows none of it, and the program is the same."""
    stages = ["vkq: exporting", "vkq: placing observers", "calibrating", "vkq: converting", "lowering",
              "vkq: translating"]
    at = [cnn.stderr.find(s) for s in stages]
    assert -1 not in at and at == sorted(at), cnn.stderr[-3000:]
    code, stdout, stderr = _run_main("compile", cnn.pt2, "-o", tmp_path / "quiet.vkq", "--calibration", cnn.images,
                                     *IMAGE_ARGS, "--no-device", "--no-progress")
    assert code == 0 and "vkq: " not in stderr and "calibrating" not in stderr, stderr[-3000:]
    quiet, loud = zipfile.ZipFile(tmp_path / "quiet.vkq"), zipfile.ZipFile(cnn.out)     # (their times differ)
    assert quiet.namelist() == loud.namelist() and all(quiet.read(n) == loud.read(n) for n in loud.namelist())


def test_compile_reports_what_it_made(cnn):
    program = load_program(cnn.out)
    assert "calibration: 7 batch(es)" in cnn.stdout
    assert f"{cnn.pt2} -> {cnn.out} (static): {len(program.nodes)} nodes" in cnn.stdout
    for op, reason in program.fallback:
        assert f"on the CPU: {op}: {reason}" in cnn.stdout
    assert len(program.nodes) == len(cnn.prog.program.nodes) and "device memory" not in cnn.stdout


def test_cli_program_runs_the_same_bytes_as_in_process(cnn, device, tmp_path):
    np.save(tmp_path / "x.npy", cnn.x)
    res = run_cli_without_torch("run", cnn.out, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                "--device", device.info.name)
    assert res.returncode == 0, res.stderr[-3000:]
    got = np.load(tmp_path / "y.npy")
    want = vkq.CompiledProgram(cnn.prog.program, device)(cnn.x)
    assert got.dtype == want.dtype and got.shape == (1, 7) and got.tobytes() == want.tobytes()


def test_cli_refuses_input_files_that_are_not_arrays_of_numbers(cnn, device, tmp_path):
    """`vkq run` / `compare` given an empty, truncated, pickled, .npz, text or complex .npy
    print one line naming the file (an empty file ended in an EOFError traceback), and
    `compare --expect` one naming a file whose size is not its output's."""
    np.save(tmp_path / "x.npy", cnn.x)
    good = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "cut.npy").write_bytes(good[: len(good) // 2])
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "both.npz", x=cnn.x)
    (tmp_path / "text.npy").write_text("0.5 0.25")
    np.save(tmp_path / "complex.npy", cnn.x.astype(np.complex64))
    for name, says in [("empty.npy", "not a .npy file"), ("cut.npy", "not a .npy file"),
                       ("objects.npy", "not a .npy file"), ("both.npz", "one .npy file per input"),
                       ("text.npy", "not a .npy file"), ("complex.npy", "complex64 values")]:
        res = run_cli_without_torch("run", cnn.out, "--input", tmp_path / name, "--device", device.info.name)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
        assert res.stderr.startswith(f"vkq: {tmp_path / name}: ") and says in res.stderr, res.stderr
    np.save(tmp_path / "want.npy", np.zeros(8, np.float32))
    res = run_cli_without_torch("compare", cnn.out, "--input", tmp_path / "x.npy", "--expect", tmp_path / "want.npy",
                                "--device", device.info.name)
    assert res.returncode == 2 and f"want.npy: 8 values, the output" in res.stderr and "has 7" in res.stderr, res.stderr


def test_cli_program_reference_is_within_one_step_of_pt2e(cnn):
    ref = run_reference(load_program(cnn.out), cnn.x)
    np.testing.assert_array_equal(ref, cnn.prog.run_reference(cnn.x))
    with torch.no_grad():
        want = cnn.pt2e(torch.from_numpy(cnn.x)).numpy()
    out_node = next(n for n in cnn.pt2e.graph.nodes if n.op == "output").args[0][0]
    assert "dequantize" in str(out_node.target)   # a quantized output: one step is its scale
    step = float(out_node.args[1])
    assert np.abs(ref - want).max() <= step * 1.0001 and np.ptp(want) > 10 * step


def test_images_are_resized_cropped_and_normalised_as_torchvision_does(cnn):
    """The grey 61x50 image: shorter side 50 -> 23 (the other int(23 * 61 / 50) = 28), centre
    21x21 crop at (round(3.5), 1), RGB, / 255, (x - mean) / std, CHW."""
    (batch,) = calibration_batches([cnn.images / "3.png"], [InputSpec(SHAPE, np.dtype(np.float32))], TRANSFORM,
                                   progress=False)
    img = Image.open(cnn.images / "3.png").convert("RGB").resize((28, 23), Image.Resampling.BILINEAR)
    a = np.asarray(img.crop((4, 1, 25, 22)), np.float32) / 255
    want = ((a - np.float32(MEAN)) / np.float32(STD)).transpose(2, 0, 1)[None]
    np.testing.assert_allclose(batch[0], want, rtol=1e-6, atol=1e-6)
    assert batch[0].dtype == np.float32 and batch[0].shape == SHAPE


MODULE = '''
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(13, 24), nn.Linear(24, 5)

    def forward(self, x):
        return self.fc2(torch.special.bessel_j0(torch.relu(self.fc1(x))))


def build():
    torch.manual_seed(3)
    return Net().eval(), (torch.randn(2, 13),)


def build_dynamic():
    model, example = build()
    return model, example, ({0: torch.export.Dim("batch", min=1, max=6)},)


def broken():
    return "not a model"
'''


def test_module_function_with_npy_calibration(device, tmp_path, monkeypatch):
    (tmp_path / "vkq_cli_test_models.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    rng = np.random.default_rng(4)
    np.save(tmp_path / "one.npy", rng.normal(0, 1, (2, 13)).astype(np.float32))
    np.save(tmp_path / "stack.npy", rng.normal(0, 1, (3, 2, 13)))           # 3 batches, float64: converted
    code, out, err = _run_main("compile", "vkq_cli_test_models:build", "-o", tmp_path / "net.vkq",
                               "--calibration", tmp_path / "one.npy", tmp_path / "stack.npy", "--device", device.info.name)
    assert code == 0, err[-3000:]
    program = load_program(tmp_path / "net.vkq")
    assert "calibration: 4 batch(es)" in out and f"device memory on {device.info.name}: intermediates" in out
    assert program.fallback and all(f"on the CPU: {op}: {reason}" in out for op, reason in program.fallback)

    from vkq_cli_test_models import build
    model, example = build()
    calibration = [(torch.from_numpy(np.load(tmp_path / "one.npy")),)] + \
                  [(torch.from_numpy(b.astype(np.float32)),) for b in np.load(tmp_path / "stack.npy")]
    x = rng.normal(0, 1, (2, 13)).astype(np.float32)
    want = vkq.compile(model, example, calibration).program
    np.testing.assert_array_equal(run_reference(program, x), run_reference(want, x))
    np.testing.assert_array_equal(vkq.CompiledProgram(program, device)(x), run_reference(want, x))
    # the file.py:function spelling names the same function
    code, out, err = _run_main("compile", tmp_path / "vkq_cli_test_models.py:build", "-o", tmp_path / "n2.vkq",
                               "--no-device", "--scheme", "dynamic")
    assert code == 0 and "(dynamic)" in out, err[-3000:]
    # a third item, torch.export's dynamic_shapes: one program for every batch up to 6
    code, out, err = _run_main("compile", "vkq_cli_test_models:build_dynamic", "-o", tmp_path / "n3.vkq", "--no-device")
    assert code == 0 and "dynamic: x (batch, 13); batch in [1, 6]" in out, (out, err[-3000:])
    from vkq_cli_test_models import build_dynamic
    want = vkq.compile(*build_dynamic()[:2], dynamic_shapes=build_dynamic()[2]).program
    for batch in (1, 5):
        x = rng.normal(0, 1, (batch, 13)).astype(np.float32)
        np.testing.assert_array_equal(run_reference(load_program(tmp_path / "n3.vkq"), x), run_reference(want, x))


@pytest.fixture(scope="module")
def no_examples_pt2(cnn):
    ep = torch.export.load(cnn.pt2)
    ep._example_inputs = None          # as a program exported and saved without them
    path = cnn.tmp / "no_examples.pt2"
    torch.export.save(ep, path)
    return path


def test_pt2_without_example_inputs_needs_input_shape(cnn, no_examples_pt2, tmp_path):
    code, _, err = _run_main("compile", no_examples_pt2, "--no-device")
    assert code == 2 and err.startswith("vkq: ") and err.count("\n") == 1
    assert "saved without example inputs; give --input-shape once per input (the program's inputs: " \
           "[1, 3, 21, 21] float32)" in err
    np.save(tmp_path / "c.npy", cnn.batches[0][0])
    code, out, err = _run_main("compile", no_examples_pt2, "--input-shape", "1,3,21,21", "--calibration",
                               tmp_path / "c.npy", "-o", tmp_path / "o.vkq", "--no-device")
    assert code == 0 and "calibration: 1 batch(es)" in out, err[-3000:]
    code, _, err = _run_main("compile", cnn.pt2, "--input-shape", "1,3,20,20", "--no-device")
    assert code == 2 and "exported for inputs of shapes [[1, 3, 21, 21]]; --input-shape gives [[1, 3, 20, 20]]" in err


def test_clear_errors(cnn, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "vkq_cli_test_models.py").write_text(MODULE)
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk.png").write_bytes(b"not a png at all")
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("hi")
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 20, 21), np.float32))
    np.save(tmp_path / "complex.npy", np.zeros(SHAPE, np.float32).astype(np.complex64))
    cases = [
        (["missing.pt2"], "missing.pt2: no such file"),
        (["missing"], "missing: no such file (MODEL is a torch.export.save'd .pt2 file, or package.module:function"),
        (["model.pt"], "model.pt: not a .pt2 file (a torch.save'd model? export the model with torch.export.export"),
        (["notes.txt"], "notes.txt: not a .pt2 file"),
        (["no_such_module:build"], "cannot import no_such_module (No module named 'no_such_module')"),
        (["vkq_cli_test_models:nothing"], "vkq_cli_test_models has no function 'nothing'"),
        (["vkq_cli_test_models:broken"], "must return (model, example_inputs) or (model, example_inputs, "
                                         "dynamic_shapes), got str"),
        ([cnn.pt2, "--calibration", "empty"], "empty: no calibration files in this folder"),
        ([cnn.pt2, "--calibration", "nowhere"], "nowhere: no such file or folder"),
        ([cnn.pt2, "--calibration", "notes.txt"], "notes.txt: not a calibration file"),
        ([cnn.pt2, "--calibration", "junk.png"], "junk.png: cannot read this image"),
        ([cnn.pt2, "--calibration", "wrong.npy"], "wrong.npy: shape (1, 3, 20, 21) does not fit the model's input "
                                                  "(1, 3, 21, 21)"),
        ([cnn.pt2, "--calibration", "complex.npy"], "dtype complex64 does not convert to the model's input dtype float32"),
        ([cnn.pt2, "--calibration", cnn.images, "--resize", "30"], "after --resize/--crop; the model's input is 21x21"),
        ([cnn.pt2, "--calibration", cnn.images, "--crop", "27"], "a 27-pixel crop does not fit the 31x26 image"),
        ([cnn.pt2, "--calibration", cnn.images, "--mean", "0.5,0.5"], "--mean has 2 values; the model's input has 3"),
    ]
    for args, message in cases:
        code, _, err = _run_main("compile", *args, "--no-device")
        assert code == 2 and message in err and err.strip().splitlines()[-1].startswith("vkq: "), (args, err)


def test_pt2_exported_in_training_mode_is_compiled_in_eval_form(tmp_path):
    """Batch norm with its running statistics and dropout off, as model.eval() runs them."""
    from vkq.modelsource import load_model
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 5, 3), nn.BatchNorm2d(5), nn.Dropout(0.4)).train()
    with torch.no_grad():
        model(torch.randn(6, 3, 9, 11) + 1)
    x = torch.randn(2, 3, 9, 11)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "train.pt2")
    gm, (example,), dims = load_model(str(tmp_path / "train.pt2"))
    with torch.no_grad():
        assert torch.equal(gm(x), model.eval()(x)) and torch.equal(example, x)
    assert gm.eval() is gm and dims is None


def test_calibration_files_of_several_kinds(cnn, tmp_path, capsys):
    import vkq.calibration as cal
    ids, mask = InputSpec((2, 9), np.dtype(np.int64)), InputSpec((2, 9), np.dtype(np.int64))
    np.savez(tmp_path / "b0.npz", np.arange(18).reshape(2, 9), np.ones((2, 9), np.int32))
    (batch,) = calibration_batches([tmp_path / "b0.npz"], [ids, mask], progress=False)
    assert [a.dtype for a in batch] == [np.int64, np.int64] and batch[1].sum() == 18
    with pytest.raises(cal.CalibrationError, match="holds 2 arrays; the model takes 1 inputs"):
        calibration_batches([tmp_path / "b0.npz"], [ids], progress=False)
    np.save(tmp_path / "s.npy", np.zeros((5, 2, 9), np.int64))
    with pytest.raises(cal.CalibrationError, match="a .npy file calibrates a one-input model; this one takes 2"):
        calibration_batches([tmp_path / "s.npy"], [ids, mask], progress=False)
    assert len(calibration_batches([tmp_path / "s.npy"], [ids], limit=3, progress=False)) == 3
    with pytest.raises(cal.CalibrationError, match=r"dtype float64 does not convert to the model's input dtype int64"):
        np.save(tmp_path / "f.npy", np.zeros((2, 9)))
        calibration_batches([tmp_path / "f.npy"], [ids], progress=False)
    # images in batches of the input's batch size: 7 images make 3 batches of 2, one is left over
    two = InputSpec((2, 3, 21, 21), np.dtype(np.float32))
    batches = calibration_batches([cnn.images], [two], TRANSFORM, progress=False)
    assert [b[0].shape for b in batches] == [(2, 3, 21, 21)] * 3 and "1 image(s) left over" in capsys.readouterr().err
    assert len(calibration_batches([cnn.images], [two], TRANSFORM, limit=2, progress=False)) == 2
    grey = InputSpec((1, 1, 21, 21), np.dtype(np.float32))
    assert calibration_batches([cnn.images / "0.png"], [grey], progress=False)[0][0].shape == (1, 1, 21, 21)
    with pytest.raises(cal.CalibrationError, match="images calibrate a model with one float input"):
        calibration_batches([cnn.images], [ids], progress=False)


def test_pt2_exported_with_dynamic_dims_compiles_to_one_program_for_every_shape(tmp_path, device):
    """A .pt2 saved from torch.export with Dims (a batch, a height, a width that is 2 * a Dim)
    compiles to a dynamic program: its Dims rebuilt from the saved symbols and range
    constraints, named after the input and dimension. `vkq run` (no torch) takes other shapes
    within the bounds and gives what the same model compiled in-process with those Dims gives;
    --static compiles the example's shape only; a dim with no upper bound is refused, naming it."""
    from torch.export import Dim
    model, example = _small_cnn(), torch.randn(2, 3, 21, 24)
    ds = ({0: Dim("b", min=1, max=4), 2: Dim("h", min=9, max=40), 3: 2 * Dim("half", min=5, max=20)},)
    pt2 = tmp_path / "dyn.pt2"
    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=ds), pt2)
    calibration = [torch.randn(3, 3, 15, 30, generator=torch.Generator().manual_seed(1))]   # (another size)
    np.save(tmp_path / "c.npy", calibration[0].numpy())
    code, stdout, stderr = _run_main("compile", pt2, "-o", tmp_path / "dyn.vkq", "--no-device", "--calibration",
                                     tmp_path / "c.npy")
    assert code == 0, stderr[-3000:]
    assert "dynamic: x (x_dim0, 3, x_dim2, 2*s" in stdout and "x_dim0 in [1, 4]" in stdout, stdout
    assert "vkq: making the program's shapes symbolic" in stderr and "lowering at a second size" in stderr, stderr
    program = load_program(tmp_path / "dyn.vkq")
    ours = vkq.compile(model, (example,), [(c,) for c in calibration], dynamic_shapes=ds)
    for shape in [(1, 3, 9, 10), (4, 3, 40, 40), (3, 3, 17, 26)]:
        x = np.random.default_rng(sum(shape)).normal(0, 1, shape).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        res = run_cli_without_torch("run", tmp_path / "dyn.vkq", "--input", tmp_path / "x.npy", "--output",
                                    tmp_path / "y.npy", "--device", device.info.name)
        assert res.returncode == 0, res.stderr[-3000:]
        np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), run_reference(program, x))
        np.testing.assert_array_equal(run_reference(program, x), run_reference(ours.program, x))
    np.save(tmp_path / "x.npy", np.ones((1, 3, 9, 10), np.float32))
    res = run_cli_without_torch("compare", tmp_path / "dyn.vkq", "--input", tmp_path / "x.npy", "--device",
                                device.info.name)      # (the shapes at this input, not the expressions)
    assert res.returncode == 0 and "int8[1, 3, 9, 10]" in res.stdout and "bit for bit" in res.stdout, res.stdout
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 9, 11), np.float32))
    res = run_cli_without_torch("run", tmp_path / "dyn.vkq", "--input", tmp_path / "x.npy", "--device", device.info.name)
    assert res.returncode == 2 and "input 'x' dimension 3 must be 2*s" in res.stderr, res.stderr

    code, stdout, _ = _run_main("compile", pt2, "-o", tmp_path / "static.vkq", "--no-device", "--static")
    assert code == 0 and "dynamic:" not in stdout and not load_program(tmp_path / "static.vkq").dynamic
    code, stdout, stderr = _run_main("compile", pt2, "-o", tmp_path / "other.vkq", "--no-device", "--input-shape",
                                     "3,3,30,32")        # an example of another shape within the Dims
    assert code == 0 and "x_dim0 in [1, 4]" in stdout, stderr[-3000:]
    code, _, stderr = _run_main("compile", pt2, "--no-device", "--input-shape", "1,3,50,24")
    assert code == 2 and "exported for inputs of shapes [['1..4', 3, '9..40', " in stderr \
        and "(input 0 dim 2 is dynamic in 9..40)" in stderr, stderr

    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=({0: Dim("b", min=1)},)), pt2)
    code, _, stderr = _run_main("compile", pt2, "-o", tmp_path / "open.vkq", "--no-device")
    assert code == 2 and "input 'x' dim0 is dynamic with no upper bound" in stderr and "--static" in stderr, stderr
