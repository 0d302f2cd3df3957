"""The summary line after `make run` says what its figure cannot (issue 15 §4):
that the epochs varied beyond the noisy threshold, or that the run was a smoke
test too short to compare; and `--steps-per-epoch` says what it sets."""
from hpcai.launcher.run.single import NOISY_CV, STEADY_MEASURED_S, summary_notes
from report_docs import make_result


def _doc(epochs, seconds, preset="short"):
    doc = make_result(device_type="cpu", gpus=2, cap_w=None, per_gpu=7.0, epochs=epochs,
                      preset=preset)
    doc["work"]["measured_seconds"] = seconds
    return doc


def test_noisy_epochs_are_said():
    (note,) = summary_notes(_doc([6.0, 7.0, 8.5], seconds=600.0))
    assert note.startswith("noisy: the 3 measured epochs varied by 18% (coefficient of variation")  # sd 1.258 / mean 7.167
    assert "--repeat" in note


def test_a_short_run_says_it_is_a_smoke_test():
    (note,) = summary_notes(_doc([7.0, 7.01, 7.02], seconds=20.0))
    assert note.startswith("a smoke test: 3 measured epoch(s) in 20 s (preset short)")


def test_a_steady_long_run_needs_no_note():
    assert summary_notes(_doc([7.0, 7.05, 7.02], seconds=STEADY_MEASURED_S + 1, preset="paper")) == []
    assert NOISY_CV == 0.05  # the report's --noisy-cv default, so both flag the same runs


def test_steps_per_epoch_has_help(cpu_node):
    done = cpu_node.launch("resnet50", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "--steps-per-epoch INTEGER RANGE training steps (serving: requests) per epoch" in text


def test_a_failed_validity_check_is_said_by_name():
    from hpcai.measure import validity

    doc = _doc([7.0, 7.05, 7.02], seconds=STEADY_MEASURED_S + 1, preset="paper")
    doc["throughput"]["stats_node"]["cv"] = 0.9  # epochs that disagree beyond any mean
    doc["validity"] = validity.evaluate(doc, "launcher")
    notes = summary_notes(doc)
    assert notes[0].startswith("validity check(s) failed: throughput_cv: 0.9 fraction")
    assert "hpcai-launch check" in notes[0]
