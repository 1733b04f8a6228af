"""Calibration inputs from files, for `vkq compile`: `.npy`/`.npz` arrays or a folder of images.

  x.npy      one batch (the model's input shape, or another batch size), or a stack of
             batches (N, *input shape); one-input models
  x.npz      one batch of a model with several inputs: its arrays in order, one per input
  images     a folder (or files) of images for a model whose input is (N, C, H, W), C = 1 or 3:
             decoded to RGB (or grey), the shorter side resized to `resize`, the centre
             `crop` x `crop` cut out (neither: resized straight to H x W), scaled to [0, 1],
             normalised per channel ((x - mean) / std), NCHW float32, N images a batch

Each source is checked against the model's inputs and refused with a CalibrationError that
names the file and what is wrong. numpy and PIL only: no torch here.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .progress import bar

ARRAY_SUFFIXES = (".npy", ".npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


class CalibrationError(ValueError):
    """A calibration source that cannot be used, and why."""


@dataclass(frozen=True)
class InputSpec:
    """What one model input looks like: its example's shape and numpy dtype, and the dims a
    batch may size freely (the batch, and a dynamic program's dynamic dims)."""
    shape: tuple
    dtype: np.dtype
    free: frozenset = frozenset({0})

    def fits(self, shape) -> bool:
        return len(shape) == len(self.shape) and all(d in self.free or a == b
                                                     for d, (a, b) in enumerate(zip(shape, self.shape)))

    def describe(self) -> str:
        return f"({', '.join('N' if d == 0 else 'any' if d in self.free else str(n) for d, n in enumerate(self.shape))})"


@dataclass(frozen=True)
class ImageTransform:
    resize: int | None = None          # shorter side, in pixels (aspect ratio kept)
    crop: int | None = None            # centre square, in pixels
    mean: tuple = (0.0,)               # per channel (or one for all), after scaling to [0, 1]
    std: tuple = (1.0,)


def calibration_batches(sources, inputs: list[InputSpec], transform: ImageTransform = ImageTransform(),
                        limit: int | None = None, progress: bool = True) -> list[tuple]:
    """The calibration batches in `sources` (files and folders, in the order given; a folder's
    files sorted by name), as tuples of numpy arrays, one per model input; at most `limit`."""
    files = _files(sources)
    arrays = [f for f in files if f.suffix.lower() in ARRAY_SUFFIXES]
    images = [f for f in files if f.suffix.lower() in IMAGE_SUFFIXES]
    batches: list[tuple] = []
    for f in _bar(arrays, "reading calibration arrays", progress):
        batches.extend(_array_batches(f, inputs))
        if limit is not None and len(batches) >= limit:
            return batches[:limit]
    if images:
        batches.extend(_image_batches(images, inputs, transform, progress,
                                      None if limit is None else limit - len(batches)))
    return batches if limit is None else batches[:limit]


def _bar(items, desc, progress):
    return bar(items, desc, "file") if progress and items else items


def _files(sources) -> list[Path]:
    files = []
    for src in map(Path, sources):
        if src.is_dir():
            found = sorted(f for f in src.iterdir() if f.is_file() and f.suffix.lower() in ARRAY_SUFFIXES + IMAGE_SUFFIXES)
            if not found:
                raise CalibrationError(f"{src}: no calibration files in this folder (looked for "
                                       f"{', '.join(ARRAY_SUFFIXES + IMAGE_SUFFIXES)})")
            files.extend(found)
        elif src.is_file():
            if src.suffix.lower() not in ARRAY_SUFFIXES + IMAGE_SUFFIXES:
                raise CalibrationError(f"{src}: not a calibration file (.npy, .npz, or an image: "
                                       f"{', '.join(IMAGE_SUFFIXES)})")
            files.append(src)
        else:
            raise CalibrationError(f"{src}: no such file or folder")
    if not files:
        raise CalibrationError("no calibration sources given")
    return files


def _fit(a: np.ndarray, want: InputSpec, where: str) -> np.ndarray:
    """One batch for one input: same rank, the example's sizes except in the free dims (the
    batch, a dynamic dim), a dtype that converts without changing kind (float data for an
    integer input is refused)."""
    if not want.fits(a.shape):
        raise CalibrationError(f"{where}: shape {a.shape} does not fit the model's input {tuple(want.shape)} "
                               f"(a batch is {want.describe()})")
    if not np.can_cast(a.dtype, want.dtype, "same_kind"):
        raise CalibrationError(f"{where}: dtype {a.dtype} does not convert to the model's input dtype {want.dtype}")
    return a.astype(want.dtype, copy=False)


def _array_batches(path: Path, inputs: list[InputSpec]) -> list[tuple]:
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise CalibrationError(f"{path}: cannot read this array file ({e})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            arrays = [data[k] for k in data.files]
        if len(arrays) != len(inputs):
            raise CalibrationError(f"{path}: holds {len(arrays)} arrays; the model takes {len(inputs)} inputs")
        return [tuple(_fit(a, s, f"{path} [{k}]") for k, (a, s) in enumerate(zip(arrays, inputs)))]
    if len(inputs) != 1:
        raise CalibrationError(f"{path}: a .npy file calibrates a one-input model; this one takes {len(inputs)} "
                               "inputs: give .npz files with one array per input")
    want = inputs[0]
    if data.ndim == len(want.shape) + 1 and want.fits(data.shape[1:]):   # a stack of batches
        return [(_fit(b, want, f"{path} [{i}]"),) for i, b in enumerate(data)]
    return [(_fit(data, want, str(path)),)]


def _image_batches(files, inputs, transform: ImageTransform, progress, limit) -> list[tuple]:
    if len(inputs) != 1 or len(inputs[0].shape) != 4 or inputs[0].shape[1] not in (1, 3) \
            or inputs[0].dtype.kind != "f":
        shapes = [tuple(s.shape) for s in inputs]
        raise CalibrationError(f"images calibrate a model with one float input (N, C, H, W), C = 1 or 3; "
                               f"this one takes {shapes}")
    n, c, h, w = inputs[0].shape
    mean, std = (_per_channel(v, c, name) for v, name in ((transform.mean, "mean"), (transform.std, "std")))
    if np.any(std == 0):
        raise CalibrationError("--std must not be 0")
    want = (limit * n) if limit is not None else None
    images = []
    for f in _bar(files[:want], "reading calibration images", progress):
        images.append((_read_image(f, c, (h, w), transform) - mean[:, None, None]) / std[:, None, None])
    usable = len(images) // n * n
    if usable == 0:
        raise CalibrationError(f"{len(images)} image(s) do not make one batch of {n}")
    if usable < len(images):
        print(f"vkq: {len(images) - usable} image(s) left over after batches of {n}; not used", file=sys.stderr)
    return [(np.stack(images[i:i + n]).astype(inputs[0].dtype, copy=False),) for i in range(0, usable, n)]


def _per_channel(values, c, name) -> np.ndarray:
    v = np.asarray(values, np.float32).reshape(-1)
    if v.size == 1:
        return np.repeat(v, c)
    if v.size != c:
        raise CalibrationError(f"--{name} has {v.size} values; the model's input has {c} channel(s)")
    return v


def _read_image(path: Path, channels: int, size: tuple, t: ImageTransform) -> np.ndarray:
    """(C, H, W) float32 in [0, 1]."""
    from PIL import Image, UnidentifiedImageError
    h, w = size
    try:
        with Image.open(path) as img:
            img = img.convert("RGB" if channels == 3 else "L")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise CalibrationError(f"{path}: cannot read this image ({e})") from None
    if t.resize is None and t.crop is None:
        img = img.resize((w, h), Image.Resampling.BILINEAR)
    if t.resize is not None:          # shorter side to t.resize, as torchvision's Resize(int)
        iw, ih = img.size
        short, long = min(iw, ih), max(iw, ih)
        other = int(t.resize * long / short)
        img = img.resize((t.resize, other) if iw <= ih else (other, t.resize), Image.Resampling.BILINEAR)
    if t.crop is not None:            # the centre, as torchvision's CenterCrop
        iw, ih = img.size
        if t.crop > min(iw, ih):
            raise CalibrationError(f"{path}: a {t.crop}-pixel crop does not fit the {iw}x{ih} image")
        left, top = int(round((iw - t.crop) / 2)), int(round((ih - t.crop) / 2))
        img = img.crop((left, top, left + t.crop, top + t.crop))
    if img.size != (w, h):
        raise CalibrationError(f"{path}: the image is {img.size[0]}x{img.size[1]} after --resize/--crop; "
                               f"the model's input is {w}x{h} (W x H)")
    a = np.asarray(img, np.float32) / np.float32(255)
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
