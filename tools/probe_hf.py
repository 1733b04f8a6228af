"""Hugging Face architectures through vkq: each built from a small random config (nothing
downloaded), quantized, compiled and run on Vulkan, against the CPU reference (float rounding
where floats run on the device) and PT2E's eager output (cosine >= 0.99), with the ops that stay
on the CPU listed. The check that found, on 2026-11-24, GPT-2's Conv1D, every float conv, pool
and batch norm, GPT-J's stack and BLOOM's baddbmm on the CPU, SwinV2's constant-table linear
failing to build, and a MobileViT taking 2 minutes to calibrate; and in its second batch of
architectures RoBERTa's cumsum and gather, XLNet's and Funnel's einsum, ConvBERT's unfold and
torch.multiply, RWKV's negative padding, Mamba's softplus, DPT's transposed convs, UperNet's
pyramid pools and VideoMAE's conv3d on the CPU; in its third, the mixtures of experts' routing
(a sort, histc, a cumsum to offsets and transformers' grouped_mm); in its fourth, PhiMoE's
aten.concat, Mamba2's repeat_interleave with output_size and M2M100's index_select by computed
positions; in its fifth, MRA's folded permute failing to fold its view under the dynamic and
weight-only schemes and FNet's Fourier transforms on the CPU:

    .venv/bin/python tools/probe_hf.py [--only bert,llama] [--schemes static,dynamic,weight_only]
                                       [--dtype float16|bfloat16] [--dynamic]

With --dynamic (the token models, a dynamic sequence length) it found on 2026-11-29 the
mixtures of experts' inverse permutation on the CPU, and BLOOM, DeepSeek-V3 and ModernBERT
refused or partly on the CPU; the next session, FNet's Fourier transform and ConvBERT's unfold
refused (their shapes fixed to the example's length).

Prints one line per (architecture, scheme); the exit status is the number of failures.
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
WAVE = dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4, **SMALL)
ENC_DEC = dict(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64)


def ids(batch=1, length=13):
    return (torch.randint(0, 100, (batch, length)),)


def image(batch=1, size=32):
    return (torch.randn(batch, 3, size, size),)


def wave():
    return (torch.randn(1, 800),)


def architectures(T) -> dict:
    """name -> (model factory, input factory). Configs as small as each architecture allows."""
    kv = dict(num_key_value_heads=2)
    return {
        "bert": (lambda: T.BertModel(T.BertConfig(vocab_size=100, **SMALL)), ids),
        "distilbert": (lambda: T.DistilBertModel(T.DistilBertConfig(vocab_size=100, dim=32, n_layers=2, n_heads=4,
                                                                    hidden_dim=64)), ids),
        "roberta": (lambda: T.RobertaModel(T.RobertaConfig(vocab_size=100, **SMALL)), ids),
        "albert": (lambda: T.AlbertModel(T.AlbertConfig(vocab_size=100, embedding_size=16, **SMALL)), ids),
        "electra": (lambda: T.ElectraModel(T.ElectraConfig(vocab_size=100, embedding_size=32, **SMALL)), ids),
        "deberta-v2": (lambda: T.DebertaV2Model(T.DebertaV2Config(vocab_size=100, **SMALL)), ids),
        "mpnet": (lambda: T.MPNetModel(T.MPNetConfig(vocab_size=100, **SMALL)), ids),
        "mobilebert": (lambda: T.MobileBertModel(T.MobileBertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16)), ids),
        "squeezebert": (lambda: T.SqueezeBertModel(T.SqueezeBertConfig(vocab_size=100, embedding_size=32, **SMALL)), ids),
        "t5-encoder": (lambda: T.T5EncoderModel(T.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                           num_heads=4)), ids),
        "bart-encoder": (lambda: T.BartModel(T.BartConfig(**ENC_DEC)).get_encoder(), ids),
        "gpt2": (lambda: T.GPT2Model(T.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4)), ids),
        "gpt-neo": (lambda: T.GPTNeoModel(T.GPTNeoConfig(vocab_size=100, hidden_size=32, num_layers=2, num_heads=4,
                                                         attention_types=[[["global", "local"], 1]], window_size=8)), ids),
        "gpt-j": (lambda: T.GPTJModel(T.GPTJConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4, rotary_dim=4)), ids),
        "opt": (lambda: T.OPTModel(T.OPTConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                               ffn_dim=64, word_embed_proj_dim=32)), ids),
        "bloom": (lambda: T.BloomModel(T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=4)), ids),
        "falcon": (lambda: T.FalconModel(T.FalconConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4)), ids),
        "phi": (lambda: T.PhiModel(T.PhiConfig(vocab_size=100, **SMALL)), ids),
        "llama": (lambda: T.LlamaModel(T.LlamaConfig(vocab_size=100, **kv, **SMALL)), ids),
        "mistral": (lambda: T.MistralModel(T.MistralConfig(vocab_size=100, **kv, **SMALL)), ids),
        "qwen2": (lambda: T.Qwen2Model(T.Qwen2Config(vocab_size=100, **kv, **SMALL)), ids),
        "qwen3": (lambda: T.Qwen3Model(T.Qwen3Config(vocab_size=100, head_dim=8, **kv, **SMALL)), ids),
        "gemma": (lambda: T.GemmaModel(T.GemmaConfig(vocab_size=100, head_dim=8, **kv, **SMALL)), ids),
        "stablelm": (lambda: T.StableLmModel(T.StableLmConfig(vocab_size=100, **kv, **SMALL)), ids),
        "gpt-neox": (lambda: T.GPTNeoXModel(T.GPTNeoXConfig(vocab_size=100, **SMALL)), ids),
        "gpt-bigcode": (lambda: T.GPTBigCodeModel(T.GPTBigCodeConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4)), ids),
        "codegen": (lambda: T.CodeGenModel(T.CodeGenConfig(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                                           rotary_dim=4)), ids),
        "mixtral": (lambda: T.MixtralModel(T.MixtralConfig(vocab_size=100, num_local_experts=4, num_experts_per_tok=2,
                                                           **kv, **SMALL)), ids),
        "olmoe": (lambda: T.OlmoeModel(T.OlmoeConfig(vocab_size=100, num_experts=4, num_experts_per_tok=2,
                                                     **kv, **SMALL)), ids),
        "qwen2-moe": (lambda: T.Qwen2MoeModel(T.Qwen2MoeConfig(
            vocab_size=100, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, **kv, **SMALL)), ids),
        "qwen3-moe": (lambda: T.Qwen3MoeModel(T.Qwen3MoeConfig(
            vocab_size=100, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=8,
            **kv, **SMALL)), ids),
        "olmo": (lambda: T.OlmoModel(T.OlmoConfig(vocab_size=100, **kv, **SMALL)), ids),
        "gemma2": (lambda: T.Gemma2Model(T.Gemma2Config(vocab_size=100, head_dim=8, **kv, **SMALL)), ids),
        "phi3": (lambda: T.Phi3Model(T.Phi3Config(vocab_size=100, pad_token_id=0, **kv, **SMALL)), ids),
        "starcoder2": (lambda: T.Starcoder2Model(T.Starcoder2Config(vocab_size=100, **kv, **SMALL)), ids),
        "gemma3": (lambda: T.Gemma3TextModel(T.Gemma3TextConfig(vocab_size=100, head_dim=8, sliding_window=4, **kv,
                                                                **SMALL)), ids),
        "cohere": (lambda: T.CohereModel(T.CohereConfig(vocab_size=100, **kv, **SMALL)), ids),
        "granite": (lambda: T.GraniteModel(T.GraniteConfig(vocab_size=100, **kv, **SMALL)), ids),
        "phimoe": (lambda: T.PhimoeModel(T.PhimoeConfig(vocab_size=100, num_local_experts=4, num_experts_per_tok=2,
                                                        **kv, **SMALL)), ids),
        "jamba": (lambda: T.JambaModel(T.JambaConfig(vocab_size=100, num_key_value_heads=2, num_experts=2,
                                                     num_experts_per_tok=1, attn_layer_period=2, attn_layer_offset=1,
                                                     expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8,
                                                     mamba_dt_rank=4, use_mamba_kernels=False, **SMALL)), ids),
        "mamba2": (lambda: T.Mamba2Model(T.Mamba2Config(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_heads=4,
                                                        head_dim=16, state_size=8, n_groups=1, expand=2,
                                                        chunk_size=8)), ids),
        "modernbert": (lambda: T.ModernBertModel(T.ModernBertConfig(
            vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
            local_attention=4, global_attn_every_n_layers=2, **SMALL)), ids),
        "mpt": (lambda: T.MptModel(T.MptConfig(vocab_size=100, d_model=32, n_heads=4, n_layers=2)), ids),
        "mamba": (lambda: T.MambaModel(T.MambaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                     state_size=8)), ids),
        "rwkv": (lambda: T.RwkvModel(T.RwkvConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                  attention_hidden_size=32, intermediate_size=64,
                                                  context_length=16)), ids),
        "xlnet": (lambda: T.XLNetModel(T.XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=4, d_inner=64)), ids),
        "funnel": (lambda: T.FunnelModel(T.FunnelConfig(vocab_size=100, block_sizes=[1, 1], d_model=32, n_head=4,
                                                        d_head=8, d_inner=64)), ids),
        "convbert": (lambda: T.ConvBertModel(T.ConvBertConfig(vocab_size=100, embedding_size=32, **SMALL)), ids),
        "roformer": (lambda: T.RoFormerModel(T.RoFormerConfig(vocab_size=100, embedding_size=32, **SMALL)), ids),
        "esm": (lambda: T.EsmModel(T.EsmConfig(vocab_size=33, pad_token_id=1, mask_token_id=2, **SMALL)),
                lambda: (torch.randint(0, 33, (1, 13)),)),
        "clip-text": (lambda: T.CLIPTextModel(T.CLIPTextConfig(vocab_size=100, **SMALL)), ids),
        "clip-text-embeds": (lambda: T.CLIPTextModelWithProjection(T.CLIPTextConfig(
            vocab_size=100, projection_dim=16, eos_token_id=2, **SMALL)), lambda: ids(2)),
        "vit": (lambda: T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **SMALL)), image),
        "deit": (lambda: T.DeiTModel(T.DeiTConfig(image_size=32, patch_size=8, **SMALL)), image),
        "beit": (lambda: T.BeitModel(T.BeitConfig(image_size=32, patch_size=8, **SMALL)), image),
        "dinov2": (lambda: T.Dinov2Model(T.Dinov2Config(image_size=32, patch_size=8, **SMALL)), image),
        "clip-vision": (lambda: T.CLIPVisionModel(T.CLIPVisionConfig(image_size=32, patch_size=8, **SMALL)), image),
        "yolos": (lambda: T.YolosModel(T.YolosConfig(image_size=[32, 32], patch_size=8, num_detection_tokens=5,
                                                     **SMALL)), image),
        "swin": (lambda: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                  num_heads=[2, 4], window_size=4)), image),
        "swinv2": (lambda: T.Swinv2Model(T.Swinv2Config(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                        num_heads=[2, 4], window_size=4)), image),
        "convnext": (lambda: T.ConvNextModel(T.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1])), image),
        "convnextv2": (lambda: T.ConvNextV2Model(T.ConvNextV2Config(num_stages=2, hidden_sizes=[8, 16],
                                                                    depths=[1, 1])), image),
        "resnet": (lambda: T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])), image),
        "regnet": (lambda: T.RegNetModel(T.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                        groups_width=8)), image),
        "mobilenet-v2": (lambda: T.MobileNetV2Model(T.MobileNetV2Config(image_size=32, depth_multiplier=0.35)), image),
        "mobilevit": (lambda: T.MobileViTModel(T.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32],
                                                                 neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64])), image),
        "levit": (lambda: T.LevitModel(T.LevitConfig(image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3],
                                                     depths=[1, 1, 1], key_dim=[8, 8, 8])), image),
        "segformer": (lambda: T.SegformerModel(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32], num_attention_heads=[1, 2],
            patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2])), image),
        "pvt": (lambda: T.PvtModel(T.PvtConfig(image_size=32, num_encoder_blocks=2, depths=[1, 1],
                                               sequence_reduction_ratios=[2, 1], hidden_sizes=[16, 32],
                                               num_attention_heads=[1, 2], patch_sizes=[4, 2], strides=[4, 2],
                                               mlp_ratios=[2, 2])), image),
        "poolformer": (lambda: T.PoolFormerModel(T.PoolFormerConfig(num_encoder_blocks=2, depths=[1, 1], hidden_sizes=[16, 32],
                                                                    patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1])), image),
        "siglip-vision": (lambda: T.SiglipVisionModel(T.SiglipVisionConfig(image_size=32, patch_size=8, **SMALL)), image),
        "vitdet": (lambda: T.VitDetModel(T.VitDetConfig(image_size=32, pretrain_image_size=32, patch_size=8,
                                                        **SMALL)), image),
        "efficientnet": (lambda: T.EfficientNetModel(T.EfficientNetConfig(image_size=32, width_coefficient=0.25,
                                                                          depth_coefficient=0.25, hidden_dim=320)), image),
        "mobilenet-v1": (lambda: T.MobileNetV1Model(T.MobileNetV1Config(image_size=32, depth_multiplier=0.25)), image),
        "bit": (lambda: T.BitModel(T.BitConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_groups=4)), image),
        "cvt": (lambda: T.CvtModel(T.CvtConfig(embed_dim=[16, 32, 48], num_heads=[1, 2, 3], depth=[1, 2, 3])), image),
        "focalnet": (lambda: T.FocalNetModel(T.FocalNetConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                              focal_levels=[2, 2], focal_windows=[3, 3])), image),
        "detr": (lambda: T.DetrModel(T.DetrConfig(
            use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
            backbone_config=T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"]),
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=5)), lambda: image(1, 64)),
        "dpt": (lambda: T.DPTForDepthEstimation(T.DPTConfig(
            image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=64, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 8, 16, 16],
            fusion_hidden_size=16, head_hidden_size=8)), image),
        "glpn": (lambda: T.GLPNForDepthEstimation(T.GLPNConfig(
            num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[4, 2, 1, 1], hidden_sizes=[8, 16, 16, 32],
            num_attention_heads=[1, 1, 2, 2], decoder_hidden_size=16)), lambda: image(1, 64)),
        "upernet": (lambda: T.UperNetForSemanticSegmentation(T.UperNetConfig(
            backbone_config=T.ConvNextConfig(num_stages=4, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                                             out_features=["stage1", "stage2", "stage3", "stage4"]),
            hidden_size=16, auxiliary_in_channels=16, num_labels=3)), lambda: image(1, 64)),
        "videomae": (lambda: T.VideoMAEModel(T.VideoMAEConfig(image_size=32, patch_size=8, num_frames=4, tubelet_size=2,
                                                               **SMALL)), lambda: (torch.randn(1, 4, 3, 32, 32),)),
        "ast": (lambda: T.ASTModel(T.ASTConfig(patch_size=8, num_mel_bins=16, max_length=32, frequency_stride=8,
                                               time_stride=8, **SMALL)), lambda: (torch.randn(1, 32, 16),)),
        "wav2vec2": (lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(**WAVE)), wave),
        "hubert": (lambda: T.HubertModel(T.HubertConfig(**WAVE)), wave),
        "wavlm": (lambda: T.WavLMModel(T.WavLMConfig(**WAVE)), wave),
        "whisper-encoder": (lambda: T.WhisperModel(T.WhisperConfig(
            d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=20)).get_encoder(),
                            lambda: (torch.randn(1, 16, 40),)),
        "m2m100-encoder": (lambda: T.M2M100Model(T.M2M100Config(**ENC_DEC)).get_encoder(), ids),
        "hiera": (lambda: T.HieraModel(T.HieraConfig(image_size=[64, 64], embed_dim=16, depths=[1, 1, 1, 1],
                                                     num_heads=[1, 1, 2, 2])), lambda: image(size=64)),
        "sam-vision": (lambda: T.SamVisionModel(T.SamVisionConfig(
            image_size=64, patch_size=8, hidden_size=32, output_channels=16, num_hidden_layers=2, num_attention_heads=4,
            mlp_dim=64, global_attn_indexes=[1], window_size=4)), lambda: image(size=64)),
        "mobilevitv2": (lambda: T.MobileViTV2Model(T.MobileViTV2Config(image_size=64, width_multiplier=0.25)),
                        lambda: image(size=64)),
        "swiftformer": (lambda: T.SwiftFormerModel(T.SwiftFormerConfig(depths=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32])),
                        image),
        "speech2text-encoder": (lambda: T.Speech2TextModel(T.Speech2TextConfig(
            input_feat_per_channel=16, conv_channels=32, max_source_positions=64, **ENC_DEC)).get_encoder(),
                                lambda: (torch.randn(1, 40, 16),)),
        # the fifth batch (2026-11-29)
        **{name: (_auto(T, config, vocab_size=100, **kv, **llm, **SMALL), ids) for name, config, llm in (
            ("glm4", "Glm4Config", dict(pad_token_id=0)), ("glm", "GlmConfig", dict(pad_token_id=0)),
            ("smollm3", "SmolLM3Config", dict(pad_token_id=0)), ("helium", "HeliumConfig", dict(head_dim=8)),
            ("olmo2", "Olmo2Config", {}), ("nemotron", "NemotronConfig", {}), ("exaone4", "Exaone4Config", {}),
            ("arcee", "ArceeConfig", {}), ("apertus", "ApertusConfig", {}), ("seed-oss", "SeedOssConfig", {}),
            ("ernie4_5", "Ernie4_5Config", {}), ("bitnet", "BitNetConfig", {}),
            ("hunyuan", "HunYuanDenseV1Config", dict(head_dim=8, rope_scaling={"type": "dynamic", "factor": 1.0,
                                                                               "alpha": 1.0})),
            ("granitemoe", "GraniteMoeConfig", dict(num_local_experts=4, num_experts_per_tok=2)),
            ("gpt-oss", "GptOssConfig", dict(num_local_experts=4, num_experts_per_tok=2, head_dim=8, sliding_window=4,
                                             layer_types=["sliding_attention", "full_attention"])),
            ("lfm2", "Lfm2Config", dict(layer_types=["conv", "full_attention"])))},
        "deepseek-v3": (_auto(T, "DeepseekV3Config", vocab_size=100, num_key_value_heads=4, head_dim=4, n_routed_experts=4,
                              num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=16, q_lora_rank=16,
                              kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8,
                              first_k_dense_replace=1, **SMALL), ids),
        "persimmon": (_auto(T, "PersimmonConfig", vocab_size=100, **SMALL), ids),
        "falcon-mamba": (_auto(T, "FalconMambaConfig", vocab_size=100, hidden_size=32, num_hidden_layers=2,
                               state_size=8), ids),
        "xglm": (_auto(T, "XGLMConfig", vocab_size=100, d_model=32, num_layers=2, attention_heads=4, ffn_dim=64), ids),
        "ctrl": (_auto(T, "CTRLConfig", vocab_size=100, n_embd=32, n_layer=2, n_head=4, dff=64), ids),
        "imagegpt": (_auto(T, "ImageGPTConfig", vocab_size=101, n_embd=32, n_layer=2, n_head=4), ids),
        **{name: (_auto(T, config, vocab_size=100, **extra, **SMALL), ids) for name, config, extra in (
            ("bigbird", "BigBirdConfig", dict(attention_type="original_full")), ("data2vec-text", "Data2VecTextConfig", {}),
            ("ernie", "ErnieConfig", {}), ("megatron-bert", "MegatronBertConfig", {}), ("mra", "MraConfig", {}),
            ("rembert", "RemBertConfig", dict(input_embedding_size=16, output_embedding_size=16)))},
        "fnet": (_auto(T, "FNetConfig", vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64), ids),
        "marian-encoder": (lambda: T.MarianModel(T.MarianConfig(pad_token_id=0, decoder_start_token_id=0,
                                                                **ENC_DEC)).get_encoder(), ids),
        "pegasus-encoder": (lambda: T.PegasusModel(T.PegasusConfig(**ENC_DEC)).get_encoder(), ids),
        "mbart-encoder": (lambda: T.MBartModel(T.MBartConfig(**ENC_DEC)).get_encoder(), ids),
        "blenderbot-small-encoder": (lambda: T.BlenderbotSmallModel(T.BlenderbotSmallConfig(**ENC_DEC)).get_encoder(), ids),
        **{name: (_auto(T, config, **extra, **WAVE), wave) for name, config, extra in (
            ("data2vec-audio", "Data2VecAudioConfig", {}), ("sew", "SEWConfig", dict(squeeze_factor=2)),
            ("sew-d", "SEWDConfig", dict(squeeze_factor=2)), ("unispeech", "UniSpeechConfig", {}),
            ("unispeech-sat", "UniSpeechSatConfig", {}))},
        "data2vec-vision": (_auto(T, "Data2VecVisionConfig", image_size=32, patch_size=8, **SMALL), image),
        "vitmsn": (_auto(T, "ViTMSNConfig", image_size=32, patch_size=8, **SMALL), image),
        "pvt-v2": (_auto(T, "PvtV2Config", hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1],
                         num_attention_heads=[1, 1, 2, 2]), lambda: image(1, 64)),
        "blip-vision": (lambda: T.BlipVisionModel(T.BlipVisionConfig(image_size=32, patch_size=8, **SMALL)), image),
        "owlvit-vision": (lambda: T.OwlViTVisionModel(T.OwlViTVisionConfig(image_size=32, patch_size=8, **SMALL)), image),
        "groupvit-vision": (lambda: T.GroupViTVisionModel(T.GroupViTVisionConfig(
            image_size=32, patch_size=8, hidden_size=32, depths=[1, 1, 1], num_group_tokens=[4, 2, 0],
            num_output_groups=[4, 2, 2], num_attention_heads=4, intermediate_size=64)), image),
        "timesformer": (_auto(T, "TimesformerConfig", image_size=32, patch_size=8, num_frames=4, **SMALL),
                        lambda: (torch.randn(1, 4, 3, 32, 32),)),
        "vivit": (_auto(T, "VivitConfig", image_size=32, tubelet_size=[2, 8, 8], num_frames=4, **SMALL),
                  lambda: (torch.randn(1, 4, 3, 32, 32),)),
        "patchtst": (lambda: T.PatchTSTModel(T.PatchTSTConfig(
            num_input_channels=3, context_length=32, patch_length=8, patch_stride=8, d_model=32, num_attention_heads=4,
            num_hidden_layers=2, ffn_dim=64)), lambda: (torch.randn(1, 32, 3),)),
        "patchtsmixer": (lambda: T.PatchTSMixerModel(T.PatchTSMixerConfig(
            num_input_channels=3, context_length=32, patch_length=8, patch_stride=8, d_model=16, num_layers=2)),
                         lambda: (torch.randn(1, 32, 3),)),
        "hifigan": (lambda: T.SpeechT5HifiGan(T.SpeechT5HifiGanConfig(
            model_in_dim=16, upsample_initial_channel=32, upsample_rates=[4, 2], upsample_kernel_sizes=[8, 4],
            resblock_kernel_sizes=[3, 5], resblock_dilation_sizes=[[1, 3], [1, 3]])), lambda: (torch.randn(1, 10, 16),)),
        "clap-audio": (lambda: T.ClapAudioModel(T.ClapAudioConfig(
            spec_size=32, patch_size=4, num_mel_bins=16, window_size=4, depths=[1, 1], num_attention_heads=[2, 4],
            hidden_size=16, patch_embeds_hidden_size=16, enable_fusion=False)), lambda: (torch.randn(1, 1, 32, 16),)),
        "moonshine-encoder": (lambda: T.MoonshineModel(T.MoonshineConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2, decoder_num_hidden_layers=1,
            encoder_num_attention_heads=4, decoder_num_attention_heads=4)).get_encoder(), lambda: (torch.randn(1, 1600),)),
    }


def _auto(T, config: str, **kwargs):
    """A factory of transformers' base model for the named config class."""
    return lambda: T.AutoModel.from_config(getattr(T, config)(**kwargs))


