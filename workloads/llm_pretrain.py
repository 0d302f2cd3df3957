"""Llama-3 pretraining with LitGPT's own training loop (litgpt.pretrain),
bf16, sharded over the node's GPUs with FSDP as `litgpt pretrain` does.

Processes: one per GPU under torchrun (process model "torchrun"). Lightning
Fabric recognises torchrun's environment and the process group the
entrypoint opened, so it launches nothing itself; every rank runs LitGPT's
loop on its own GPU, FSDP shards the model across all of them, and local
rank 0 samples the node's power as for every workload.

Timing: LitGPT's loop is unchanged. A Fabric logger (litgpt_hooks.StepClock)
timestamps the end of every iteration; LitGPT's printed throughput is not
used for the headline. Steps are grouped into the protocol's epochs: epoch k
runs from the end of the last step of epoch k-1 to the end of its own last
step, so data loading and logging count as training time; the first epoch
starts at its first step's end minus LitGPT's iteration time. Warm-up epochs
absorb compilation and the first slow steps.
"""
from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path

from hpcai.errors import UsageError, WorkloadError
from hpcai.workloads import distributed, heartbeat
from hpcai.workloads import flops as F
from hpcai.workloads import llm_assets
from hpcai.workloads import precision as prec
from hpcai.workloads.base import EngineWorkload
from hpcai.workloads.memory import torch_peak_memory
from hpcai.workloads.protocol import Epoch
from hpcai.workloads.registry.llama3_8b_pretrain import LlmPretrainParams
from hpcai.install import install_hint

# LitGPT's pretraining recipes (config_hub/pretrain): AdamW, lr 4e-4, wd 0.1.
OPTIMIZER = {"class_path": "torch.optim.AdamW",
             "init_args": {"lr": 4e-4, "weight_decay": 0.1, "betas": [0.9, 0.95]}}
FABRIC_PRECISION = {"bf16-mixed": "bf16-mixed", "fp16-mixed": "16-mixed",
                    "fp32": "32-true", "tf32": "32-true", "bf16-true": "bf16-true"}
SHARDING = ("FULL_SHARD", "HYBRID_SHARD", "SHARD_GRAD_OP")


def accumulation_steps(global_batch: int | None, micro_batch: int, world: int) -> int:
    """Micro-batches per optimizer step on each GPU: global / (micro x GPUs),
    as LitGPT's TrainArgs.gradient_accumulation_iters computes it."""
    if global_batch is None:
        return 1
    per_step = micro_batch * world
    if global_batch < per_step or global_batch % per_step:
        raise UsageError(f"--global-batch-size {global_batch} is not a multiple of --batch-size "
                         f"{micro_batch} x {world} GPU(s)",
                         f"use a multiple of {per_step}, e.g. {per_step * max(1, global_batch // per_step)}")
    return global_batch // per_step


class EpochClock:
    """Turns per-step timestamps into the protocol's epochs, as they complete."""

    def __init__(self, protocol: dict, tokens_per_step: int, progress, on_epoch=None):
        self.warmup = int(protocol["warmup_epochs"])
        self.total_epochs = self.warmup + int(protocol["epochs"])
        self.steps_per_epoch = int(protocol["steps_per_epoch"])
        self.tokens_per_step = tokens_per_step
        self.progress, self.on_epoch = progress, on_epoch
        self.steps: list[dict] = []
        self._start_wall = self._start_perf = None
        self._in_epoch = 0

    @property
    def total_steps(self) -> int:
        return self.total_epochs * self.steps_per_epoch

    @property
    def done(self) -> bool:
        return len(self.progress.epochs) >= self.total_epochs

    def step(self, wall: float, perf: float, iter_time_s: float, loss: float,
             extra: dict | None = None, micro_steps: int = 1) -> bool:
        """One finished (optimizer) step of `micro_steps` micro-batches, the last
        of which took iter_time_s; returns True when the last epoch is complete."""
        heartbeat.beat()  # every rank's step, for the launcher's stall watchdog
        if self._start_wall is None:
            first = iter_time_s * micro_steps  # the step's micro-batches take about as long each
            self._start_wall, self._start_perf = wall - first, perf - first
        index = len(self.progress.epochs)
        self.steps.append({"step": len(self.steps) + 1, "epoch": index, "warmup": index < self.warmup,
                           "end": wall, "iter_time_s": iter_time_s, "loss": loss, **(extra or {})})
        if self.progress.first_loss is None:
            self.progress.first_loss = loss
        self._in_epoch += 1
        if self._in_epoch == self.steps_per_epoch:
            epoch = Epoch(index, index < self.warmup, self.steps_per_epoch,
                          self.steps_per_epoch * self.tokens_per_step, self._start_wall, wall,
                          perf - self._start_perf, loss)
            self.progress.epochs.append(epoch)
            self._start_wall, self._start_perf, self._in_epoch = wall, perf, 0
            if self.on_epoch is not None:
                self.on_epoch(epoch, self.total_epochs)
        return self.done

    def measured_steps(self) -> list[dict]:
        return [s for s in self.steps if not s["warmup"] and s["epoch"] < len(self.progress.epochs)]


