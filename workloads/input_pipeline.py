"""Training data from storage (`--data DIR`): a torch DataLoader with worker
processes, pinned memory and, for images, JPEG decode and augmentation, over
a dataset written by `hpcai-launch data make` (workloads/datasets.py).

Images travel as uint8 (a quarter of fp32's bytes through the workers, the
pinned buffers and the host-to-device copy) and are normalised on the device.
On a GPU whose torchvision decodes JPEG (torchvision.io.decode_jpeg with a
CUDA device, nvJPEG) the workers only read the files and the GPU decodes;
otherwise the workers decode to uint8 on the CPU. The batch after this one is
prepared on a side stream while this step runs (workloads/device_prefetch.py).

Every batch is timed: how long the step waited for it and how many bytes the
workers read for it. The protocol reads the running totals at each epoch
boundary (MAELSTROM's runtime split).
"""
from __future__ import annotations

import os
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.workloads import datasets
from hpcai.workloads import catalog
from hpcai.workloads.device_prefetch import CudaStreams, DevicePrefetcher

# ImageNet's channel statistics, as torchvision's reference recipe uses.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class JpegFolder:
    """ImageFolder layout: class-NNNN/*.jpg; decode to uint8, random resized crop,
    flip. With `raw` the file's bytes are returned undecoded (the GPU decodes)."""

    def __init__(self, root: Path, image_size: int, num_classes: int, raw: bool = False):
        folders = sorted(p for p in root.iterdir() if p.is_dir())
        if len(folders) > num_classes:
            raise UsageError(f"{root} has {len(folders)} classes, the model {num_classes}",
                             "make the dataset with fewer --classes")
        self.items = [(str(f), label) for label, folder in enumerate(folders)
                      for f in sorted(folder.iterdir()) if f.suffix == ".jpg"]
        self.augment = augmentation(image_size)
        self.raw = raw

    def __len__(self) -> int:
        return len(self.items)

    def read(self, index: int):
        """The file's bytes as a uint8 tensor."""
        import torch

        with open(self.items[index][0], "rb") as fh:
            return torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8)

    def __getitem__(self, index: int):
        from torchvision.io import ImageReadMode, decode_jpeg

        raw = self.read(index)
        label, nbytes = self.items[index][1], int(raw.numel())
        if self.raw:
            return raw, label, nbytes
        return self.augment(decode_jpeg(raw, mode=ImageReadMode.RGB)), label, nbytes


def augmentation(image_size: int):
    """Random resized crop and flip, on a uint8 CHW tensor (CPU or GPU)."""
    from torchvision import transforms

    return transforms.Compose([transforms.RandomResizedCrop(image_size, antialias=True),
                               transforms.RandomHorizontalFlip()])


def raw_collate(batch):
    """Undecoded files stay a list (their lengths differ)."""
    import torch

    raws, labels, nbytes = zip(*batch)
    return list(raws), torch.tensor(labels), torch.tensor(nbytes)


class Normalise:
    """uint8 images to float, ImageNet-normalised, on the device: (x - 255 mean) / (255 std)."""

    def __init__(self, device):
        import torch

        self.mean = torch.tensor([255 * m for m in MEAN], device=device).view(1, 3, 1, 1)
        self.std = torch.tensor([255 * s for s in STD], device=device).view(1, 3, 1, 1)

    def __call__(self, x):
        return (x.float() - self.mean) / self.std


class NpyShards:
    """shard-NNNNN.npy (samples) and shard-NNNNN-y.npy (targets), memory-mapped
    and read one sample at a time (a dataset larger than memory reads from disk)."""

    def __init__(self, root: Path, manifest: dict):
        import numpy as np

        self.shards = sorted(p for p in root.glob("shard-*.npy") if not p.name.endswith("-y.npy"))
        self.counts = [int(np.load(p, mmap_mode="r").shape[0]) for p in self.shards]
        self.starts = [sum(self.counts[:i]) for i in range(len(self.counts))]
        self.sample_bytes = 4 * int(np.prod(manifest["sample_shape"]))
        self._open: dict[int, tuple] = {}

    def __len__(self) -> int:
        return sum(self.counts)

    def __getitem__(self, index: int):
        import bisect

        import numpy as np
        import torch

        shard = bisect.bisect_right(self.starts, index) - 1
        if shard not in self._open:  # per worker: maps survive fork badly, open lazily
            base = str(self.shards[shard])[:-4]
            self._open[shard] = (np.load(f"{base}.npy", mmap_mode="r"),
                                 np.load(f"{base}-y.npy", mmap_mode="r"))
        x, y = self._open[shard]
        row = index - self.starts[shard]
        return torch.from_numpy(np.array(x[row])), torch.from_numpy(np.array(y[row])), \
            self.sample_bytes