class FirstOutput(torch.nn.Module):
    """The model's first output tensor (last_hidden_state)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        return self.model(*inputs)[0]


class SequenceOutput(torch.nn.Module):
    """The model's first output from its one ids input (a named argument for torch.export's
    dynamic_shapes)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids)[0]


LENGTHS = (3, 13, 30, 48)       # --dynamic: the program compiled once runs at each


def _cosine(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def check(make, inputs, scheme: str, device, dtype: str = "float32", dynamic: bool = False) -> list:
    """Raise AssertionError where vkq disagrees with its reference or with PT2E; return the ops
    that stay on the CPU. dtype: the model's and its float inputs' (float16 / bfloat16: vkq
    quantizes a float32 copy, PT2E's reference takes the inputs in float32). dynamic: a token
    model compiled once with a dynamic sequence length, checked at each of LENGTHS."""
    import vkq
    from vkq.api import quantize
    half = getattr(torch, dtype)
    cast = lambda xs: tuple(t.to(half) if t.is_floating_point() else t for t in xs)
    torch.manual_seed(0)
    model = (SequenceOutput if dynamic else FirstOutput)(make().eval()).to(half)
    x = cast(inputs())
    shapes = ({1: torch.export.Dim("seq", min=2, max=max(LENGTHS))},) if dynamic else None
    gm = quantize(model, x, [cast(inputs()) for _ in range(4)], scheme=scheme, progress=False, dynamic_shapes=shapes)
    prog = vkq.CompiledProgram(vkq.compile(gm, x, dynamic_shapes=shapes, progress=False).program, device)
    for x in ([ids(1, n) for n in LENGTHS] if dynamic else [x]):
        xs = list(x) if dtype == "bfloat16" else [t.numpy() for t in x]       # (numpy has no bfloat16)
        got, ref = prog(*xs), prog.run_reference(*xs)
        x = tuple(t.float() if t.is_floating_point() else t for t in x)
        at = f" at {tuple(x[0].shape)}" if dynamic else ""
        if not np.allclose(got, ref, rtol=1e-5, atol=1e-6 * (np.abs(ref).max() + 1e-30)) and _cosine(got, ref) < 0.9999:
            raise AssertionError(f"Vulkan != reference{at}: {int(np.sum(got != ref))} of {got.size} differ, "
                                 f"cosine {_cosine(got, ref):.6f}")
        with torch.no_grad():
            want = gm(*x).numpy()
        if got.shape != want.shape or np.abs(want).max() > 1e-6 and _cosine(got, want) < 0.99:
            raise AssertionError(f"shape {got.shape}, cosine {_cosine(got, want):.4f} with PT2E's eager output "
                                 f"{want.shape}{at}")                          # (some random inits give ~0)
    return sorted({op for op, _ in prog.fallback_ops})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="llvmpipe")
    ap.add_argument("--only", default="", help="comma-separated architecture names (default: all)")
    ap.add_argument("--schemes", default="static,dynamic")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                    help="the models' and their float inputs' precision")
    ap.add_argument("--dynamic", action="store_true",
                    help="the token models only, each compiled once with a dynamic sequence length and run at "
                         f"lengths {', '.join(map(str, LENGTHS))} (a model that torch.export cannot make dynamic "
                         "is listed as refused)")
    ap.add_argument("--traceback", action="store_true")
    args = ap.parse_args(argv)
    import transformers
    import vkq
    from vkq.device import get_device
    vkq._quiet_third_party_logs()
    transformers.logging.set_verbosity_error()
    device = get_device(args.device)
    table = architectures(transformers)
    names = [n for n in args.only.split(",") if n] or list(table)
    unknown = sorted(set(names) - set(table))
    if unknown:
        ap.error(f"unknown architectures {unknown}; known: {', '.join(table)}")
    if args.dynamic:
        names = [n for n in names if table[n][1] is ids]
    failures = runs = 0
    for name in names:
        for scheme in args.schemes.split(","):
            runs += 1
            t0 = time.perf_counter()
            try:
                cpu = check(*table[name], scheme, device, args.dtype, args.dynamic)
                print(f"ok   {name} {scheme} ({time.perf_counter() - t0:.1f} s)"
                      + (f": on the CPU {', '.join(cpu)}" if cpu else ""), flush=True)
            except Exception as e:
                if args.dynamic and "Constraints violated" in str(e):       # torch.export's, not vkq's
                    print(f"refused {name} {scheme}: torch.export fixes the sequence length "
                          f"({str(e).splitlines()[0][:120]})", flush=True)
                    continue
                failures += 1
                print(f"FAIL {name} {scheme}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                if args.traceback:
                    traceback.print_exc()
    print(f"{runs} runs ({len(names)} architectures) on {device.info.name}: {failures} failed", flush=True)
    return failures


if __name__ == "__main__":
    sys.exit(main())
