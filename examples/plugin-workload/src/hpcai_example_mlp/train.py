"""The MLP example's implementation: hpcai's PyTorch training loop
(TorchTrainer) with the model and synthetic inputs supplied here."""
from __future__ import annotations

from hpcai.workloads.torch_trainer import TorchTrainer

from hpcai_example_mlp.declaration import MlpParams


def build_model(p: MlpParams):
    import torch

    widths = [p.features] + [p.hidden] * p.layers
    layers = []
    for inputs, outputs in zip(widths, widths[1:]):
        layers += [torch.nn.Linear(inputs, outputs), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(widths[-1], p.num_classes))


def flops_per_sample(params: dict) -> dict:
    """The FLOP model: 2 FLOPs per weight forward, twice that backward (the
    gradients of inputs and weights); biases and activations left out."""
    p = MlpParams.from_dict(params)
    widths = [p.features] + [p.hidden] * p.layers + [p.num_classes]
    forward = 2 * sum(a * b for a, b in zip(widths, widths[1:]))
    # TorchTrainer records train_per_image as the FLOPs per unit of work (here a sample).
    return {"forward_per_image": forward, "train_per_image": 3 * forward,
            "method": "analytic: 2 x weights forward, 4 x weights backward"}


class Mlp(TorchTrainer):
    unit = "samples"

    def __init__(self, spec: dict, ctx):
        super().__init__(spec, ctx)
        self.inputs = self.labels = None
        self.setup(build_model(self.p).to(ctx.device).train())

    def make_inputs(self, batch_size: int | None) -> None:
        import torch

        if batch_size is None:
            self.inputs = self.labels = None
            return
        self.inputs = torch.randn(batch_size, self.p.features, device=self.ctx.device)
        self.labels = torch.randint(0, self.p.num_classes, (batch_size,), device=self.ctx.device)

    def compute_loss(self):
        import torch.nn.functional as F

        return F.cross_entropy(self.model(self.inputs), self.labels)

    def make_optimizer(self, parameters):
        import torch

        return self.adam_or(parameters, lambda: torch.optim.SGD(parameters, lr=0.0, momentum=0.9))

    def learning_rate(self) -> float:
        return float(self.p.lr or 0.01)

    def count_flops(self) -> dict:
        return flops_per_sample(self.params)

    def describe(self) -> dict:
        return {"model": f"MLP {self.p.features}-{'x'.join([str(self.p.hidden)] * self.p.layers)}"
                         f"-{self.p.num_classes}", **self.describe_training()}


def build(spec: dict, ctx) -> Mlp:
    return Mlp(spec, ctx)