class InputPipeline:
    """An endless stream of device batches, with the wait and the bytes counted."""

    def __init__(self, spec: dict, ctx, batch_size: int, *, image_size: int | None = None,
                 num_classes: int | None = None, memory_format=None):
        from torch.utils.data import DataLoader, DistributedSampler

        self.root = Path(spec["params"]["data"])
        self.manifest = datasets.load_manifest(self.root, spec["workload"])
        self.ctx, self.memory_format = ctx, memory_format
        self.images = self.manifest["format"] == "jpeg"
        dataset = self._dataset(image_size, num_classes)
        _check_size(self.root, len(dataset), self.manifest, batch_size, ctx.world_size)
        workers = catalog.params_for(spec).data_workers
        self.workers = int(workers) if workers is not None else default_workers(ctx)
        self.pin = ctx.device_type == "cuda"
        self.sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                          shuffle=True, seed=int(spec.get("seed", 0)),
                                          drop_last=True)
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler,
                                 num_workers=self.workers, pin_memory=self.pin, drop_last=True,
                                 persistent_workers=self.workers > 0,
                                 collate_fn=raw_collate if self.decode == "cuda" else None)
        self.normalise = Normalise(ctx.device) if self.images else None
        streams = CudaStreams(ctx.device) if ctx.device_type == "cuda" else None
        self.prefetcher = DevicePrefetcher(self._host_batches(), self._to_device, streams)
        self.passes = 0
        self.bytes = 0
        self.samples = 0

    def _dataset(self, image_size, num_classes):
        """The files, and where JPEGs are decoded (self.decode, self.decode_note)."""
        self.decode, self.decode_note = None, None
        if not self.images:
            return NpyShards(self.root, self.manifest)
        dataset = JpegFolder(self.root, int(image_size), int(num_classes))
        self.decode_note = gpu_decode_refused(self.ctx, dataset)
        self.decode = "cpu" if self.decode_note else "cuda"
        dataset.raw = self.decode == "cuda"
        return dataset

    def _host_batches(self):
        """Batches from the loader, pass after pass, each pass reshuffled."""
        while True:
            self.sampler.set_epoch(self.passes)
            yield from self.loader
            self.passes += 1

    def _to_device(self, batch):
        """Called on the side stream on GPUs: copy (and decode), normalise."""
        x, y, nbytes = batch
        device, non_blocking = self.ctx.device, self.pin
        if self.decode == "cuda":
            import torch
            from torchvision.io import ImageReadMode, decode_jpeg

            decoded = decode_jpeg(x, mode=ImageReadMode.RGB, device=device)
            augment = self.loader.dataset.augment
            x = torch.stack([augment(image) for image in decoded])
        else:
            x = x.to(device, non_blocking=non_blocking)
        if self.normalise is not None:
            x = self.normalise(x)
        if self.memory_format is not None:
            x = x.contiguous(memory_format=self.memory_format)
        return (x, y.to(device, non_blocking=non_blocking)), int(nbytes.sum())

    def next(self):
        """The next batch on the device; the time the step waited for it is data wait."""
        (x, y), nbytes = self.prefetcher.next()
        self.bytes += nbytes
        self.samples += int(x.shape[0])
        return x, y

    @property
    def wait_s(self) -> float:
        return self.prefetcher.wait_s()

    def counters(self) -> tuple[float, int]:
        """Running totals the protocol reads at each epoch boundary."""
        return self.prefetcher.wait_s(), self.bytes

    def describe(self) -> dict:
        m, gpu = self.manifest, self.ctx.device_type == "cuda"
        doc = {"source": "storage", "path": str(self.root), "format": m["format"],
               "samples": m["count"], "bytes": m["bytes"], "sample_shape": m["sample_shape"],
               "manifest_checksum": m["checksum"], "workers": self.workers,
               "pin_memory": self.pin,
               "larger_than_memory": datasets.larger_than_memory(int(m["bytes"])),
               "device_prefetch": "side stream, one batch ahead" if gpu else None,
               "wait_timing": "cuda events" if gpu else "host clock"}
        if self.images:
            doc.update({"jpeg_decode": self.decode, "wire_dtype": "uint8",
                        "normalised_on": "device"})
            if self.decode_note:
                doc["jpeg_decode_note"] = self.decode_note
        return doc


def _check_size(root: Path, count: int, manifest: dict, batch_size: int, world_size: int) -> None:
    if count != int(manifest["count"]):
        raise UsageError(f"{root} holds {count} samples, its manifest {manifest['count']}",
                         "make the dataset again")
    if count < batch_size * world_size:
        raise UsageError(f"{root} holds {count} samples, fewer than one global batch "
                         f"({batch_size} x {world_size})",
                         "make a larger dataset (--samples)")


def gpu_decode_refused(ctx, dataset: JpegFolder) -> str | None:
    """Why JPEGs are not decoded on this device (None: they are, by nvJPEG):
    a trial decode of the first file, as torchvision builds without nvJPEG fail."""
    if ctx.device_type != "cuda":
        return "not a CUDA device: decoded by the loader's workers on the CPU"
    from torchvision.io import ImageReadMode, decode_jpeg

    try:
        decode_jpeg(dataset.read(0), mode=ImageReadMode.RGB, device=ctx.device)
    except (RuntimeError, TypeError) as exc:
        return f"torchvision cannot decode on the GPU ({' '.join(str(exc).split())[:160]}): CPU decode"
    return None


def default_workers(ctx) -> int:
    """The cores this process may use, shared among the node's ranks, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores // max(1, ctx.local_world_size)))
