"""The two pieces hpcai plugs into LitGPT's own pretraining loop
(litgpt.pretrain.main/fit): a Fabric logger that timestamps every step, and
a data module of random token ids.

LitGPT's loop logs once per iteration (log_interval=1) right after
`loss.item()`, which waits for the device; so the time this logger is
called is the end of that iteration on the device, in wall-clock seconds
comparable with the power samples. Imports Lightning and LitGPT: import it
only from inside a running workload.
"""
from __future__ import annotations

import time

import torch
from lightning.fabric.loggers import Logger
from litgpt.data import DataModule
from torch.utils.data import DataLoader, Dataset


class MeasurementComplete(Exception):
    """Raised from the logger after the protocol's last step: it leaves
    LitGPT's loop before it saves a final checkpoint (tens of GB for 8B)."""


class StepClock(Logger):
    """Passes (wall time, perf_counter, LitGPT's metrics) of each training
    iteration to on_step; on_step returns True once it has seen enough."""

    def __init__(self, on_step):
        super().__init__()
        self._on_step = on_step

    @property
    def name(self) -> str:
        return "hpcai-step-clock"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        if "iter" not in metrics:  # validation metrics: not a training step
            return
        wall, perf = time.time(), time.perf_counter()
        if self._on_step(wall, perf, metrics):
            raise MeasurementComplete()


class RandomTokens(Dataset):
    """Sample i: uniformly random token ids, the same for every run and rank."""

    def __init__(self, samples: int, length: int, vocab_size: int, seed: int):
        self.samples, self.length, self.vocab_size, self.seed = samples, length, vocab_size, seed

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        return torch.randint(0, self.vocab_size, (self.length,), generator=generator)


class SyntheticTokens(DataModule):
    """`--data synthetic`: random ids instead of a tokenized corpus, so no
    tokenizer is needed. Sequences are packed to the same fixed length as
    LitGPT's TextFiles gives, so the step's work is the same."""

    def __init__(self, vocab_size: int, seed: int = 0, num_workers: int = 0,
                 train_samples: int = 100_000, val_samples: int = 64):
        super().__init__()
        self.vocab_size, self.seed, self.num_workers = vocab_size, seed, num_workers
        self.train_samples, self.val_samples = train_samples, val_samples
        self.batch_size, self.length = 1, 2

    def connect(self, tokenizer=None, batch_size: int = 1, max_seq_length: int = -1, **kwargs) -> None:
        self.batch_size = batch_size
        self.length = max_seq_length + 1  # inputs and the next-token targets

    def _loader(self, samples: int, seed: int) -> DataLoader:
        return DataLoader(RandomTokens(samples, self.length, self.vocab_size, seed),
                          batch_size=self.batch_size, num_workers=self.num_workers,
                          shuffle=False, drop_last=True)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_samples, self.seed)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_samples, self.seed + 1)
