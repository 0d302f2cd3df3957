"""Data from storage for real: `hpcai-launch data make resnet50` writes JPEGs,
`hpcai-launch resnet50 --data DIR` trains real PyTorch on the CPU through a
real DataLoader (worker processes, decode, augmentation) and records the
runtime split; the node has no GPU (FAKE pynvml reporting none, tests/fakes)."""
import json
import os
import subprocess

import pytest

from conftest import LAUNCHER, ROOT, assert_valid_result, one_line_error

pytestmark = pytest.mark.slow
TINY = ["resnet50", "--preset", "tiny", "--nproc", "1", "--device", "cpu", "--runtime", "host"]


def make_dataset(node, folder, workload="resnet50", samples=40):
    done = node.launch("data", "make", workload, "--preset", "tiny", "--samples", str(samples),
                       "-o", str(folder))
    assert done.returncode == 0, done.stderr
    return json.loads((folder / "manifest.json").read_text())


def test_resnet50_reads_jpegs_and_records_the_wait_for_data(cpu_node, tmp_path, result_schema):
    node, data = cpu_node, tmp_path / "jpegs"
    manifest = make_dataset(node, data)
    sizes = sorted(p.stat().st_size for p in data.glob("class-*/*.jpg"))
    assert manifest["count"] == 40 and manifest["bytes"] == sum(sizes)
    stored = node.launch(*TINY, "--data", str(data), "--data-workers", "1",
                         "-o", str(node.results / "storage"))
    assert stored.returncode == 0, stored.stderr
    preloaded = node.launch(*TINY, "-o", str(node.results / "preloaded"))
    assert preloaded.returncode == 0, preloaded.stderr
    (s_path,) = (node.results / "storage").glob("*/result.json")
    (p_path,) = (node.results / "preloaded").glob("*/result.json")
    doc, base = json.loads(s_path.read_text()), json.loads(p_path.read_text())
    assert_valid_result(doc, result_schema)
    inp = doc["input"]
    assert inp["source"] == "storage" and inp["path"] == str(data)
    assert inp["workers"] == 1 and inp["manifest_checksum"] == manifest["checksum"]
    # On a CPU: decoded by the workers, uint8 through them, normalised where the model runs.
    assert (inp["jpeg_decode"], inp["wire_dtype"], inp["normalised_on"]) == ("cpu", "uint8", "device")
    assert inp["wait_timing"] == "host clock" and inp["device_prefetch"] is None
    # Every measured step waited for its batch a little (loader, decode, copy)...
    assert 0 < inp["data_wait_share"] < 1
    measured = [e for e in doc["epochs"] if not e["warmup"]]
    assert len(inp["per_epoch"]) == len(measured) == 2
    for epoch, split in zip(measured, inp["per_epoch"]):
        assert epoch["data_wait_s"] > 0
        assert epoch["data_wait_s"] + epoch["compute_s"] == pytest.approx(epoch["duration_s"])
        assert split["data_wait_s"] == pytest.approx(epoch["data_wait_s"])
    # ... and read real files: 2 steps x batch 4 per measured epoch, each between
    # the smallest and the largest JPEG written.
    images = 2 * 2 * 4
    assert sum(sizes[:images]) <= inp["bytes_read_node"] <= sum(sizes[-images:])
    assert inp["read_bandwidth_node_bytes_per_s"] == pytest.approx(
        inp["bytes_read_node"] / doc["work"]["measured_seconds"])
    # The preloaded run (the default) records no split: its inputs never leave the device.
    assert "input" not in base and all("data_wait_s" not in e for e in base["epochs"])

    # The report: the split beside the throughput, and storage never averaged with preloaded.
    done = node.launch("report", str(node.results), "-o", str(tmp_path / "report"))
    assert done.returncode == 0, done.stderr
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert sorted(str(c["point"]) for c in rep["cells"]) == ["None", "data from storage"]
    [row] = rep["tables"]["runtime-split"]["rows"]
    assert float(row[6]) == pytest.approx(inp["data_wait_share"], rel=1e-2)
    assert float(row[5]) == pytest.approx(doc["throughput"]["per_gpu"], rel=1e-4)
    assert "## Runtime split" in (tmp_path / "report" / "report.md").read_text()


def test_bad_datasets_are_refused_in_one_line_and_nothing_runs(cpu_node, tmp_path):
    node = cpu_node
    vit = tmp_path / "vit"
    make_dataset(node, vit, "vit-l16", samples=2)
    one_line_error(node.launch(*TINY, "--data", str(vit), "-o", str(node.results)),
                   "holds a vit-l16 dataset, not resnet50's", "data make resnet50")
    broken = tmp_path / "broken"
    make_dataset(node, broken, samples=2)
    (broken / "manifest.json").write_text('{"kind": "hpcai.dataset", "count": ')
    one_line_error(node.launch(*TINY, "--data", str(broken), "-o", str(node.results)),
                   "manifest.json is broken")
    one_line_error(node.launch(*TINY, "--data-workers", "2", "-o", str(node.results)),
                   "--data-workers only applies with --data")
    one_line_error(node.launch("data", "make", "resnet50", "--samples", "2", "-o", str(vit)),
                   "exists and is not an empty folder")
    assert not node.results.exists()  # no run folder, no result


def test_an_unreadable_dataset_folder_is_refused_in_one_line(cpu_node, tmp_path):
    node, data = cpu_node, tmp_path / "locked"
    make_dataset(node, data, samples=2)
    data.chmod(0o000)
    # Root reads every folder: it then runs without the capabilities that allow it.
    drop = (["setpriv", "--inh-caps=-dac_override,-dac_read_search",
             "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else [])
    try:
        done = subprocess.run([*drop, *LAUNCHER, *TINY, "--data", str(data), "--dry-run"],
                              capture_output=True, text=True, cwd=ROOT, env=node.env,
                              timeout=120)
    finally:
        data.chmod(0o755)
    one_line_error(done, "--data", str(data), "is not readable")


def test_cosmoflow_reads_shards_of_cubes_and_refuses_a_cube_of_another_edge(cpu_node, tmp_path,
                                                                           result_schema):
    node, data = cpu_node, tmp_path / "cubes"
    manifest = make_dataset(node, data, "cosmoflow", samples=8)
    assert manifest["format"] == "npy" and manifest["sample_shape"] == [4, 32, 32, 32]
    cosmo = ["cosmoflow", "--preset", "tiny", "--nproc", "1", "--device", "cpu",
             "--runtime", "host"]
    done = node.launch(*cosmo, "--data", str(data), "--data-workers", "0",
                       "-o", str(node.results / "storage"))
    assert done.returncode == 0, done.stderr
    (path,) = (node.results / "storage").glob("*/result.json")
    doc = json.loads(path.read_text())
    assert_valid_result(doc, result_schema)
    inp = doc["input"]
    assert inp["format"] == "npy" and inp["workers"] == 0 and 0 < inp["data_wait_share"] < 1
    # Every measured sample read its cube: 4 x 32^3 float32 values (the targets are not counted).
    samples = sum(e["units"] for e in doc["epochs"] if not e["warmup"])
    assert samples > 0 and inp["bytes_read_node"] == samples * 4 * 32 ** 3 * 4
    # A cube of another edge fails before anything runs, not inside the model.
    one_line_error(node.launch(*cosmo, "--cube", "64", "--data", str(data),
                               "-o", str(node.results / "bad")),
                   "holds samples of shape 4x32x32x32, this run needs 4x64x64x64")
    assert not (node.results / "bad").exists()
