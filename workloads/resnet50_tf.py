"""ResNet-50 training in TensorFlow/Keras: keras.applications.ResNet50
(weights=None), synthetic images made once on every device, SGD with
momentum, cross-entropy; `hpcai-launch resnet50 --impl tensorflow`.

One process drives every GPU of the node through tf.distribute.MirroredStrategy
(one GPU: OneDeviceStrategy; CPU: TensorFlow's default strategy). The batch
size is per GPU, as in the PyTorch implementation, so per-GPU figures compare
directly. Mixed precision is mixed_float16 on GPUs that have tensor cores
(compute capability 7.0 and newer). Never imports torch.
"""
from __future__ import annotations

import gc
import os

from hpcai import provenance
from hpcai.errors import UsageError, WorkloadError
from hpcai.workloads import batch_search, catalog, flops
from hpcai.workloads.base import StepWorkload
from hpcai.workloads.memory import host_peak_memory
from hpcai.workloads.registry.resnet50 import ResNet50Params
from hpcai.install import install_hint

POLICIES = {"fp32": "float32", "tf32": "float32", "fp16-mixed": "mixed_float16",
            "bf16-mixed": "mixed_bfloat16"}


def _import_tensorflow(threads: int):
    # Before the import, or TensorFlow ignores them. (A few import-time lines
    # still reach stderr in TF 2.19+: tensorflow/tensorflow#100442.)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["KERAS_BACKEND"] = "tensorflow"  # MirroredStrategy needs Keras on TF
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    # Thread pools are fixed once TensorFlow's runtime starts: set them first.
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(min(2, threads))
    return tf


def resolve_precision(requested: str, gpu_capabilities: list[tuple[int, int]]) -> str:
    """auto: mixed_float16 where every GPU has tensor cores (compute
    capability 7.0+), else fp32; fp32 on CPUs."""
    if requested not in ("auto", "32-true", *POLICIES):
        raise UsageError(f"unknown precision {requested!r}",
                         f"choose one of: auto, 32-true, {', '.join(POLICIES)}")
    if requested == "32-true":  # fp32 weights, TF32 math where the GPUs have it
        return "tf32" if gpu_capabilities and all(cc >= (8, 0) for cc in gpu_capabilities) \
            else "fp32"
    if requested == "tf32" and not gpu_capabilities:
        raise UsageError("tf32 needs an NVIDIA GPU", "use fp32 or bf16-mixed on CPU")
    if requested != "auto":
        return requested
    if not gpu_capabilities:
        return "fp32"
    return "fp16-mixed" if all(cc >= (7, 0) for cc in gpu_capabilities) else "fp32"


def _mentions_memory(message: str) -> bool:
    message = message.lower()
    return "out of memory" in message or "alloc" in message


