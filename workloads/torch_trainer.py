"""What the PyTorch training workloads share: one process per GPU with DDP,
precision and loss scaling, the training step, `--batch-size auto`, FLOPs
and the GPU's peak, and peak memory.

A workload builds its model and calls setup(); it supplies the synthetic
inputs (make_inputs), the forward pass and loss (compute_loss), its optimizer
and its FLOPs per image.
"""
from __future__ import annotations

import abc

from hpcai.errors import UsageError
from hpcai.workloads import batch_search, catalog, distributed, flops
from hpcai.workloads import precision as prec
from hpcai.workloads.base import StepWorkload
from hpcai.workloads.memory import torch_peak_memory


class TorchTrainer(StepWorkload):
    unit = "images"

    def __init__(self, spec: dict, ctx):
        import torch

        self.spec, self.ctx, self.params = spec, ctx, spec["params"]
        self.p = catalog.params_for(spec)  # typed: the workload's TrainParams
        self.precision = prec.resolve(self.p.precision, ctx.device_type)
        if self.precision == "bf16-true":
            raise UsageError("bf16-true is for LLM pretraining (LitGPT)",
                             "use bf16-mixed, fp16-mixed, tf32 or fp32 for vision workloads")
        self.cudnn_benchmark = self.p.cudnn_benchmark is not False
        prec.configure(self.precision, ctx.device_type, self.cudnn_benchmark)
        self.compiled = bool(self.p.compile)
        torch.manual_seed(int(spec.get("seed", 0)) + ctx.rank)
        self.batch_size: int | None = None
        self.batch_size_search: dict | None = None
        self.lr: float | None = None
        self._loss = None
        self.pipeline = None  # InputPipeline when the data comes from storage (--data)

    # ---- what a workload supplies ---------------------------------------
    @abc.abstractmethod
    def make_inputs(self, batch_size: int | None) -> None:
        """Synthetic inputs for this batch size, on the device (None: free them)."""

    @abc.abstractmethod
    def compute_loss(self):
        """Forward pass and loss on the current inputs (autocast is already on)."""

    @abc.abstractmethod
    def make_optimizer(self, parameters):
        """The optimizer of the trained parameters."""

    @property
    def fused_optimizer(self) -> bool:
        """PyTorch's fused (single-kernel) optimizer step, where the preset asks for it on a GPU."""
        return bool(self.p.fused_optimizer) and self.ctx.device_type == "cuda"

    def adam_or(self, parameters, default):
        """The paper preset's Adam (lr set later), else the workload's own optimizer."""
        import torch

        if self.p.optimizer == "adam":
            return torch.optim.Adam(parameters, lr=0.0, fused=self.fused_optimizer or None)
        return default()

    def learning_rate(self) -> float:
        """Called once the batch size is known (it may scale with it)."""
        return float(self.p.lr or 1e-4)

    @abc.abstractmethod
    def count_flops(self) -> dict:
        """FLOPs per image: forward_per_image, train_per_image, method, ..."""

    # ---- set-up ----------------------------------------------------------
    def setup(self, module) -> None:
        """Place the trained module (DDP across processes), make the optimizer,
        settle the batch size (searching when it is "auto"), then compile."""
        import torch

        self.module = module
        self.parameters = sum(p.numel() for p in module.parameters())
        model = module
        if self.ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.ctx.local_rank] if self.ctx.device_type == "cuda" else None
            # Gradients as views into DDP's buckets: no second copy of them.
            model = DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True)
        self.ddp = self.model = model
        self.optimizer = self.make_optimizer(module.parameters())
        self._set_lr(0.0)  # search probes then do all the optimizer's work but change no weight
        self.scaler = prec.grad_scaler(self.precision, self.ctx.device_type)
        requested = self.p.batch_size
        if requested == "auto":
            # The search runs eagerly, before compiling: every size would recompile.
            start = catalog.batch_search_start(self.spec)
            self.batch_size_search = batch_search.find_for_torch(self, self.ctx, start)
        else:
            self.set_batch_size(int(requested))
        self.lr = self.learning_rate()
        self._set_lr(self.lr)
        if self.compiled:
            self.model = torch.compile(self.ddp)
            self.compile_frozen()
        self.flops = self.count_flops()

    def compile_frozen(self) -> None:
        """Compile the frozen parts a step runs besides the trained module (none
        here); called once the batch is settled, as the trained module is."""

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ---- hooks the batch-size search uses -------------------------------
    def set_batch_size(self, batch_size: int | None) -> None:
        self.make_inputs(None)  # free the old inputs before making new ones
        self.batch_size = batch_size
        if batch_size is not None:
            self.make_inputs(batch_size)

    def no_sync(self):
        return batch_search.no_sync(self.ddp)

    def reset_training_state(self) -> None:
        """Forget gradients, optimizer state and loss scale, as if freshly built.
        The weights are untouched: probes run with a learning rate of 0."""
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer.state.clear()
        self.scaler = prec.grad_scaler(self.precision, self.ctx.device_type)
        self._loss = None
        if self.ctx.device_type == "cpu":
            batch_search.reset_peak_rss()  # peak memory counts the run, not the search

    # ---- StepWorkload -----------------------------------------------------
    def step(self) -> int:
        self.optimizer.zero_grad(set_to_none=True)
        with prec.autocast(self.precision, self.ctx.device_type):
            loss = self.compute_loss()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._loss = loss.detach()
        return self.batch_size

    def latest_loss(self) -> float | None:
        return None if self._loss is None else float(self._loss.float().item())

    def input_counters(self) -> tuple[float, int] | None:
        """Seconds waited for data and bytes read so far (None: preloaded inputs)."""
        return self.pipeline.counters() if self.pipeline is not None else None

    def input_description(self) -> dict | None:
        return self.pipeline.describe() if self.pipeline is not None else None

    def describe_training(self) -> dict:
        """The configuration every PyTorch trainer records."""
        gpus = self.ctx.local_world_size if self.ctx.device_type == "cuda" else 0
        doc = {
            "parameters": self.parameters,
            "batch_size_per_process": self.batch_size,
            "global_batch_size": self.batch_size * self.ctx.world_size,
            "precision": self.precision,
            "compile": self.compiled,
            "cudnn_benchmark": self.cudnn_benchmark if self.ctx.device_type == "cuda" else None,
            "optimizer_fused": self.fused_optimizer,
            "learning_rate": self.lr,
            "flops_per_unit": self.flops["train_per_image"],
            "bytes_per_unit": self.flops.get("train_bytes_per_image"),
            "bytes_method": self.flops.get("bytes_method"),
            "flops": self.flops,
            "peak_tflops": flops.peak_for(distributed.device_name(self.ctx), self.precision, gpus),
        }
        if self.batch_size_search is not None:
            doc["batch_size_search"] = self.batch_size_search
        return doc

    def peak_memory(self) -> dict:
        return torch_peak_memory(self.ctx)


