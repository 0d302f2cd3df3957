"""ResNet-50 training (torchvision), random initialisation, synthetic images
made once and kept on the device, SGD with momentum, cross-entropy.
"""
from __future__ import annotations

import resource

from hpcai.workloads import precision as prec
from hpcai.workloads.base import StepWorkload

# Forward + backward of ResNet-50 at 224x224: 3 x 4.09 GFLOPs (multiply-add = 2).
TRAIN_FLOPS_PER_IMAGE_224 = 3 * 2 * 4.089e9


class ResNet50(StepWorkload):
    unit = "images"

    def __init__(self, spec: dict, ctx):
        import torch
        import torchvision

        params = spec["params"]
        self.ctx = ctx
        self.batch_size = int(params["batch_size"])
        self.image_size = int(params["image_size"])
        num_classes = int(params.get("num_classes", 1000))
        self.precision = prec.resolve(params.get("precision", "auto"), ctx.device_type)
        prec.configure(self.precision, ctx.device_type)
        channels_last = params.get("channels_last", "auto")
        # NHWC feeds tensor cores on GPUs and oneDNN's fast bf16 kernels on CPUs.
        self.channels_last = True if channels_last == "auto" else bool(channels_last)
        self.compiled = bool(params.get("compile", False))
        memory_format = torch.channels_last if self.channels_last else torch.contiguous_format

        torch.manual_seed(int(spec.get("seed", 0)) + ctx.rank)
        model = torchvision.models.resnet50(weights=None, num_classes=num_classes)
        model = model.to(ctx.device, memory_format=memory_format)
        self.parameters = sum(p.numel() for p in model.parameters())
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [ctx.local_rank] if ctx.device_type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=ids)
        if self.compiled:
            model = torch.compile(model)
        self.model = model.train()
        # Linear scaling rule (Goyal et al.): 0.1 per 256 images of global batch.
        self.lr = float(params.get("lr") or 0.1 * self.batch_size * ctx.world_size / 256)
        self.optimizer = torch.optim.SGD(
            model.parameters(), lr=self.lr, momentum=0.9,
            weight_decay=1e-4,
        )
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.scaler = prec.grad_scaler(self.precision, ctx.device_type)
        self.images = torch.randn(
            self.batch_size, 3, self.image_size, self.image_size, device=ctx.device
        ).contiguous(memory_format=memory_format)
        self.labels = torch.randint(0, num_classes, (self.batch_size,), device=ctx.device)
        self._loss = None

    def step(self) -> int:
        self.optimizer.zero_grad(set_to_none=True)
        with prec.autocast(self.precision, self.ctx.device_type):
            loss = self.loss_fn(self.model(self.images), self.labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._loss = loss.detach()
        return self.batch_size

    def latest_loss(self) -> float | None:
        return None if self._loss is None else float(self._loss.float().item())

    def describe(self) -> dict:
        return {
            "model": "torchvision.models.resnet50",
            "parameters": self.parameters,
            "batch_size_per_process": self.batch_size,
            "global_batch_size": self.batch_size * self.ctx.world_size,
            "image_size": self.image_size,
            "precision": self.precision,
            "channels_last": self.channels_last,
            "compile": self.compiled,
            "optimizer": "SGD(momentum=0.9, weight_decay=1e-4)",
            "learning_rate": self.lr,
            "flops_per_unit": TRAIN_FLOPS_PER_IMAGE_224 * (self.image_size / 224) ** 2,
        }

    def peak_memory(self) -> dict:
        import torch

        if self.ctx.device_type == "cuda":
            return {"kind": "device", "bytes": int(torch.cuda.max_memory_allocated(self.ctx.device))}
        # No device memory on CPU: the process's peak resident set instead.
        return {"kind": "host_rss", "bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def build(spec: dict, ctx) -> ResNet50:
    return ResNet50(spec, ctx)