class KerasResNet50(StepWorkload):
    unit = "images"

    def __init__(self, spec: dict, ctx):
        params = spec["params"]
        p = ResNet50Params.from_spec(spec)
        self.spec, self.ctx, self.params = spec, ctx, params
        tf = self.tf = _import_tensorflow(ctx.threads)
        import keras

        self.image_size = int(p.image_size)
        self.num_classes = int(p.num_classes)
        self.compiled = bool(p.compile)
        gpus = tf.config.list_physical_devices("GPU") if ctx.device_type == "cuda" else []
        if ctx.device_type == "cuda" and not gpus:
            raise WorkloadError("this run is planned on the GPUs (--device cuda, or --device auto and the "
                                "launcher saw GPUs), but TensorFlow sees none",
                                f"install TensorFlow with GPU support ({install_hint('tf')}), "
                                "or run with --device cpu")
        if ctx.device_type == "cpu":
            tf.config.set_visible_devices([], "GPU")
            self._split_cpu(int(p.cpu_replicas))
        details = [tf.config.experimental.get_device_details(g) for g in gpus]
        self.gpu_names = [d.get("device_name", "GPU") for d in details]
        self.precision = resolve_precision(
            p.precision or "auto",
            [tuple(d.get("compute_capability", (0, 0))) for d in details])
        keras.mixed_precision.set_dtype_policy(POLICIES[self.precision])
        tf.config.experimental.enable_tensor_float_32_execution(self.precision != "fp32")

        self.strategy = self._strategy(gpus)
        self.replicas = self.strategy.num_replicas_in_sync
        if self.compiled and self.replicas > 1 and "compile" not in spec.get("overridden", ()):
            self.compiled = False  # the preset's compile: XLA needs one device here
        if self.compiled and self.replicas > 1:
            raise UsageError("--compile (XLA) is supported on one device with --impl tensorflow",
                             "drop --compile, or use --gpus 1")
        self._build_model(keras)
        self.loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  reduction="none")
        self.parameters = int(self.model.count_params())
        self.batch_size = None
        self.images = self.labels = self._loss = None
        self._train_step = tf.function(self._distributed_step, jit_compile=self.compiled or None)

        self._settle_batch(p.batch_size, on_gpu=bool(gpus))
        # Linear scaling rule (Goyal et al.): 0.1 per 256 images of global batch.
        self.lr = float(p.lr or 0.1 * self.global_batch / 256)
        self.optimizer.learning_rate = self.lr
        self.flops = flops.keras_image_model_flops(self.model, self.batch_size or 1)
        if ctx.device_type == "cpu":
            batch_search.reset_peak_rss()  # peak memory counts the run, not the set-up

    def _build_model(self, keras) -> None:
        """Keras' ResNet50 and its SGD (loss-scaled for fp16) under the strategy."""
        with self.strategy.scope():
            self.model = keras.applications.ResNet50(
                weights=None, input_shape=(self.image_size, self.image_size, 3),
                classes=self.num_classes, classifier_activation=None)
            optimizer = keras.optimizers.SGD(learning_rate=0.0, momentum=0.9, weight_decay=1e-4)
            self.base_optimizer = optimizer
            if self.precision == "fp16-mixed":  # fp16 needs loss scaling; bf16 does not
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(self.model.trainable_variables)
            self.optimizer = optimizer

    def _settle_batch(self, requested, on_gpu: bool) -> None:
        """The batch asked for, or (auto) the one the search finds."""
        self.batch_size_search = None
        if requested != "auto":
            self.set_batch_size(int(requested))
            return
        start = catalog.batch_search_start(self.spec)
        fastest = batch_search.picks_fastest(self.spec)
        # One process drives the node's GPUs: it writes the entry; the replicas count.
        cache = batch_search.gpu_batch_cache(
            self.spec, self.gpu_names[0], None, f"tensorflow {self.tf.__version__}", fastest, True,
            replicas=self.replicas, xla=self.compiled) if on_gpu else None
        self.batch_size_search = batch_search.find(self._probe, on_gpu=on_gpu, start=int(start),
                                                   fastest=fastest, cache=cache)
        batch_search.note_cache_off(self.batch_size_search, on_gpu, cache)
        self._reset_optimizer()
        self.set_batch_size(self.batch_size_search["found"])

    # ---- placement ----------------------------------------------------------
    def _split_cpu(self, replicas: int) -> None:
        """Several logical CPU devices, so MirroredStrategy's multi-replica
        path can run (and be tested) on a machine without GPUs."""
        if replicas > 1:
            cpu = self.tf.config.list_physical_devices("CPU")[0]
            self.tf.config.set_logical_device_configuration(
                cpu, [self.tf.config.LogicalDeviceConfiguration()] * replicas)

    def _strategy(self, gpus):
        tf = self.tf
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy()
        if gpus:
            return tf.distribute.OneDeviceStrategy("/gpu:0")
        cpus = tf.config.list_logical_devices("CPU")
        if len(cpus) > 1:
            return tf.distribute.MirroredStrategy([d.name for d in cpus])
        return tf.distribute.get_strategy()

    # ---- the step -----------------------------------------------------------
    def _replica_step(self, images, labels):
        tf = self.tf
        with tf.GradientTape() as tape:
            logits = tf.cast(self.model(images, training=True), tf.float32)
            loss = tf.nn.compute_average_loss(self.loss_fn(labels, logits),
                                              global_batch_size=self.global_batch)
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.model.trainable_variables)
        # Keras sums the gradients over replicas, unscales them and skips a
        # step whose fp16 gradients overflowed.
        self.optimizer.apply(grads, self.model.trainable_variables)
        return loss

    def _distributed_step(self, images, labels):
        per_replica = self.strategy.run(self._replica_step, args=(images, labels))
        return self.strategy.reduce(self.tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.replicas

    def set_batch_size(self, batch_size: int | None) -> None:
        tf, size, classes = self.tf, self.image_size, self.num_classes
        self.images = self.labels = None
        self.batch_size = batch_size
        if batch_size is None:
            return

        def make_images(_):
            return tf.random.normal([batch_size, size, size, 3])

        def make_labels(_):
            return tf.random.uniform([batch_size], 0, classes, dtype=tf.int32)

        # Made once, on each replica's own device.
        self.images = self.strategy.experimental_distribute_values_from_function(make_images)
        self.labels = self.strategy.experimental_distribute_values_from_function(make_labels)

    def step(self) -> int:
        self._loss = self._train_step(self.images, self.labels)
        return self.global_batch

    def synchronize(self) -> None:
        """Wait for every device (the protocol calls this at epoch boundaries)."""
        if self._loss is not None:
            self._loss.numpy()
        if self.ctx.device_type == "cuda":
            self.tf.test.experimental.sync_devices()

    def latest_loss(self) -> float | None:
        return None if self._loss is None else float(self._loss.numpy())

    # ---- --batch-size auto ----------------------------------------------------
    def _probe(self, batch_size: int) -> bool:
        """One full step at this batch size; False when it ran out of memory.
        The learning rate is 0 meanwhile: probes change no weight."""
        tf = self.tf
        ok = True
        try:
            self.set_batch_size(batch_size)
            self.step()
            self.synchronize()
        except (tf.errors.ResourceExhaustedError, tf.errors.InternalError) as exc:
            # cuDNN and cuBLAS report a failed allocation as an internal error.
            if isinstance(exc, tf.errors.InternalError) and not _mentions_memory(str(exc)):
                raise
            ok = False
        if not ok:
            self.set_batch_size(None)
            self._loss = None
            gc.collect()
        return ok

    def _reset_optimizer(self) -> None:
        """Momentum gathered by the probes is forgotten."""
        for variable in self.base_optimizer.variables:
            variable.assign(self.tf.zeros_like(variable))
        self._loss = None

    # ---- the record -----------------------------------------------------------
    def describe(self) -> dict:
        gpus = self.replicas if self.gpu_names else 0
        device = self.gpu_names[0] if self.gpu_names else provenance.cpu_model()
        doc = {
            "model": "keras.applications.ResNet50",
            "implementation": "tensorflow",
            "keras_version": self._keras_version(),
            "parameters": self.parameters,
            "image_size": self.image_size,
            "num_classes": self.num_classes,
            "strategy": type(self.strategy).__name__.lstrip("_"),
            "replicas": self.replicas,
            "devices_per_process": self.replicas if self.gpu_names else 1,
            "batch_size_per_replica": self.batch_size,
            "batch_size_per_process": self.global_batch,
            "global_batch_size": self.global_batch,
            "precision": self.precision,
            "dtype_policy": POLICIES[self.precision],
            "compile": self.compiled,
            "compiler": "XLA (jit_compile)" if self.compiled else None,
            "optimizer": "SGD(momentum=0.9, weight_decay=1e-4 decoupled, as Keras applies it)",
            "learning_rate": self.lr,
            "flops_per_unit": self.flops["train_per_image"],
            "bytes_per_unit": self.flops["train_bytes_per_image"],
            "bytes_method": self.flops["bytes_method"],
            "flops": self.flops,
            "peak_tflops": flops.peak_for(device, self.precision, gpus),
        }
        if self.batch_size_search is not None:
            doc["batch_size_search"] = self.batch_size_search
        return doc

    def _keras_version(self) -> str:
        import keras

        return keras.__version__

    def peak_memory(self) -> dict:
        if self.gpu_names:
            peaks = [self.tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"]
                     for i in range(len(self.gpu_names))]
            return {"kind": "device", "bytes": int(max(peaks))}
        return host_peak_memory()

def build(spec: dict, ctx) -> KerasResNet50:
    return KerasResNet50(spec, ctx)
