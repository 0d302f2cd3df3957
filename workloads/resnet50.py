"""ResNet-50 training (torchvision), random initialisation, synthetic images
made once and kept on the device, SGD with momentum, cross-entropy.
"""
from __future__ import annotations

from hpcai.workloads import flops
from hpcai.workloads.registry.resnet50 import ResNet50Params
from hpcai.workloads.torch_trainer import ImageClassifier


class ResNet50(ImageClassifier):
    def __init__(self, spec: dict, ctx):
        import torch
        import torchvision

        super().__init__(spec, ctx)
        self.image_size = int(self.p.image_size)
        self.num_classes = int(self.p.num_classes)
        channels_last = self.p.channels_last
        # NHWC feeds tensor cores on GPUs and oneDNN's fast bf16 kernels on CPUs.
        self.channels_last = True if channels_last in ("auto", None) else bool(channels_last)
        self.memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        model = torchvision.models.resnet50(weights=None, num_classes=self.num_classes)
        model = model.to(ctx.device, memory_format=self.memory_format).train()
        self.images = self.labels = None
        self.setup(model)

    def make_optimizer(self, parameters):
        import torch

        return self.adam_or(parameters, lambda: torch.optim.SGD(
            parameters, lr=0.1, momentum=0.9, weight_decay=1e-4,
            fused=self.fused_optimizer or None))

    def learning_rate(self) -> float:
        # Linear scaling rule (Goyal et al.): 0.1 per 256 images of global batch.
        return float(self.p.lr or 0.1 * self.batch_size * self.ctx.world_size / 256)

    def count_flops(self) -> dict:
        return flops_per_image(self.params)

    def describe(self) -> dict:
        return {
            "model": "torchvision.models.resnet50",
            "image_size": self.image_size,
            "num_classes": self.num_classes,
            "channels_last": self.channels_last,
            "optimizer": ("Adam()" if self.p.optimizer == "adam"
                          else "SGD(momentum=0.9, weight_decay=1e-4)"),
            **self.describe_training(),
        }


def flops_per_image(params: dict) -> dict:
    """The FLOP model (declared in registry/resnet50.py): torchvision's ResNet-50
    counted at the dispatcher on the meta device for these parameters."""
    import torchvision

    num_classes = int(ResNet50Params.from_dict(params).num_classes)
    return flops.torch_image_model_flops(
        lambda: torchvision.models.resnet50(weights=None, num_classes=num_classes),
        int(params["image_size"]))


def build(spec: dict, ctx) -> ResNet50:
    return ResNet50(spec, ctx)
