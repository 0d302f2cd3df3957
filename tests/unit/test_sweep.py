"""Sweeps without running a workload: cap lists and ranges, the order of the
runs, the sweep's identity, what counts as already done, and the CLI's dry
run. GPU state comes from the FAKE pynvml (tests/fakes) where a node is needed."""
import json
from collections import Counter

import pytest

from conftest import assert_valid_result, one_line_error
from hpcai.errors import UsageError
from hpcai.launcher.sweep import axes, resume
from hpcai.launcher.sweep import slots as slot_order
from report_docs import make_result, write_result


@pytest.mark.parametrize("text,caps", [
    ("300", [300.0]),
    ("300W", [300.0]),
    ("200,300,400", [200.0, 300.0, 400.0]),
    ("400, 200,300", [200.0, 300.0, 400.0]),
    ("200:700:100", [200.0, 300.0, 400.0, 500.0, 600.0, 700.0]),
    ("200:650:100", [200.0, 300.0, 400.0, 500.0, 600.0]),
    ("200:400:100,550,300", [200.0, 300.0, 400.0, 550.0]),
    ("250.5", [250.5]),
])
def test_cap_lists_and_ranges(text, caps):
    assert axes.parse_caps(text) == caps


@pytest.mark.parametrize("text,fragment", [
    ("lots", "not a number of watts"),
    ("0", "positive number of watts"),
    ("-5", "positive number of watts"),
    ("200,,300", "empty entry"),
    ("200:100:50", "ends below its start"),
    ("200:700", "START:STOP:STEP"),
    ("200:700:0", "positive number of watts"),
    ("1:100000:1", "caps"),
    ("nan", "positive number of watts"),
])
def test_bad_caps_are_one_line_usage_errors(text, fragment):
    with pytest.raises(UsageError) as err:
        axes.parse_caps(text)
    assert fragment in err.value.one_line() and "\n" not in err.value.one_line()


def test_shuffle_is_reproducible_from_its_seed_and_covers_every_cap_each_round():
    caps = [200.0, 300.0, 400.0, 500.0, 600.0, 700.0]
    first = slot_order.schedule(caps, 3, "shuffle", seed=42)
    assert first == slot_order.schedule(caps, 3, "shuffle", seed=42)
    assert first != slot_order.schedule(caps, 3, "shuffle", seed=43)
    for r in range(3):
        assert sorted(s.cap_w for s in first if s.repeat == r) == caps
    assert [s.repeat for s in first] == [0] * 6 + [1] * 6 + [2] * 6
    # Not simply ascending every time (that would let heat bias the high caps).
    assert [s.cap_w for s in first[:6]] != caps or [s.cap_w for s in first[6:12]] != caps


def test_alternate_interleaves_low_and_high_and_reverses_every_other_round():
    caps = [200.0, 300.0, 400.0, 500.0, 600.0, 700.0]
    slots = slot_order.schedule(caps, 2, "alternate", seed=0)
    assert [s.cap_w for s in slots[:6]] == [200.0, 700.0, 300.0, 600.0, 400.0, 500.0]
    assert [s.cap_w for s in slots[6:]] == [500.0, 400.0, 600.0, 300.0, 700.0, 200.0]
    odd = slot_order.schedule([200.0, 300.0, 400.0], 1, "alternate", seed=0)
    assert [s.cap_w for s in odd] == [200.0, 400.0, 300.0]


def test_ascending_and_uncapped_repeats():
    assert [s.cap_w for s in slot_order.schedule([300.0, 200.0], 2, "ascending", 0)] == \
        [200.0, 300.0, 200.0, 300.0]
    slots = slot_order.schedule([None], 3, "shuffle", 5)
    assert slots == [slot_order.Slot(None, 0), slot_order.Slot(None, 1), slot_order.Slot(None, 2)]
    with pytest.raises(UsageError):
        slot_order.schedule([200.0], 1, "random", 0)


def _spec(**changes):
    doc = make_result(**changes)
    return doc["spec"]


def test_the_sweep_key_ignores_the_cap_but_not_the_measurement():
    a, b = _spec(cap_w=200.0), _spec(cap_w=300.0)
    assert resume.key_hash(resume.measurement_key(a)) == resume.key_hash(resume.measurement_key(b))
    c = _spec(cap_w=200.0)
    c["params"]["batch_size"] = 128
    assert resume.key_hash(resume.measurement_key(a)) != resume.key_hash(resume.measurement_key(c))
    assert resume.sweep_id(a, "abc").endswith("-resnet50-paper-abc")


