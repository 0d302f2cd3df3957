"""Stable Diffusion v2 training, the whole step as the seed paper ran it:

  synthetic RGB images --VAE encoder (frozen)--> latents x 0.18215
  synthetic token ids  --OpenCLIP ViT-H text encoder (frozen)--> hidden states
  noise and timesteps  --DDPM scheduler (SD2's, v-prediction)--> noisy latents, target
  UNet (trained) predicts v; MSE loss; backward and AdamW step on the UNet only.

Every model is built from sd2_config with random weights (nothing is
downloaded); --weights DIR loads real ones from a local diffusers-format
folder instead. Latents and text are computed every step, not precomputed.
Under mixed precision the frozen models hold their weights in the half type,
as diffusers' training scripts do; the UNet keeps fp32 weights under autocast.
"""
from __future__ import annotations

from pathlib import Path

from hpcai.errors import ConfigError
from hpcai.workloads import flops, sd2_config
from hpcai.workloads.torch_trainer import TorchTrainer

PARTS = {"unet": "UNet2DConditionModel", "vae": "AutoencoderKL", "text_encoder": "CLIPTextModel"}


def check_weights_folder(path: str) -> Path:
    folder = Path(path).expanduser()
    missing = [part for part in PARTS if not (folder / part / "config.json").is_file()]
    if not folder.is_dir() or missing:
        what = "does not exist" if not folder.is_dir() else f"has no {', '.join(missing)} config"
        raise ConfigError(f"--weights {path} {what}",
                          "point it at a diffusers-format Stable Diffusion 2 folder "
                          "(unet/, vae/, text_encoder/), or leave it out for random weights")
    return folder


