"""bench/report_scaling.py (part of `make bench`), run small: it makes its synthetic
results from the real tiny result it ships, runs the report cold and then warm in a
fresh process, and prints a row for each. Timings are the bench's business; this
only holds that the bench runs and reports what it promises."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_report_scaling_bench_runs_cold_and_warm(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "report_scaling.py"), "--sizes", "60",
                           "--keep", str(tmp_path / "results")], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines() if line.strip().startswith("60 ")]
    assert [r[1] for r in rows] == ["cold", "warm"], done.stdout
    for row in rows:
        seconds, peak_mib, cpu_seconds, ms_per_result = map(float, row[2:6])
        assert seconds > 0 and peak_mib > 0 and cpu_seconds > 0 and ms_per_result > 0
    assert len(list((tmp_path / "results").rglob("result.json"))) == 60
