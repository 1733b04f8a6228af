"""A zoo of architectures from torchvision, timm and transformers, as a new user brings them:
random weights, BatchNorm statistics from a few training-mode passes, small inputs, vkq's
default static int8 quantization. The zoo test (tests/test_zoo.py) and bench/zoo_table.py
build them from here.

    case = vkq.zoo.build("mobilenet_v3_small")   # -> ZooCase(model, inputs, calibration)

torchvision's PyPI wheel is a CUDA build whose C++ ops (nms, roi_align) do not load beside
the CPU torch; its Python model definitions need none of them, only the two operator schemas
that its import registers fake kernels for: import_torchvision() declares them when the
extension did not. timm imports torchvision, so it goes through the same door. Both live
outside the environment's site-packages, in ZOO_SITE (tools/setup.sh installs them there with
--no-deps): transformers imports any torchvision it can find, and a plain `import torchvision`
fails, so only the zoo puts that folder on sys.path, after declaring the schemas. Large
architectures are built from the libraries' own classes with small configurations (DenseNet,
ConvNeXt, ViT, Swin, Swin-V2, MaxViT, BERT, GPT-2) so that the whole zoo runs in minutes on lavapipe.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

_TV_STUB = None
ZOO_SITE = Path(os.environ.get("VKQ_ZOO_SITE") or Path(sys.prefix) / "zoo-site")


def import_torchvision():
    """torchvision, imported where its C++ extension cannot load (see the module docstring)."""
    global _TV_STUB
    if ZOO_SITE.is_dir() and str(ZOO_SITE) not in sys.path:
        sys.path.append(str(ZOO_SITE))
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _TV_STUB = torch.library.Library("torchvision", "DEF")      # kept alive: the schemas live as long
    for op in ("nms", "qnms"):
        _TV_STUB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    return importlib.import_module("torchvision")


def import_timm():
    import_torchvision()
    return importlib.import_module("timm")


@dataclass
class ZooCase:
    name: str
    library: str
    model: nn.Module
    inputs: tuple                  # the example inputs (batch 1)
    calibration: list              # input tuples


def calibrated_bn(model: nn.Module, make_input: Callable, passes: int = 2) -> nn.Module:
    """BatchNorm running statistics from a few training-mode passes on random inputs
    (cumulative averages, not the default momentum), as a trained model would have them
    roughly; then eval()."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if bns:
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        with torch.no_grad():
            for i in range(passes):
                model(*make_input(4, 100 + i))
    return model.eval()


def _image(size):
    def make(batch, seed):
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed)),)
    return make


def _video(frames, size):
    def make(batch, seed):
        return (torch.randn(batch, 3, frames, size, size, generator=torch.Generator().manual_seed(seed)),)
    return make


def _tokens(vocab, length):
    def make(batch, seed):
        return (torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed)),)
    return make


class _LastHidden(nn.Module):
    """A transformers model -> its last hidden state (one tensor out)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).last_hidden_state


class _SegmentationOut(nn.Module):
    """torchvision's segmentation models return {"out": ...}."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _tv(fn_name, **kwargs):
    def make():
        return getattr(import_torchvision().models, fn_name)(**kwargs)
    return make


def _tv_class(path, cls, **kwargs):
    def make():
        import_torchvision()
        return getattr(importlib.import_module(path), cls)(**kwargs)
    return make


def _convnext():
    import_torchvision()
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    return ConvNeXt([CNBlockConfig(16, 32, 1), CNBlockConfig(32, 64, 2), CNBlockConfig(64, None, 1)], num_classes=10)


def _swin():
    import_torchvision()
    from torchvision.models.swin_transformer import SwinTransformer
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10)


def _swin_v2():
    """Swin-V2: cosine attention (F.normalize of q and k, a per-head logit scale) and a position
    bias from an MLP over a constant coordinate table."""
    import_torchvision()
    from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2
    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
                           num_classes=10, block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2)


def _maxvit():
    """MaxViT: MBConv (depthwise, squeeze-excitation) then block and grid attention, whose
    partitions move axes with swapaxes, and a relative position bias gathered from a table."""
    import_torchvision()
    from torchvision.models.maxvit import MaxVit
    return MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4, block_channels=[16, 32],
                  block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