class StableDiffusion2(TorchTrainer):
    def __init__(self, spec: dict, ctx):
        super().__init__(spec, ctx)
        # Checked before the slow imports: a wrong path fails at once.
        weights = self.p.weights
        self.weights = check_weights_folder(weights) if weights else None
        import diffusers
        import torch
        import transformers
        from diffusers import DDPMScheduler

        # Their advice about casting and loading would go to every run's log.
        diffusers.utils.logging.set_verbosity_error()
        transformers.utils.logging.set_verbosity_error()
        self.image_size = int(self.p.image_size)
        self.model_size = self.p.model_size
        # NHWC for the UNet's and the VAE's convolutions (cuDNN's fast layout for
        # bf16/fp16); None: NCHW, the paper's.
        self.channels_last = bool(self.p.channels_last)
        self.memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        self.configs = sd2_config.configs(self.model_size)
        unet, vae, text_encoder = self._load() if self.weights else self._build()
        self.scheduler = DDPMScheduler(**self.configs["scheduler"])
        self.frozen_dtype = {"bf16-mixed": torch.bfloat16,
                             "fp16-mixed": torch.float16}.get(self.precision, torch.float32)
        for frozen in (vae, text_encoder):
            frozen.requires_grad_(False)
            frozen.eval().to(ctx.device, dtype=self.frozen_dtype)
        vae.to(memory_format=self.memory_format)
        self.vae, self.text_encoder = vae, text_encoder
        # What a step calls on the frozen parts; compile_frozen swaps in compiled ones.
        self.encode_images = lambda images: vae.encode(images).latent_dist.sample()
        self.encode_text = lambda ids: text_encoder(ids)[0]
        self.latent_scale = float(vae.config.scaling_factor)
        self.frozen_parameters = {"vae": sum(p.numel() for p in vae.parameters()),
                                  "text_encoder": sum(p.numel() for p in text_encoder.parameters())}
        self.images = self.token_ids = None
        self.setup(unet.to(ctx.device, memory_format=self.memory_format).train())

    # ---- models -----------------------------------------------------------
    def _build(self):
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel

        return (UNet2DConditionModel.from_config(self.configs["unet"]),
                AutoencoderKL.from_config(self.configs["vae"]),
                CLIPTextModel(CLIPTextConfig(**self.configs["text_encoder"])))

    def _load(self):
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTextModel

        folder = str(self.weights)
        try:
            parts = (UNet2DConditionModel.from_pretrained(folder, subfolder="unet",
                                                          local_files_only=True),
                     AutoencoderKL.from_pretrained(folder, subfolder="vae", local_files_only=True),
                     CLIPTextModel.from_pretrained(folder, subfolder="text_encoder",
                                                   local_files_only=True))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load weights from {folder}: {exc}",
                              "check the folder's unet/, vae/ and text_encoder/ files") from None
        # The configs recorded and counted are the loaded models' own.
        self.configs.update(unet=dict(parts[0].config), vae=dict(parts[1].config),
                            text_encoder=parts[2].config.to_diff_dict(), shrunk=None)
        return parts

    # ---- TorchTrainer -----------------------------------------------------
    def make_optimizer(self, parameters):
        import torch

        return torch.optim.AdamW(parameters, lr=0.0, betas=(0.9, 0.999), weight_decay=1e-2,
                                 fused=self.fused_optimizer or None)

    def learning_rate(self) -> float:
        return float(self.p.lr or 1e-4)

    def make_inputs(self, batch_size: int | None) -> None:
        import torch

        if batch_size is None:
            self.images = self.token_ids = None
            return
        device = self.ctx.device
        self.images = (torch.rand(batch_size, 3, self.image_size, self.image_size, device=device,
                                  dtype=self.frozen_dtype) * 2 - 1  # the VAE's [-1, 1] range
                       ).contiguous(memory_format=self.memory_format)
        text = self.text_encoder.config
        ids = torch.randint(0, min(text.vocab_size, sd2_config.BOS_TOKEN), (batch_size,
                            text.max_position_embeddings), device=device)
        if text.vocab_size > sd2_config.EOS_TOKEN:  # frame each prompt as the tokenizer would
            ids[:, 0], ids[:, -1] = sd2_config.BOS_TOKEN, sd2_config.EOS_TOKEN
        self.token_ids = ids

    def compute_loss(self):
        import torch
        import torch.nn.functional as F

        with torch.no_grad():
            latents = self.encode_images(self.images).float() * self.latent_scale
            text = self.encode_text(self.token_ids)
        noise = torch.randn_like(latents)
        steps = torch.randint(0, self.scheduler.config.num_train_timesteps, (latents.shape[0],),
                              device=latents.device)
        noisy = self.scheduler.add_noise(latents, noise, steps)
        target = self.scheduler.get_velocity(latents, noise, steps)
        predicted = self.model(noisy, steps, text).sample
        return F.mse_loss(predicted.float(), target, reduction="mean")

    def compile_frozen(self) -> None:
        """The frozen VAE encoder (512x512 every step) and text tower are a large
        share of the step: compiled too, not left eager beside the compiled UNet."""
        import torch

        self.encode_images = torch.compile(self.encode_images)
        self.encode_text = torch.compile(self.encode_text)

    def count_flops(self) -> dict:
        """The whole step per image: VAE encoding and text encoding (forward
        only, frozen) plus the UNet's forward and backward."""
        import torch
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTextConfig, CLIPTextModel

        batch = 2
        text_cfg = self.text_encoder.config
        latent = self.image_size // sd2_config.vae_downsampling(self.configs["vae"])
        with torch.device("meta"):
            unet = UNet2DConditionModel.from_config(self.unet_config())
            vae = AutoencoderKL.from_config(dict(self.vae.config))
            text_encoder = CLIPTextModel(CLIPTextConfig(**text_cfg.to_diff_dict()))
            images = torch.empty(batch, 3, self.image_size, self.image_size)
            ids = torch.zeros(batch, text_cfg.max_position_embeddings, dtype=torch.long)
            latents = torch.empty(batch, unet.config.in_channels, latent, latent)
            steps = torch.zeros(batch, dtype=torch.long)
            hidden = torch.empty(batch, text_cfg.max_position_embeddings, text_cfg.hidden_size)

        def encode_images():
            with torch.no_grad():
                vae.encode(images).latent_dist.sample()

        def encode_text():
            with torch.no_grad():
                text_encoder(ids)

        def unet_forward():
            unet(latents, steps, hidden)

        def unet_train():
            unet(latents, steps, hidden).sample.float().sum().backward()

        work = {name: flops.count_torch_work(fn) for name, fn in (
            ("vae_encode", encode_images), ("text_encode", encode_text),
            ("unet_forward", unet_forward), ("unet_train", unet_train))}
        parts = {name: w["flops"] / batch for name, w in work.items()}
        moved = {name: w["bytes"] / batch for name, w in work.items()}
        return {
            "train_bytes_per_image": moved["vae_encode"] + moved["text_encode"] + moved["unet_train"],
            "bytes_method": flops.BYTES_METHOD,
            "forward_per_image": parts["vae_encode"] + parts["text_encode"] + parts["unet_forward"],
            "train_per_image": parts["vae_encode"] + parts["text_encode"] + parts["unet_train"],
            "per_image_by_part": parts,
            "method": "torch.utils.flop_counter.FlopCounterMode on meta-device copies: VAE "
                      "encoder and text encoder forward, UNet forward+backward",
        }

    def unet_config(self) -> dict:
        return dict(self.module.config)

    def describe(self) -> dict:
        text = self.text_encoder.config
        latent = self.image_size // sd2_config.vae_downsampling(self.configs["vae"])
        return {
            "model": "Stable Diffusion v2 (diffusers UNet2DConditionModel, AutoencoderKL; "
                     "transformers CLIPTextModel)",
            "model_size": self.model_size,
            "weights": str(self.weights) if self.weights else "random",
            "image_size": self.image_size,
            "channels_last": self.channels_last,
            "frozen_parts_compiled": self.compiled,
            "latent_size": latent,
            "text_tokens": text.max_position_embeddings,
            "components": {
                "unet": {"trained": True, "parameters": self.parameters,
                         "dtype": "float32 (autocast)" if self.precision.endswith("mixed")
                         else "float32"},
                "vae": {"trained": False, "parts_used": "encoder",
                        "parameters": self.frozen_parameters["vae"],
                        "dtype": str(self.frozen_dtype).removeprefix("torch.")},
                "text_encoder": {"trained": False, "model": "OpenCLIP ViT-H text tower",
                                 "layers": text.num_hidden_layers,
                                 "parameters": self.frozen_parameters["text_encoder"],
                                 "dtype": str(self.frozen_dtype).removeprefix("torch.")},
            },
            "scheduler": {"class": "DDPMScheduler", **self.configs["scheduler"]},
            "latents_precomputed": False,
            "shrunk": self.configs["shrunk"],
            "optimizer": "AdamW(betas=(0.9, 0.999), weight_decay=1e-2) on the UNet",
            **self.describe_training(),
        }


def build(spec: dict, ctx) -> StableDiffusion2:
    return StableDiffusion2(spec, ctx)
