"""STAND-IN for SGLang (tests only; the real package is not installed here).

SGLang cannot serve on CPU machines (its kernels need a GPU driver), so the
tests put this folder on PYTHONPATH and hpcai's serving workload drives it
exactly as it drives SGLang 0.5.19 on a GPU node: `python -m
sglang.launch_server` and `python -m sglang.benchmark.serving` with the same
flags, the same HTTP endpoints (/model_info, /v1/models, /server_info,
/health, /generate with SGLang's streaming format) and the same result file
(JSON lines with SGLang's keys). It generates random tokens instead of
running a model. Each module cites the SGLang 0.5.19 source lines it
follows; tests/integration/test_sglang_client.py runs SGLang's real client
against this server.

Failure modes for the tests, from HPCAI_SGLANG_STANDIN (comma-separated):
  crash-at-start        the server exits with code 3 before listening
  never-ready           the server never answers
  fail-warmup           non-streamed /generate requests (hpcai's warm-up) fail
  fail-some-streams     every other streamed request (the client's) fails
  fail-all-streams      every streamed request fails
  hang-on-shutdown      the server and its child ignore SIGTERM
  client-crash          the benchmark client exits with code 2, no result
"""
import os

__version__ = "0.0.0+hpcai-standin"


def failure_modes() -> set[str]:
    return {m.strip() for m in os.environ.get("HPCAI_SGLANG_STANDIN", "").split(",") if m.strip()}