def _swin3d():
    import_torchvision()
    from torchvision.models.video.swin_transformer import SwinTransformer3d
    return SwinTransformer3d(patch_size=[2, 4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                             window_size=[2, 4, 4], num_classes=10)


def _lraspp():
    tv = import_torchvision()
    return _SegmentationOut(tv.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                              num_classes=5))


def _timm(name, **kwargs):
    def make():
        return import_timm().create_model(name, pretrained=False, **kwargs)
    return make


def _transformers():
    try:
        import_torchvision()          # transformers imports torchvision where it finds one
    except ModuleNotFoundError:
        pass
    return importlib.import_module("transformers")


def _bert():
    transformers = _transformers()
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32, attn_implementation="eager")
    return _LastHidden(transformers.BertModel(cfg))


def _gpt2():
    transformers = _transformers()
    cfg = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                                  bos_token_id=0, eos_token_id=0, use_cache=False, attn_implementation="eager")
    return _LastHidden(transformers.GPT2Model(cfg))


# name -> (library, constructor, input maker). Inputs: 64x64 images (96 for MobileNetV3, whose
# squeeze-excitation gates at 2x2 are too sensitive to compare), 12-token sequences, 4 frames of
# 32x32 for the video networks (R(2+1)D: conv3d (1,3,3) and (3,1,1), all over the frames;
# Swin3D: channels-last (B, D, H, W, C) volumes, rank-5 linears and residual adds).
ZOO = {
    "mobilenet_v3_small": ("torchvision", _tv("mobilenet_v3_small", num_classes=100), _image(96)),
    "mobilenet_v3_large": ("torchvision", _tv("mobilenet_v3_large", num_classes=100), _image(96)),
    "efficientnet_b0": ("torchvision", _tv("efficientnet_b0", num_classes=100), _image(64)),
    "shufflenet_v2_x0_5": ("torchvision", _tv("shufflenet_v2_x0_5", num_classes=100), _image(64)),
    "densenet": ("torchvision", _tv_class("torchvision.models.densenet", "DenseNet", growth_rate=8,
                                          block_config=(2, 3, 2), num_init_features=16, num_classes=10), _image(64)),
    "mnasnet0_5": ("torchvision", _tv("mnasnet0_5", num_classes=100), _image(64)),
    "squeezenet1_1": ("torchvision", _tv("squeezenet1_1", num_classes=100), _image(64)),
    "convnext": ("torchvision", _convnext, _image(64)),
    "vit": ("torchvision", _tv_class("torchvision.models.vision_transformer", "VisionTransformer", image_size=32,
                                     patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                                     num_classes=10), _image(32)),
    "swin": ("torchvision", _swin, _image(32)),
    "swin_v2": ("torchvision", _swin_v2, _image(32)),
    "maxvit": ("torchvision", _maxvit, _image(64)),
    "lraspp_mobilenet_v3": ("torchvision", _lraspp, _image(64)),
    "r2plus1d_18": ("torchvision", _tv_class("torchvision.models.video.resnet", "r2plus1d_18", num_classes=10),
                    _video(4, 32)),
    "swin3d": ("torchvision", _swin3d, _video(4, 32)),
    "lcnet_050": ("timm", _timm("lcnet_050", num_classes=100), _image(64)),
    "ghostnet_050": ("timm", _timm("ghostnet_050", num_classes=100), _image(64)),
    "mobilevit_xxs": ("timm", _timm("mobilevit_xxs", num_classes=100), _image(64)),
    "bert": ("transformers", _bert, _tokens(100, 12)),
    "gpt2": ("transformers", _gpt2, _tokens(100, 12)),
}


def random_heads(model: nn.Module) -> nn.Module:
    """Linear layers that their library initialises to zero (ViT's classifier)
    get random weights: a zero output has no cosine to compare."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear) and not m.weight.any():
                m.weight.normal_(0.0, m.in_features ** -0.5)
    return model


def build(name: str, calibration_batches: int = 2) -> ZooCase:
    """The zoo's model `name` (seeded: the same weights every time), its example inputs and
    calibration inputs."""
    library, make, make_input = ZOO[name]
    with torch.random.fork_rng(devices=[]):     # seeded init, and seeded dropout / stochastic
        torch.manual_seed(0)                    # depth in the training-mode BN passes
        model = calibrated_bn(random_heads(make()), make_input)
    return ZooCase(name, library, model, make_input(1, 0),
                   [make_input(1, 1 + i) for i in range(calibration_batches)])
