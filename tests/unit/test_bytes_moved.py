"""Bytes moved per unit of work (the arithmetic intensity's denominator),
counted beside the FLOPs, against hand counts of tiny models."""
import pytest

from hpcai.workloads import flops


def test_a_linear_layers_training_step_against_a_hand_count():
    import torch

    with torch.device("meta"):
        layer = torch.nn.Linear(8, 4)  # weight 4x8, bias 4
        x = torch.empty(2, 8)

    work = flops.count_torch_work(lambda: layer(x).sum().backward())
    # Hand count, in fp32 elements (4 bytes each); views (weight.t(), expand) move nothing:
    #   addmm(bias, x, W^T) -> y:      4 + 16 + 32 in, 8 out     = 60
    #   sum(y):                        8 in, 1 out               =  9
    #   ones_like(loss) (the seed grad): 1 in, 1 out             =  2
    #   mm(dy^T, x) -> dW:             8 + 16 in, 32 out         = 56
    #   sum(dy, dim=0) -> db:          8 in, 4 out               = 12
    # x needs no gradient, so there is no dx product.           = 139 elements
    assert work["bytes"] == 139 * 4
    # FLOPs: 2*2*8*4 forward, 2*2*8*4 for dW (no dx): 256
    assert work["flops"] == 256


def test_a_half_precision_forward_counts_two_bytes_an_element():
    import torch

    with torch.device("meta"):
        layer = torch.nn.Linear(8, 4, bias=False).half()
        x = torch.empty(2, 8, dtype=torch.float16)
    # mm(x, W^T): 16 + 32 in, 8 out = 56 elements of 2 bytes
    assert flops.count_torch_work(lambda: layer(x))["bytes"] == 56 * 2


def test_image_model_counts_carry_bytes_and_say_they_are_an_upper_bound():
    import torch

    def build():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 2))

    counted = flops.torch_image_model_flops(build, 8)
    assert counted["train_bytes_per_image"] > 0 and "upper bound" in counted["bytes_method"]
    # every image reads at least its own pixels
    assert counted["train_bytes_per_image"] >= 3 * 8 * 8 * 4


def test_keras_bytes_against_a_hand_count():
    import os

    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    # per image: 8 inputs + 4 outputs, fp32 = 48 B; weights 32 + 4 fp32 = 144 B over a batch of 2 = 72 B
    assert flops.keras_forward_bytes(model, 2) == pytest.approx(120.0)
    counted = flops.keras_image_model_flops(model, 2)
    assert counted["train_bytes_per_image"] == pytest.approx(360.0) and "upper bound" in counted["bytes_method"]
