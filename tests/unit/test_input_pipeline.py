"""The input pipeline for --data with a real torch DataLoader (no workers, so
it stays quick): batches of the trained shape, labels from the class folders,
volumes and targets from NumPy shards, the wait and bytes counted, passes
wrapping round, and a dataset that disagrees with its manifest refused."""
from types import SimpleNamespace

import pytest

from hpcai.errors import UsageError
from hpcai.workloads import datasets
from hpcai.workloads.input_pipeline import InputPipeline

CPU = SimpleNamespace(device_type="cpu", device="cpu", world_size=1, rank=0, local_world_size=1)


def spec(workload, folder):
    return {"workload": workload, "seed": 0, "params": {"data": str(folder), "data_workers": 0}}


def test_jpeg_batches_have_the_trained_shape_and_count_the_bytes(tmp_path):
    manifest = datasets.make("resnet50", "jpeg", {"image_size": 48}, 6, tmp_path / "d", classes=3)
    pipe = InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 4, image_size=32, num_classes=10)
    x, y = pipe.next()
    assert tuple(x.shape) == (4, 3, 32, 32) and y.tolist() and max(y.tolist()) < 3
    assert abs(float(x.mean())) < 3  # normalised, not raw 0..255
    x, y = pipe.next()  # 6 samples, batch 4, drop_last: the second batch starts a new pass
    assert pipe.passes == 1 and pipe.samples == 8
    assert 0 < pipe.bytes <= manifest["bytes"] * 2 and pipe.counters()[0] > 0
    assert pipe.describe()["format"] == "jpeg" and pipe.describe()["workers"] == 0


def test_npy_shards_give_volumes_and_targets(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "SHARD_BYTES", 2 * 4 * 2 * 4 ** 3)  # two samples a shard
    datasets.make("cosmoflow", "npy", {"cube": 4, "channels": 2}, 5, tmp_path / "v", targets=3)
    pipe = InputPipeline(spec("cosmoflow", tmp_path / "v"), CPU, 2)
    x, y = pipe.next()
    assert tuple(x.shape) == (2, 2, 4, 4, 4) and tuple(y.shape) == (2, 3)
    assert pipe.bytes == 2 * 4 * 2 * 4 ** 3


def test_a_dataset_that_disagrees_with_its_manifest_or_is_too_small_is_refused(tmp_path):
    datasets.make("resnet50", "jpeg", {"image_size": 32}, 3, tmp_path / "d", classes=1)
    with pytest.raises(UsageError, match="fewer than one global batch"):
        InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 4, image_size=32, num_classes=10)
    next((tmp_path / "d").glob("class-*/*.jpg")).unlink()
    with pytest.raises(UsageError, match="holds 2 samples, its manifest 3"):
        InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 1, image_size=32, num_classes=10)


def old_pipeline_image(path, image_size):
    """The pipeline before uint8 on the wire: PIL decode, crop, flip, fp32 ToTensor, Normalize."""
    from PIL import Image
    from torchvision import transforms

    from hpcai.workloads.input_pipeline import MEAN, STD

    transform = transforms.Compose([transforms.RandomResizedCrop(image_size, antialias=True),
                                    transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    transforms.Normalize(MEAN, STD)])
    return transform(Image.open(path).convert("RGB"))


def test_uint8_on_the_wire_normalised_on_the_device_gives_the_images_of_the_fp32_pipeline(tmp_path):
    import torch

    datasets.make("resnet50", "jpeg", {"image_size": 48}, 4, tmp_path / "d", classes=2)
    pipe = InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 4, image_size=32, num_classes=10)
    dataset = pipe.loader.dataset
    for index in range(len(dataset)):
        torch.manual_seed(index)  # the same crop and flip for both
        wire, label, _ = dataset[index]
        torch.manual_seed(index)
        before = old_pipeline_image(dataset.items[index][0], 32)
        assert wire.dtype == torch.uint8 and label == dataset.items[index][1]
        after = pipe.normalise(wire.unsqueeze(0))[0]
        # Two JPEG decoders and two antialiased resizes (PIL's, torch's) round apart by a
        # few levels of 255 at most; a wrong mean, std, channel order or flip is far more.
        assert after.shape == before.shape
        assert float((after - before).abs().mean()) < 0.02
        assert float((after - before).abs().max()) < 0.1


def test_the_result_says_where_jpegs_were_decoded_and_what_travelled(tmp_path):
    datasets.make("resnet50", "jpeg", {"image_size": 32}, 4, tmp_path / "d", classes=2)
    pipe = InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 2, image_size=32, num_classes=10)
    doc = pipe.describe()
    assert doc["jpeg_decode"] == "cpu" and "not a CUDA device" in doc["jpeg_decode_note"]
    assert doc["wire_dtype"] == "uint8" and doc["normalised_on"] == "device"
    assert doc["wait_timing"] == "host clock" and doc["device_prefetch"] is None
    x, _ = pipe.next()
    assert x.dtype.is_floating_point


def test_the_gpu_decode_path_gives_the_batch_the_workers_decode(tmp_path, monkeypatch):
    """The path nvJPEG takes (workers pass the files' bytes, the batch is decoded and
    augmented where the batch goes), run on the CPU: torchvision's decode_jpeg takes
    the same list with device="cpu". Same seed, same crops and flips, same pixels."""
    import torch

    from hpcai.workloads import input_pipeline

    datasets.make("resnet50", "jpeg", {"image_size": 48}, 4, tmp_path / "d", classes=2)
    workers = InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 4, image_size=32, num_classes=10)
    monkeypatch.setattr(input_pipeline, "gpu_decode_refused", lambda ctx, dataset: None)
    on_device = InputPipeline(spec("resnet50", tmp_path / "d"), CPU, 4, image_size=32, num_classes=10)
    assert on_device.decode == "cuda" and on_device.loader.dataset.raw
    torch.manual_seed(5)
    x_workers, y_workers = workers.next()
    torch.manual_seed(5)
    x_device, y_device = on_device.next()
    assert torch.equal(y_workers, y_device) and torch.equal(x_workers, x_device)
    assert on_device.bytes == workers.bytes > 0
