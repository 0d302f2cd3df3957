"""Settings and sources the seed paper's workloads share (paths are in
RRZE-HPC/hpc-ai-perf-bench, declaration.UPSTREAM; the side-by-side reading is in
the project's notes, upstream-paper-config.md). Not a workload: the catalog
skips modules whose name starts with an underscore."""
from __future__ import annotations

_CV_PROTOCOL_SOURCE = ("max_epochs=11, 50 steps per epoch per GPU, the first epoch dropped "
                       "(computer_vision/main_resnet.py:134,196; computer_vision/ldm/callbacks/"
                       "performance_tracking2_rocm.py:729-733)")
_CV_GPUS_SOURCE = ("one GPU per job in every example (computer_vision/README.md:5,7,109-126; "
                   "scripts/slurm/slurm_helma.sh:6-8)")
_CV_PRECISION_SOURCE = ("Lightning's default 32-true, no precision= passed (computer_vision/"
                        "main_resnet.py:189-199), inside NGC pytorch:25.05 (scripts/environment/"
                        "nvidia_cuda12_9_xformers.def:2), which runs matmuls and convolutions in "
                        "TF32: 32-true (fp32 weights; TF32 math on NVIDIA, fp32 on MI300X "
                        "with ROCm 6.3, scripts/environment/amd_rocm6_3_xformers.def:2)")
_NO_COMPILE = "no torch.compile in computer_vision/main_resnet.py, main_vit.py or main_ldm.py"
_CUDNN = ("torch.backends.cudnn.benchmark never set in computer_vision/main_resnet.py, "
          "main_vit.py or main_ldm.py, so False")
_SEARCH = "workloads/batch_search.py"

_FAST_SOURCE = "ours: hpcai's best honest configuration (docs/concepts/presets.md)"