class ProgramClock(EpochClock):
    """In-run sweeps and adaptive windows (workloads/inrun.py): a program decides
    each epoch's steps as the epochs complete, from inside LitGPT's loop (every
    rank is in the logger at the same step, so the program's collectives line up)."""

    def __init__(self, protocol: dict, tokens_per_step: int, progress, on_epoch, program):
        super().__init__(protocol, tokens_per_step, progress, on_epoch)
        self.program = program
        self.finished = False
        self._request = self._next(None)

    def _next(self, epoch):
        try:
            return next(self.program) if epoch is None else self.program.send(epoch)
        except StopIteration:
            self.finished = True
            return None

    # LitGPT's loop needs a length; the program ends it. The learning-rate warm-up
    # keeps the fixed protocol's length (total_steps), as for one run per cap.
    max_steps = 10**7

    @property
    def done(self) -> bool:
        return self.finished

    def step(self, wall: float, perf: float, iter_time_s: float, loss: float,
             extra: dict | None = None, micro_steps: int = 1) -> bool:
        heartbeat.beat()
        if self.finished:
            return True
        if self._start_wall is None:
            first = iter_time_s * micro_steps
            self._start_wall, self._start_perf = wall - first, perf - first
        steps, warmup = self._request
        index = len(self.progress.epochs)
        self.steps.append({"step": len(self.steps) + 1, "epoch": index, "warmup": warmup,
                           "end": wall, "iter_time_s": iter_time_s, "loss": loss, **(extra or {})})
        if self.progress.first_loss is None:
            self.progress.first_loss = loss
        self._in_epoch += 1
        if self._in_epoch < steps:
            return False
        epoch = Epoch(index, warmup, steps, steps * self.tokens_per_step, self._start_wall, wall,
                      perf - self._start_perf, loss)
        self.progress.epochs.append(epoch)
        if self.on_epoch is not None:
            self.on_epoch(epoch, index + 1)
        self._request = self._next(epoch)  # may ask the launcher, settle, write a segment
        # The next epoch starts when the program gave it, not before its own work.
        self._start_wall, self._start_perf, self._in_epoch = time.time(), time.perf_counter(), 0
        return self.finished


@contextlib.contextmanager
def dynamo_disabled(disable: bool):
    """LitGPT's main() always calls torch.compile; this makes it a no-op."""
    import torch._dynamo

    previous = torch._dynamo.config.disable
    torch._dynamo.config.disable = disable or previous
    try:
        yield
    finally:
        torch._dynamo.config.disable = previous


def model_config(params: dict, weights: Path | None):
    """LitGPT's Config: the checkpoint's own, else the preset's name + overrides."""
    from litgpt.config import Config

    p = LlmPretrainParams.from_dict(params)
    if weights is not None and (weights / "model_config.yaml").is_file():
        return Config.from_file(weights / "model_config.yaml")
    name = p.model
    overrides = dict(p.model_overrides or {})
    new_name = overrides.pop("name", None)
    try:
        config = Config.from_name(name, **overrides)
    except ValueError:
        raise UsageError(f"LitGPT knows no model {name!r}",
                         "use a name from `litgpt pretrain list`") from None
    if new_name:
        config.name = new_name
    return config