class ImageClassifier(TorchTrainer):
    """Synthetic images and labels kept on the device (the default), or JPEG
    files decoded and augmented by a DataLoader (--data); cross-entropy: what
    ResNet-50 and ViT-L/16 share. Subclasses set image_size, num_classes
    and (for NHWC) memory_format before setup()."""

    memory_format = None  # torch.contiguous_format

    def make_inputs(self, batch_size: int | None) -> None:
        import torch

        if batch_size is None:
            self.images = self.labels = None
            self.pipeline = None
            return
        if self.p.data:
            from hpcai.workloads.input_pipeline import InputPipeline

            self.pipeline = InputPipeline(self.spec, self.ctx, batch_size,
                                          image_size=self.image_size,
                                          num_classes=self.num_classes,
                                          memory_format=self.memory_format)
            return
        images = torch.randn(batch_size, 3, self.image_size, self.image_size, device=self.ctx.device)
        self.images = images.contiguous(memory_format=self.memory_format or torch.contiguous_format)
        self.labels = torch.randint(0, self.num_classes, (batch_size,), device=self.ctx.device)

    def compute_loss(self):
        import torch.nn.functional as F

        if self.pipeline is not None:
            self.images, self.labels = self.pipeline.next()
        return F.cross_entropy(self.model(self.images), self.labels)