def test_only_valid_complete_results_of_this_sweep_count_as_done(tmp_path, result_schema):
    def sweep_result(cap, repeat, key="k1", **kw):
        doc = make_result(cap_w=cap, **kw)
        doc["spec"]["sweep"] = {"id": "s", "key": key, "position": 0, "repeat": repeat}
        return doc

    good = sweep_result(200.0, 0)
    assert_valid_result(good, result_schema)
    write_result(tmp_path, good)
    write_result(tmp_path, sweep_result(300.0, 0, status="failed"))
    write_result(tmp_path, sweep_result(300.0, 1, status="interrupted"))
    invalid = sweep_result(400.0, 0)
    del invalid["power"]  # schema-invalid: must be re-run, not trusted
    write_result(tmp_path, invalid)
    write_result(tmp_path, sweep_result(500.0, 0, key="another-sweep"))
    (tmp_path / "half-written").mkdir()
    (tmp_path / "half-written" / "result.json").write_text('{"status": "compl')
    done = resume.completed_slots(tmp_path, "k1")
    assert done == {slot_order.Slot(200.0, 0): good["run_id"]}
    tried = resume.attempts(tmp_path, "k1")
    assert [a["status"] for a in tried[slot_order.Slot(300.0, 0)]] == ["failed"]
    assert slot_order.Slot(500.0, 0) not in tried


def test_cli_dry_run_prints_the_sweep_and_changes_nothing(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap",
                       "200:400:100", "--repeat", "2", "--seed", "11", "--dry-run", "--json",
                       "-o", str(node.results))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout.split("\ncommand of the first run: ")[0])
    assert plan["seed"] == 11 and plan["order"] == "shuffle"
    assert Counter((r["cap_w"], r["repeat"]) for r in plan["runs"]) == Counter(
        {(c, r): 1 for c in (200.0, 300.0, 400.0) for r in (0, 1)})
    assert all(r["status"] == "to run" for r in plan["runs"])
    expected = slot_order.schedule([200.0, 300.0, 400.0], 2, "shuffle", 11)
    assert [(r["cap_w"], r["repeat"]) for r in plan["runs"]] == \
        [(s.cap_w, s.repeat) for s in expected]
    assert plan["folder"].startswith(str(node.results))
    assert not node.results.exists()
    assert all(d["set_log"] == [] for d in node.devices())


def test_a_second_sweep_into_a_running_ones_folder_is_refused_in_one_line(fake_nvidia_node):
    """Two sweeps of one measurement share a folder: while one runs (holding the
    folder's lock), another is refused before it sets anything, so `--repeat 2`
    never gives 4 results."""
    import fcntl
    import os

    node = fake_nvidia_node
    args = ("resnet50", "--preset", "tiny", "--device", "cpu", "--cap", "200,300", "--repeat", "2",
            "--seed", "11", "-o", str(node.results))
    plan = json.loads(node.launch(*args, "--dry-run", "--json").stdout.split("\ncommand of the first run: ")[0])
    folder = plan["folder"]
    os.makedirs(folder, mode=0o755)
    held = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running sweep holds it
        done = node.launch(*args)
    finally:
        os.close(held)
    assert done.returncode == 2
    one_line_error(done, f"another sweep is running into {folder}", "run the same command again")
    assert os.listdir(folder) == [] and all(d["set_log"] == [] for d in node.devices())


def test_a_sweep_checks_every_cap_before_setting_any(fake_nvidia_node):
    node = fake_nvidia_node
    done = node.launch("resnet50", "--preset", "tiny", "--device", "cpu", "--cap",
                       "300,800", "-o", str(node.results))
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0
    assert "800 W is outside GPU 0's range 200-700 W" in done.stderr
    assert all(d["set_log"] == [] for d in node.devices())
    assert not node.results.exists()


def test_bad_sweep_options_are_one_line(fake_nvidia_node):
    node = fake_nvidia_node
    for args, fragment in ((["--cap", "200:100:50"], "ends below its start"),
                           (["--repeat", "0"], "--repeat"),
                           (["--order", "random"], "'random' is not one of")):
        done = node.launch("resnet50", "--device", "cpu", *args, "--dry-run", "--json")
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("hpcai-launch: error: ")
        assert fragment in lines[0]
