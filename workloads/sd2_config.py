"""Stable Diffusion v2's model configurations as plain dicts, so every model
is built with random weights and nothing is downloaded.

The values are those of the stabilityai/stable-diffusion-2 diffusers folders
(unet/, vae/, text_encoder/, scheduler/ config.json), with the UNet's
sample_size set for 512x512 images (64x64 latents). The text encoder is
OpenCLIP ViT-H's text tower, which transformers' CLIPTextModel implements
(SD2 uses its penultimate layer, hence 23 of its 24 layers).

`tiny` keeps every model's structure but shrinks it (fewer and narrower
blocks) so a training step takes a fraction of a second on a CPU; the
overrides are returned with the configs so the result can say what was shrunk.
"""
from __future__ import annotations

import copy

from hpcai.errors import UsageError

UNET = {
    "act_fn": "silu",
    "attention_head_dim": [5, 10, 20, 20],  # diffusers' name; these are SD2's head counts
    "block_out_channels": [320, 640, 1280, 1280],
    "center_input_sample": False,
    "cross_attention_dim": 1024,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                         "DownBlock2D"],
    "downsample_padding": 1,
    "dual_cross_attention": False,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "in_channels": 4,
    "layers_per_block": 2,
    "mid_block_scale_factor": 1,
    "norm_eps": 1e-5,
    "norm_num_groups": 32,
    "out_channels": 4,
    "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                       "CrossAttnUpBlock2D"],
    "use_linear_projection": True,
}

VAE = {
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "in_channels": 3,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "out_channels": 3,
    "sample_size": 512,
    "scaling_factor": 0.18215,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}

TEXT_ENCODER = {
    "architectures": ["CLIPTextModel"],
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "dropout": 0.0,
    "eos_token_id": 2,
    "hidden_act": "gelu",
    "hidden_size": 1024,
    "initializer_factor": 1.0,
    "initializer_range": 0.02,
    "intermediate_size": 4096,
    "layer_norm_eps": 1e-5,
    "max_position_embeddings": 77,
    "num_attention_heads": 16,
    "num_hidden_layers": 23,
    "pad_token_id": 1,
    "projection_dim": 512,
    "vocab_size": 49408,
}

SCHEDULER = {
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "num_train_timesteps": 1000,
    "prediction_type": "v_prediction",
    "steps_offset": 1,
}

# The CLIP tokenizer's start and end of text; synthetic prompts are framed by them.
BOS_TOKEN, EOS_TOKEN = 49406, 49407

TINY = {
    "unet": {
        "attention_head_dim": [2, 4],
        "block_out_channels": [32, 64],
        "cross_attention_dim": 64,
        # Attention only at the lower resolution: 1,024-token self-attention
        # at the top would cost a CPU more than everything else together.
        "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
        "layers_per_block": 1,
        "norm_num_groups": 8,
        "sample_size": 32,
        "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"],
    },
    "vae": {
        "block_out_channels": [32, 64],
        "down_block_types": ["DownEncoderBlock2D"] * 2,
        "layers_per_block": 1,
        "norm_num_groups": 8,
        "sample_size": 64,
        "up_block_types": ["UpDecoderBlock2D"] * 2,
    },
    "text_encoder": {
        "hidden_size": 64,
        "intermediate_size": 256,
        "num_attention_heads": 2,
        "num_hidden_layers": 2,
        "projection_dim": 64,
    },
}

MODEL_SIZES = ("full", "tiny")


def configs(model_size: str = "full") -> dict:
    """{"unet", "vae", "text_encoder", "scheduler": config dicts, "shrunk": overrides or None}."""
    if model_size not in MODEL_SIZES:
        raise UsageError(f"unknown model_size {model_size!r} for sd2",
                         f"choose one of: {', '.join(MODEL_SIZES)}")
    out = {"unet": copy.deepcopy(UNET), "vae": copy.deepcopy(VAE),
           "text_encoder": copy.deepcopy(TEXT_ENCODER), "scheduler": dict(SCHEDULER),
           "shrunk": None}
    if model_size == "tiny":
        for part, overrides in TINY.items():
            out[part].update(copy.deepcopy(overrides))
        out["shrunk"] = copy.deepcopy(TINY)
    return out


def vae_downsampling(vae_config: dict) -> int:
    """Image pixels per latent pixel along each side (8 for SD2's VAE)."""
    return 2 ** (len(vae_config["block_out_channels"]) - 1)
