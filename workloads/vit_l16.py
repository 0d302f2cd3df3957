"""ViT-L/16 training (torchvision's vit_l_16), random initialisation,
synthetic images made once and kept on the device, AdamW, cross-entropy.

The `tiny` preset shrinks the transformer (model_size "tiny") so a step
takes milliseconds on a CPU; the result records what was shrunk.
"""
from __future__ import annotations

from hpcai.errors import UsageError
from hpcai.workloads import flops
from hpcai.workloads.torch_trainer import ImageClassifier
from hpcai.workloads.registry.vit_l16 import ViTL16Params

# torchvision's vit_l_16: 24 layers of width 1024, 16 heads, MLP 4096.
VIT_L16 = {"patch_size": 16, "num_layers": 24, "num_heads": 16, "hidden_dim": 1024, "mlp_dim": 4096}
TINY = {"num_layers": 2, "num_heads": 4, "hidden_dim": 64, "mlp_dim": 256}
MODEL_SIZES = ("full", "tiny")


class ViTL16(ImageClassifier):
    def __init__(self, spec: dict, ctx):
        super().__init__(spec, ctx)
        self.image_size = int(self.p.image_size)
        self.num_classes = int(self.p.num_classes)
        self.model_size = self.p.model_size
        if self.model_size not in MODEL_SIZES:
            raise UsageError(f"unknown model_size {self.model_size!r} for vit-l16",
                             f"choose one of: {', '.join(MODEL_SIZES)}")
        self.shrunk = TINY if self.model_size == "tiny" else {}
        self.arch = {**VIT_L16, **self.shrunk}
        if self.image_size % self.arch["patch_size"]:
            raise UsageError(f"image size {self.image_size} is not a multiple of the patch size "
                             f"{self.arch['patch_size']}", "use 224 (the paper's) or 64 (tiny)")
        model = self._build().to(ctx.device).train()
        self.images = self.labels = None
        self.setup(model)

    def _build(self):
        return build_model(self.image_size, self.num_classes, self.model_size)

    def make_optimizer(self, parameters):
        import torch

        return self.adam_or(parameters, lambda: torch.optim.AdamW(
            parameters, lr=0.0, betas=(0.9, 0.999), weight_decay=0.05,
            fused=self.fused_optimizer or None))

    def learning_rate(self) -> float:
        # DeiT's recipe: 5e-4 per 512 images of global batch.
        return float(self.p.lr or 5e-4 * self.batch_size * self.ctx.world_size / 512)

    def count_flops(self) -> dict:
        return flops_per_image(self.params)

    def describe(self) -> dict:
        return {
            "model": ("torchvision.models.vit_l_16" if not self.shrunk
                      else "torchvision VisionTransformer, ViT-L/16 shrunk"),
            "model_size": self.model_size,
            "architecture": self.arch,
            "shrunk": self.shrunk or None,
            "image_size": self.image_size,
            "num_classes": self.num_classes,
            "optimizer": ("Adam()" if self.p.optimizer == "adam"
                          else "AdamW(betas=(0.9, 0.999), weight_decay=0.05)"),
            **self.describe_training(),
        }


def build_model(image_size: int, num_classes: int, model_size: str):
    import torchvision

    if model_size != "tiny":
        return torchvision.models.vit_l_16(weights=None, image_size=image_size,
                                           num_classes=num_classes)
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(image_size=image_size, num_classes=num_classes, **{**VIT_L16, **TINY})


def flops_per_image(params: dict) -> dict:
    """The FLOP model (declared in registry/vit_l16.py): the ViT counted at the
    dispatcher on the meta device for these parameters."""
    p = ViTL16Params.from_dict(params)
    image_size, num_classes = int(p.image_size), int(p.num_classes)
    return flops.torch_image_model_flops(
        lambda: build_model(image_size, num_classes, p.model_size), image_size)


def build(spec: dict, ctx) -> ViTL16:
    return ViTL16(spec, ctx)
