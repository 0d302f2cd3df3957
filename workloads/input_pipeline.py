"""Training data from storage (`--data DIR`): a torch DataLoader with worker
processes, pinned memory and, for images, JPEG decode and augmentation, over
a dataset written by `hpcai-launch data make` (workloads/datasets.py).

Every batch is timed: how long the step waited for it (the loader, then the
copy to the device) and how many bytes the workers read for it. The protocol
reads the running totals at each epoch boundary (MAELSTROM's runtime split).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from hpcai.errors import UsageError
from hpcai.workloads import datasets
from hpcai.workloads import catalog

# ImageNet's channel statistics, as torchvision's reference recipe uses.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class JpegFolder:
    """ImageFolder layout: class-NNNN/*.jpg; decode, random resized crop, flip."""

    def __init__(self, root: Path, image_size: int, num_classes: int):
        from torchvision import transforms

        folders = sorted(p for p in root.iterdir() if p.is_dir())
        if len(folders) > num_classes:
            raise UsageError(f"{root} has {len(folders)} classes, the model {num_classes}",
                             "make the dataset with fewer --classes")
        self.items = [(str(f), label) for label, folder in enumerate(folders)
                      for f in sorted(folder.iterdir()) if f.suffix == ".jpg"]
        self.transform = transforms.Compose([
            transforms.RandomResizedCrop(image_size, antialias=True),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD)])

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        import io

        from PIL import Image

        path, label = self.items[index]
        with open(path, "rb") as fh:
            raw = fh.read()
        image = Image.open(io.BytesIO(raw)).convert("RGB")
        return self.transform(image), label, len(raw)


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
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        params = spec["params"]
        self.root = Path(params["data"])
        self.manifest = datasets.load_manifest(self.root, spec["workload"])
        if self.manifest["format"] == "jpeg":
            dataset = JpegFolder(self.root, int(image_size), int(num_classes))
        else:
            dataset = NpyShards(self.root, self.manifest)
        if len(dataset) != int(self.manifest["count"]):
            raise UsageError(f"{self.root} holds {len(dataset)} samples, its manifest "
                             f"{self.manifest['count']}", "make the dataset again")
        if len(dataset) < batch_size * ctx.world_size:
            raise UsageError(f"{self.root} holds {len(dataset)} samples, fewer than one global "
                             f"batch ({batch_size} x {ctx.world_size})",
                             "make a larger dataset (--samples)")
        self.ctx, self.memory_format = ctx, memory_format
        workers = catalog.params_for(spec).data_workers
        self.workers = int(workers) if workers is not None else default_workers(ctx)
        self.pin = ctx.device_type == "cuda"
        self.sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                          shuffle=True, seed=int(spec.get("seed", 0)),
                                          drop_last=True)
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler,
                                 num_workers=self.workers, pin_memory=self.pin, drop_last=True,
                                 persistent_workers=self.workers > 0)
        self.passes = 0
        self._iter = None
        self.wait_s = 0.0
        self.bytes = 0
        self.samples = 0
        self._torch = torch

    def next(self):
        """The next batch on the device; the time until it is there is data wait."""
        torch = self._torch
        if self.ctx.device_type == "cuda":
            # The wait must not hide queued GPU work: the step before is finished first.
            torch.cuda.synchronize(self.ctx.device)
        start = time.perf_counter()
        if self._iter is None:
            self.sampler.set_epoch(self.passes)
            self._iter = iter(self.loader)
        try:
            x, y, nbytes = next(self._iter)
        except StopIteration:  # one pass over the data done: the next, reshuffled
            self.passes += 1
            self.sampler.set_epoch(self.passes)
            self._iter = iter(self.loader)
            x, y, nbytes = next(self._iter)
        x = x.to(self.ctx.device, non_blocking=self.pin)
        if self.memory_format is not None:
            x = x.contiguous(memory_format=self.memory_format)
        y = y.to(self.ctx.device, non_blocking=self.pin)
        if self.ctx.device_type == "cuda":
            torch.cuda.synchronize(self.ctx.device)
        self.wait_s += time.perf_counter() - start
        self.bytes += int(nbytes.sum())
        self.samples += int(x.shape[0])
        return x, y

    def counters(self) -> tuple[float, int]:
        """Running totals the protocol reads at each epoch boundary."""
        return self.wait_s, self.bytes

    def describe(self) -> dict:
        m = self.manifest
        return {"source": "storage", "path": str(self.root), "format": m["format"],
                "samples": m["count"], "bytes": m["bytes"], "sample_shape": m["sample_shape"],
                "manifest_checksum": m["checksum"], "workers": self.workers,
                "pin_memory": self.pin,
                "larger_than_memory": datasets.larger_than_memory(int(m["bytes"]))}


def default_workers(ctx) -> int:
    """The cores this process may use, shared among the node's ranks, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(8, cores // max(1, ctx.local_world_size)))