def train_flops_per_token(config, seq_len: int) -> tuple[float, int]:
    """Forward + backward FLOPs per token and the parameter count."""
    work = train_work_per_token(config, seq_len)
    return work["flops"], work["parameters"]


def train_work_per_token(config, seq_len: int) -> dict:
    """Forward + backward FLOPs and bytes moved (an upper bound) per token,
    counted by PyTorch on a meta-device copy of LitGPT's model (as LitGPT's own
    measure_flops does); and the parameter count."""
    import torch
    from litgpt.model import GPT
    from litgpt.utils import chunked_cross_entropy

    with torch.device("meta"):
        model = GPT(config)
        model.max_seq_length = seq_len
        x = torch.randint(0, 1, (1, seq_len))

    def train():
        chunked_cross_entropy(model(x), x, chunk_size=0).backward()

    parameters = sum(p.numel() for p in model.parameters())
    work = F.count_torch_work(train)
    return {"flops": work["flops"] / seq_len, "bytes": work["bytes"] / seq_len, "parameters": parameters}


class LitgptPretrain(EngineWorkload):
    unit = "tokens"
    runs_programs = True  # run(program=...): in-run sweeps and adaptive windows

    def __init__(self, spec: dict, ctx):
        import torch

        params = spec["params"]
        p = LlmPretrainParams.from_spec(spec)
        self.spec, self.ctx = spec, ctx
        if p.batch_size == "auto":
            raise UsageError("--batch-size auto is not supported for LitGPT pretraining",
                             "give a micro-batch size per GPU, e.g. --batch-size 1")
        self.micro_batch = int(p.batch_size)
        global_batch = p.global_batch_size
        self.accumulation = accumulation_steps(int(global_batch) if global_batch else None,
                                               self.micro_batch, ctx.world_size)
        self.sharding = p.sharding
        if self.sharding not in SHARDING:
            raise UsageError(f"unknown FSDP sharding {self.sharding!r}",
                             f"choose one of: {', '.join(SHARDING)}")
        self.optimizer = copy.deepcopy(OPTIMIZER)
        if p.lr:
            self.optimizer["init_args"]["lr"] = float(p.lr)
        self.min_lr = float(p.min_lr)
        self.out_dir = Path(spec["output_dir"]) / "litgpt"
        self.weights = (llm_assets.resolve_site_path(p.weights, llm_assets.MODELS_DIR_ENV,
                                                     "checkpoint folder", "--weights")
                        if p.weights else None)
        if self.weights is not None and not (self.weights / "lit_model.pth").is_file():
            raise UsageError(f"{self.weights} holds no lit_model.pth",
                             "point --weights at a LitGPT checkpoint folder "
                             "(`litgpt download` / `litgpt convert_to_litgpt` make one)")
        self.config = model_config(params, self.weights)
        self.seq_len = int(p.seq_len or self.config.block_size)
        if not 1 <= self.seq_len <= self.config.block_size:
            raise UsageError(f"--seq-len {self.seq_len} is outside 1-{self.config.block_size}",
                             f"{self.config.name} takes at most {self.config.block_size} tokens")
        self.data_kind, self.data_dir, self.tokenizer_dir = self._resolve_data(p)
        self.precision = prec.resolve(p.precision, ctx.device_type)
        prec.configure(self.precision, ctx.device_type)
        self.compiled = ctx.device_type == "cuda" if p.compile in (None, "auto") else bool(p.compile)
        self.workers = int(p.data_workers)
        self.seed = int(spec.get("seed", 0))
        work = train_work_per_token(self.config, self.seq_len)
        self.flops_per_token, self.bytes_per_token, self.parameters = work["flops"], work["bytes"], work["parameters"]
        self.strategy = ("fsdp" if ctx.device_type == "cuda" else "ddp") \
            if ctx.world_size > 1 else "single-device"
        self.clock: EpochClock | None = None
        self._litgpt_items_per_sec = None
        self._state: dict | None = None  # LitGPT's training state (model, optimizer, counters)
        self.observed: dict = {}  # what the running model holds: parameter and optimizer dtypes
        torch.manual_seed(self.seed)

    # ---- set-up ---------------------------------------------------------
    def _resolve_data(self, p: LlmPretrainParams) -> tuple[str, Path | None, Path | None]:
        data = p.data or "synthetic"
        if data == "synthetic":
            return "synthetic", None, None
        folder = llm_assets.resolve_site_path(data, llm_assets.DATA_DIR_ENV, "data folder", "--data")
        texts = sorted(folder.glob("*.txt"))
        if len(texts) < 2:
            raise UsageError(f"{folder} holds {len(texts)} .txt file(s); LitGPT's TextFiles needs "
                             "at least two (the first is held out for validation)",
                             "add text files, or use --data synthetic")
        source = p.tokenizer or (str(self.weights) if self.weights else None)
        if source is None:
            raise UsageError("text data needs the model's tokenizer",
                             "pass --tokenizer DIR (tokenizer.json + tokenizer_config.json) "
                             "or --weights DIR, or use --data synthetic")
        tokenizer = llm_assets.resolve_site_path(source, llm_assets.MODELS_DIR_ENV,
                                                 "tokenizer folder", "--tokenizer")
        from litgpt import Tokenizer

        try:
            vocab = Tokenizer(tokenizer).vocab_size
        except Exception as exc:  # tokenizers raises plain Exception on a bad file
            raise UsageError(f"cannot load a tokenizer from {tokenizer} ({exc or type(exc).__name__})",
                             "the folder needs tokenizer.json and tokenizer_config.json") from None
        if vocab > self.config.padded_vocab_size:
            raise UsageError(f"the tokenizer in {tokenizer} has {vocab} tokens, more than "
                             f"{self.config.name}'s vocabulary of {self.config.padded_vocab_size}",
                             "use the model's own tokenizer")
        return "text", folder, tokenizer

    def _data_module(self):
        if self.data_kind == "synthetic":
            from hpcai.workloads.litgpt_hooks import SyntheticTokens

            return SyntheticTokens(self.config.padded_vocab_size, seed=self.seed,
                                   num_workers=self.workers)
        from litgpt.data import TextFiles

        data = TextFiles(train_data_path=self.data_dir, seed=self.seed, num_workers=self.workers)
        # Tokenized chunks go into the run's folder, not into the site's data folder.
        data.out_path_train = self.out_dir / "data" / "train"
        data.out_path_val = self.out_dir / "data" / "val"
        return data

    def _fabric(self, clock_logger):
        import lightning as L

        ctx = self.ctx
        strategy = "auto"
        if self.strategy == "fsdp":
            from lightning.fabric.strategies import FSDPStrategy
            from litgpt.model import Block

            # As litgpt.pretrain.setup builds it for more than one device.
            strategy = FSDPStrategy(auto_wrap_policy={Block}, state_dict_type="full",
                                    sharding_strategy=self.sharding)
        elif self.strategy == "ddp":
            strategy = "ddp"  # Lightning has no FSDP on CPUs
        nodes = max(1, ctx.world_size // ctx.local_world_size)
        fabric = L.Fabric(accelerator="cuda" if ctx.device_type == "cuda" else "cpu",
                          devices=ctx.local_world_size, num_nodes=nodes, strategy=strategy,
                          precision=FABRIC_PRECISION[self.precision], loggers=[clock_logger])
        fabric.launch()
        return fabric, nodes

    # ---- the run --------------------------------------------------------
    def run(self, protocol: dict, progress, on_epoch=None, program=None) -> None:
        from hpcai.workloads.litgpt_hooks import MeasurementComplete, StepClock

        # A step is one optimizer step: `accumulation` micro-batches on each GPU.
        tokens_per_step = self.micro_batch * self.accumulation * self.seq_len
        clock = self.clock = (EpochClock(protocol, tokens_per_step, progress, on_epoch)
                              if program is None else
                              ProgramClock(protocol, tokens_per_step, progress, on_epoch, program))
        if clock.done:
            return

        def on_step(wall, perf, metrics) -> bool:
            self._litgpt_items_per_sec = metrics.get("device/items_per_sec")
            if not self.observed:
                self.observed = self._observe()
            # LitGPT logs once per optimizer step (log_interval 1 x accumulation iterations).
            extra = {"iter": int(metrics["iter"]), "optimizer_step": int(metrics["step"]),
                     "tokens_this_rank": int(metrics["tokens"])}
            return clock.step(wall, perf, float(metrics["iter_time"]), float(metrics["loss"]),
                              extra, micro_steps=self.accumulation)

        fabric, nodes = self._fabric(StepClock(on_step))
        try:
            self._litgpt_main(fabric, nodes, self._train_args(clock, tokens_per_step))
        except MeasurementComplete:
            # The energy counter is read at the window's end from the samples
            # around it: let the sampler tick past the end before returning.
            end = progress.epochs[-1].end
            time.sleep(max(0.0, end + 2 * float(protocol["sample_interval_s"]) - time.time()))
            return
        raise WorkloadError(f"LitGPT's loop ended after {len(clock.steps)} of "
                            f"{clock.total_steps} steps",
                            "see its output above")

    def _train_args(self, clock, tokens_per_step: int):
        from litgpt.args import TrainArgs

        world = self.ctx.world_size
        return TrainArgs(
            save_interval=None, log_interval=1,
            global_batch_size=self.micro_batch * self.accumulation * world,
            micro_batch_size=self.micro_batch,
            # Two spare steps: the clock, not LitGPT, ends the loop (before its final save).
            max_tokens=(getattr(clock, "max_steps", clock.total_steps) + 2)
            * tokens_per_step * world,
            max_seq_length=self.seq_len, max_norm=1.0, min_lr=self.min_lr,
            lr_warmup_steps=max(1, clock.total_steps // 4), tie_embeddings=False,
        )

    def _litgpt_main(self, fabric, nodes: int, train) -> None:
        """LitGPT's own pretraining main, its fit() wrapped to keep its state."""
        from litgpt import pretrain as litgpt_pretrain
        from litgpt.args import EvalArgs

        evaluation = EvalArgs(interval=10**9, max_iters=2, initial_validation=False,
                              final_validation=False)
        tokenizer = None
        if self.tokenizer_dir is not None:
            from litgpt import Tokenizer

            tokenizer = Tokenizer(self.tokenizer_dir)
        original_fit = litgpt_pretrain.fit

        def fit(**kwargs):  # LitGPT's main calls fit(...) with keywords; keep its state
            self._state = kwargs.get("state")
            return original_fit(**kwargs)

        litgpt_pretrain.fit = fit
        try:
            with dynamo_disabled(not self.compiled):
                litgpt_pretrain.main(
                    fabric=fabric, devices=self.ctx.local_world_size, num_nodes=nodes,
                    seed=self.seed, initial_checkpoint_dir=self.weights, resume=False,
                    config=self.config, data=self._data_module(), out_dir=self.out_dir,
                    tokenizer_dir=self.tokenizer_dir, tokenizer=tokenizer, train=train,
                    eval=evaluation, optimizer=copy.deepcopy(self.optimizer))  # LitGPT edits it
        finally:
            litgpt_pretrain.fit = original_fit

    def _observe(self) -> dict:
        """The dtypes the trained model and its optimizer state really hold
        (bf16-true: bf16 for both; mixed: fp32 weights)."""
        state = self._state or {}
        model, optimizer = state.get("model"), state.get("optimizer")
        if model is None:
            return {}
        params = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
        moments = set()
        if optimizer is not None:
            # The wrapped optimizer's own (local, sharded) state: Fabric's state_dict()
            # would gather FSDP's whole optimizer state, a collective of tens of GB.
            raw = getattr(optimizer, "optimizer", optimizer)
            for entry in raw.state.values():
                moments |= {str(v.dtype).replace("torch.", "") for k, v in entry.items()
                            if k != "step" and hasattr(v, "dtype")}
        return {"parameter_dtypes": params, "optimizer_state_dtypes": sorted(moments)}

    # ---- what the result records ---------------------------------------------
    def latest_loss(self) -> float | None:
        return self.clock.steps[-1]["loss"] if self.clock and self.clock.steps else None

    def describe(self) -> dict:
        from importlib.metadata import version

        cfg = self.config
        return {
            "engine": "litgpt.pretrain (LitGPT's own loop, Lightning Fabric)",
            "litgpt_version": version("litgpt"),
            "lightning_version": version("lightning"),
            "model": cfg.name,
            "model_config": {k: getattr(cfg, k) for k in (
                "n_layer", "n_embd", "n_head", "n_query_groups", "intermediate_size",
                "vocab_size", "padded_vocab_size", "block_size", "rope_base")},
            "parameters": self.parameters,
            "initialisation": f"checkpoint {self.weights}" if self.weights else "random",
            "data": ("synthetic (random token ids)" if self.data_kind == "synthetic"
                     else f"text files in {self.data_dir}"),
            "tokenizer": str(self.tokenizer_dir) if self.tokenizer_dir else None,
            "seq_len": self.seq_len,
            "micro_batch_size": self.micro_batch,
            "batch_size_per_process": self.micro_batch,
            "gradient_accumulation_steps": self.accumulation,
            "global_batch_size": self.micro_batch * self.accumulation * self.ctx.world_size,
            # A step is one optimizer step: every micro-batch it accumulates.
            "tokens_per_step_per_process": self.micro_batch * self.accumulation * self.seq_len,
            "precision": self.precision,
            "fabric_precision": FABRIC_PRECISION[self.precision],
            **self.observed,
            "strategy": self.strategy,
            "fsdp_sharding": self.sharding if self.strategy == "fsdp" else None,
            "compile": self.compiled,
            "optimizer": self.optimizer,
            "min_lr": self.min_lr,
            "flops_per_unit": self.flops_per_token,
            "flops_method": "torch.utils.flop_counter on a meta-device copy of LitGPT's GPT, "
                            "forward + backward of one sequence, per token",
            "bytes_per_unit": self.bytes_per_token,
            "bytes_method": F.BYTES_METHOD,
            # The node's peak: the result's fraction_of_peak is then the MFU.
            "peak_tflops": F.peak_for(distributed.device_name(self.ctx), self.precision,
                                      self.ctx.local_world_size if self.ctx.device_type == "cuda"
                                      else 0),
        }

    def metrics(self) -> dict | None:
        return self.segment_metrics(0)

    def segment_metrics(self, first_epoch: int) -> dict | None:
        """The figures from epoch `first_epoch` on: an in-run segment's own steps.
        A segment's result must not carry the steps of the caps measured before it
        in the same process (its throughput cross-checks would mix caps, and the
        step list, and with it every segment's result, would grow with each one)."""
        clock = self.clock
        if clock is None:
            return None
        measured = [s for s in clock.measured_steps() if s["epoch"] >= first_epoch]
        epochs = [e for e in clock.progress.epochs[first_epoch:] if not e.warmup]
        seconds = sum(e.duration_s for e in epochs)
        per_gpu = sum(e.units for e in epochs) / seconds if seconds > 0 else None
        iter_times = [s["iter_time_s"] for s in measured]
        return {
            # This rank's (local rank 0): loss and end time of every step.
            "steps": [s for s in clock.steps if s["epoch"] >= first_epoch],
            "tokens_per_s_rank0": per_gpu,
            # Cross-checks only (see docs): LitGPT's own figures, which leave out
            # data loading and logging, and its windowed throughput monitor.
            "cross_check": {
                "tokens_per_s_from_litgpt_iter_time": (
                    len(iter_times) * clock.tokens_per_step / sum(iter_times)
                    if iter_times and sum(iter_times) > 0 else None),
                "litgpt_device_items_per_sec_last_step": self._litgpt_items_per_sec,
            },
        }

    def peak_memory(self) -> dict:
        return torch_peak_memory(self.ctx)


def build(spec: dict, ctx) -> LitgptPretrain:
    import importlib.util

    for module in ("litgpt", "lightning", "litdata"):
        if importlib.util.find_spec(module) is None:
            raise WorkloadError(f"{module} is not installed for this Python",
                                f"install the LLM stack: {install_hint('llm')}")
    return LitgptPretrain(spec, ctx)
