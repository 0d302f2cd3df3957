"""Result bundles' parts without a run: key generation, DSSE's encoding, the
recomputed validity that `check` prints (a hand-edited figure fails), and the
comparability verdict. End to end (real runs, the real registry):
tests/integration/test_result_bundles.py."""
from __future__ import annotations

import copy
import json
import os
import stat

import pytest

from report_docs import make_result, write_result

from hpcai.errors import UsageError
from hpcai.launcher.bundles import dsse, keys, registry
from hpcai.launcher.bundles.compare import CAVEATS, COMPARABLE, HARDWARE, NOT_COMPARABLE, compare
from hpcai.launcher.bundles.recompute import recompute
from hpcai.measure import validity


def test_keygen_makes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path):
    private, public, keyid = keys.generate(tmp_path / "site.key")
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600 and public == tmp_path / "site.key.pub"
    assert keys.key_id(keys.load_public(public)) == keyid
    assert keys.key_id(keys.load_private(private).public_key()) == keyid
    before = private.read_bytes(), public.read_bytes()
    with pytest.raises(UsageError, match="already exists: keygen never overwrites"):
        keys.generate(private)
    assert (private.read_bytes(), public.read_bytes()) == before
    # A .pub left alone (or a link planted there) stops keygen before it writes the private key.
    (tmp_path / "other.key.pub").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match="already exists"):
        keys.generate(tmp_path / "other.key")
    assert not (tmp_path / "other.key").exists() and not (tmp_path / "elsewhere").exists()


def test_pae_is_dsse_v1_and_a_signature_covers_type_and_payload(tmp_path):
    # The test vector of DSSE's protocol.md ("PAE" section).
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    private, public, keyid = keys.generate(tmp_path / "k")
    env = dsse.sign(b'{"a":1}', keys.load_private(private), keyid)
    parsed, payload = dsse.parse(json.dumps(env).encode())
    assert dsse.signature_by(parsed, payload, keys.load_public(public), keyid)
    assert not dsse.signature_by(parsed, b'{"a":3}', keys.load_public(public), keyid)
    other = keys.generate(tmp_path / "k2")
    assert not dsse.signature_by(parsed, payload, keys.load_public(other[1]), other[2])


def test_url_safe_and_unpadded_base64_signatures_verify_as_dsse_allows(tmp_path):
    """protocol.md: "Base64() ... Either standard or URL-safe encoding is allowed."""
    import base64

    private, public, keyid = keys.generate(tmp_path / "k")
    # A payload whose standard base64 holds "+" and "/", so the URL-safe one differs.
    payload = b'{"a":"\xfb\xff\xfe?>"}'
    env = dsse.sign(payload, keys.load_private(private), keyid)
    sig = base64.b64decode(env["signatures"][0]["sig"])
    for encode in (base64.urlsafe_b64encode, lambda b: base64.urlsafe_b64encode(b).rstrip(b"=")):
        url_safe = {**env, "payload": encode(payload).decode(),
                    "signatures": [{"keyid": keyid, "sig": encode(sig).decode()}]}
        parsed, got = dsse.parse(json.dumps(url_safe).encode())
        assert got == payload and dsse.signature_by(parsed, got, keys.load_public(public), keyid)
    mixed = {**env, "signatures": [{"keyid": keyid, "sig": "ab+_" + env["signatures"][0]["sig"][4:]}]}
    parsed, got = dsse.parse(json.dumps(mixed).encode())
    assert not dsse.signature_by(parsed, got, keys.load_public(public), keyid)


def good_doc(**kw) -> dict:
    """A result every validity check passes (as tests/unit/test_validity.py's)."""
    doc = make_result(gpus=2, power_per_gpu_w=280.0, window_s=60.0, **{"cap_w": 300.0, **kw})
    doc["power"]["quality"] = {"min_window_s": 10.0, "window_short": False,
                               "power_samples_expected": 600, "power_samples_min": 598,
                               "samples_short": False}
    doc["protocol"]["sample_interval_achieved_s"] = {"mean": 0.1, "median": 0.1, "p95": 0.11,
                                                     "max": 0.2}
    for g in doc["gpus"]:
        g.update(utilization_pct_mean=97.0, temperature_c={"mean": 60.0, "median": 60.0,
                                                           "p95": 64.0, "max": 65.0},
                 throttle_reasons={"sw_power_cap": 0.9})
    cap = doc["spec"]["power"]["cap_w"]
    doc["launcher"]["gpu_limits"] = [{"index": i, "requested_w": cap, "enforced_at_start_w": cap,
                                      "enforced_at_end_w": cap} for i in range(2)]
    doc["validity"] = validity.evaluate(doc, "launcher")
    return doc


def test_recomputed_validity_fails_a_hand_edited_throughput_that_the_stored_block_passes():
    doc = good_doc()
    assert recompute(doc, None)["failed"] == []
    edited = copy.deepcopy(doc)
    edited["throughput"]["node"] *= 3
    edited["throughput"]["per_gpu"] *= 3
    block = recompute(edited, None)
    assert edited["validity"]["verdict"] != "fail"  # what the file says about itself
    assert block["verdict"] == "fail" and block["failed"] == ["figures_consistency"]
    (bad,) = [c for c in block["checks"] if c["name"] == "figures_consistency"]
    assert "throughput.node" in bad["note"] and "measured_units / measured_seconds" in bad["note"]


def test_recomputed_validity_holds_the_stated_power_to_samples_csv(tmp_path):
    doc = good_doc()
    path = write_result(tmp_path, doc, samples=True)
    samples = (path.parent / "samples.csv").read_bytes()
    ok = recompute(doc, samples)
    assert {c["verdict"] for c in ok["checks"] if c["name"] == "samples_agreement"} == {"pass"}
    doc["gpus"][0]["power_w"]["mean"] *= 0.7  # "our GPUs drew less"
    bad = [c for c in recompute(doc, samples)["checks"] if c["name"] == "samples_agreement"]
    assert [c["verdict"] for c in bad] == ["fail", "pass"] and bad[0]["subject"] == "GPU 0"


def test_check_recomputes_and_names_a_stored_verdict_that_no_longer_holds(tmp_path, capsys):
    from hpcai.launcher.cli.check import check_results

    doc = good_doc()
    doc["throughput"]["per_gpu"] *= 3
    doc["throughput"]["node"] *= 3
    path = write_result(tmp_path, doc)
    assert check_results([str(path)]) == 1
    out = capsys.readouterr().out
    assert "validity FAIL" in out and "the stored verdict (by the launcher) was PASS: DIFFERS" in out
    assert any("figures_consistency" in line and "FAIL" in line for line in out.splitlines())


def test_compare_names_each_reason_and_grades_it():
    a, b = good_doc(site="alpha"), good_doc(site="beta")
    va, vb = recompute(a, None), recompute(b, None)
    assert compare(a, b, va, vb)["verdict"] == COMPARABLE
    b2 = copy.deepcopy(b)
    b2["software"]["gpu_library"] = {"driver": "999.1"}
    result = compare(a, b2, va, vb)
    assert result["verdict"] == CAVEATS and any("driver" in r["reason"] for r in result["reasons"])
    # The 94 GB H100 NVL is not the 80 GB H100 SXM, whatever both are called.
    nvl = good_doc(site="beta", gpu="NVIDIA H100 NVL")
    for g in nvl["gpus"]:
        g["memory_total_bytes"] = 94 * 2**30
    result = compare(a, nvl, va, recompute(nvl, None))
    assert result["verdict"] == HARDWARE  # not the same measurement: a comparison of two GPUs
    assert any("H100 SXM vs H100 NVL" in r["reason"] for r in result["reasons"])
    capped = good_doc(site="beta", cap_w=250.0)
    result = compare(a, capped, va, recompute(capped, None))
    assert result["verdict"] == NOT_COMPARABLE
    assert {"grade": NOT_COMPARABLE, "reason": "cap 300.0 W vs 250.0 W"} in result["reasons"]


def test_trusted_keys_come_from_the_site_file_with_dates_and_relative_paths(tmp_path):
    import datetime as dt

    from hpcai.errors import ConfigError
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.bundles.trust import trusted_keys

    keys.generate(tmp_path / "alpha")
    site_file = tmp_path / "v.toml"
    site_file.write_text('name = "v"\n[results]\ntrusted_keys = [{ site = "alpha", key = "alpha.pub", '
                         'expires = 2027-06-30 }, { site = "alpha", key = "alpha.pub" }]\n')
    (first, second) = trusted_keys(sites.parse(site_file))
    assert first.site == "alpha" and first.expires == dt.date(2027, 6, 30) and second.expires is None
    site_file.write_text('name = "v"\n[results]\ntrusted_keys = [{ site = "alpha", key = "missing.pub" }]\n')
    with pytest.raises(ConfigError, match=r"results.trusted_keys\[0\]: public key .*missing.pub does not exist"):
        trusted_keys(sites.parse(site_file))
    site_file.write_text('name = "v"\n[results]\ntrusted_keys = [{ key = "alpha.pub" }]\n')
    with pytest.raises(ConfigError, match="'site' is a required property"):
        sites.parse(site_file)


def test_a_signing_key_others_can_read_is_refused(tmp_path):
    private, _, _ = keys.generate(tmp_path / "site.key")
    private.chmod(0o644)
    with pytest.raises(UsageError, match=r"signing key .*site.key can be read or written by other users \(mode 0644\)"):
        keys.load_private(private)
    private.chmod(0o600)
    os.chown(private, 65534, 65534)  # root (these tests) may sign only with its own key
    with pytest.raises(UsageError, match="belongs to uid 65534, not to you"):
        keys.load_private(private)


@pytest.mark.parametrize("change", ["others_write", "other_owner", "folder_others_write"])
def test_a_trusted_public_key_another_user_could_replace_is_refused(tmp_path, change):
    from hpcai.errors import ConfigError
    from hpcai.launcher.site import config as sites
    from hpcai.launcher.bundles.trust import trusted_keys

    keys_dir = tmp_path / "keys"
    keys_dir.mkdir(mode=0o755)
    keys.generate(keys_dir / "alpha")
    site_file = tmp_path / "v.toml"
    site_file.write_text('name = "v"\n[results]\ntrusted_keys = [{ site = "alpha", key = "keys/alpha.pub" }]\n')
    assert trusted_keys(sites.parse(site_file))[0].site == "alpha"
    public = keys_dir / "alpha.pub"
    if change == "others_write":
        public.chmod(0o666)
    elif change == "other_owner":
        os.chown(public, 65534, 65534)
    else:
        keys_dir.chmod(0o777)
    with pytest.raises(ConfigError, match="can be written by other users|belongs to uid 65534"):
        trusted_keys(sites.parse(site_file))


@pytest.fixture
def alpha(tmp_path):
    """Site alpha's key, a verifier trusting it, and one of alpha's runs (with samples)."""
    from hpcai.launcher.bundles.trust import TrustedKey

    private, public, keyid = keys.generate(tmp_path / "alpha.key")
    run = write_result(tmp_path / "runs", good_doc(site="alpha"), samples=True).parent
    trusted = [TrustedKey("alpha", public, keys.load_public(public), keyid, None)]
    return {"site": {"name": "alpha", "results": {"sign_key": str(private)}}, "run": run,
            "trusted": trusted, "tmp": tmp_path}


def make_bundle(alpha, name="b"):
    from hpcai.launcher.bundles.bundle import make

    return make([str(alpha["run"])], str(alpha["tmp"] / name), alpha["site"], None, False)["folder"]


def test_bundling_never_follows_a_link_in_a_run_folder(alpha):
    samples = alpha["run"] / "samples.csv"
    samples.rename(alpha["tmp"] / "elsewhere.csv")
    samples.symlink_to(alpha["tmp"] / "elsewhere.csv")
    with pytest.raises(UsageError, match="samples.csv is a symbolic link: not followed"):
        make_bundle(alpha)
    assert not (alpha["tmp"] / "b").exists()  # every input checked before anything is written


def test_a_bundle_carries_the_mlperf_power_file_and_hpccs_output_and_verifies(alpha):
    """MLCommons' result_summarizer reads power/<log>/node_*.txt beside mllog.txt: a
    receiving site needs it, and hpcc's own output file, signed like the rest."""
    from hpcai.launcher.bundles.verify import verify_bundle

    run = alpha["run"]
    (run / "mllog.txt").write_text(":::MLLOG {}\n")
    (run / "power" / "mllog").mkdir(parents=True)
    (run / "power" / "mllog" / "node_0.txt").write_text(":::MLLOG power\n")
    (run / "hpcc-abc123").mkdir()
    (run / "hpcc-abc123" / "hpccoutf.txt").write_text("Begin of Summary section.\n")
    (run / "hpcc-abc123" / "hpccinf.txt").write_text("input, not a result\n")
    folder = make_bundle(alpha)
    inside = folder / "runs" / run.name
    assert (inside / "power" / "mllog" / "node_0.txt").read_text() == ":::MLLOG power\n"
    assert (inside / "hpcc-abc123" / "hpccoutf.txt").exists() and not (inside / "hpcc-abc123" / "hpccinf.txt").exists()
    assert verify_bundle(folder, alpha["trusted"]).status == "verified"
    (inside / "power" / "mllog" / "node_0.txt").write_text(":::MLLOG more power\n")
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "node_0.txt is not the file that was signed" in verdict.reason


def test_a_verification_says_what_it_proves_the_signer_and_the_bytes_not_more(alpha):
    from hpcai.launcher.bundles.verify import verify_bundle

    verdict = verify_bundle(make_bundle(alpha), alpha["trusted"])
    assert verdict.status == "verified"
    assert "signed by the key site 'alpha' gave you" in verdict.reason
    assert "byte for byte what it signed" in verdict.reason
    assert "does not prove the numbers were measured" in verdict.reason
    assert "figures consistent" not in verdict.reason


def test_verify_fails_a_planted_link_an_extra_file_and_a_schema_breaking_result(alpha):
    from hpcai.launcher.bundles import dsse as d
    from hpcai.launcher.bundles.statement import serialise, sha256
    from hpcai.launcher.bundles.verify import verify_bundle

    folder = make_bundle(alpha)
    assert verify_bundle(folder, alpha["trusted"]).status == "verified"
    (folder / "runs" / "notes.txt").write_text("added later")
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "runs/notes.txt is in the bundle but not in the signed" \
        in verdict.reason
    (folder / "runs" / "notes.txt").unlink()
    (folder / "runs" / "link").symlink_to("/etc/passwd")
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "is a symbolic link" in verdict.reason
    (folder / "runs" / "link").unlink()
    # The site signs a result that breaks the schema: signature and hashes hold, the schema does not.
    result = next(folder.rglob("result.json"))
    doc = json.loads(result.read_text())
    doc["status"] = "splendid"
    result.unlink()
    result.write_text(json.dumps(doc))
    env, payload = d.parse((folder / "statement.dsse.json").read_bytes())
    stmt = json.loads(payload)
    for s in stmt["subject"]:
        if s["name"].endswith("result.json"):
            s["digest"]["sha256"] = sha256(result.read_bytes())
    key = keys.load_private(alpha["site"]["results"]["sign_key"])
    (folder / "statement.dsse.json").write_text(json.dumps(
        d.sign(serialise(stmt), key, alpha["trusted"][0].keyid)))
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "does not match the result schema" in verdict.reason


def test_an_unsigned_folder_is_unsigned_not_verified(alpha):
    from hpcai.launcher.bundles.verify import verify_bundle

    folder = make_bundle(alpha)
    (folder / "statement.dsse.json").unlink()
    assert verify_bundle(folder, alpha["trusted"]).status == "unsigned"


def test_bad_input_is_one_error_before_anything_is_written(alpha, tmp_path):
    from hpcai.launcher.bundles.bundle import make

    unsigned_site = {"name": "alpha", "results": {"sign_key": ""}}
    with pytest.raises(UsageError, match="site 'alpha' names no signing key"):
        make([str(alpha["run"])], str(tmp_path / "b"), unsigned_site, None, False)
    with pytest.raises(UsageError, match="holds neither result.json nor sweep.json"):
        make([str(tmp_path)], str(tmp_path / "b"), alpha["site"], None, False)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(UsageError, match="already exists and is not an empty folder"):
        make([str(alpha["run"])], str(tmp_path / "full"), alpha["site"], None, False)
    assert not (tmp_path / "b").exists() and sorted(p.name for p in (tmp_path / "full").iterdir()) == ["x"]
    with pytest.raises(UsageError, match="is not a registry reference"):
        registry.push(str(alpha["run"]), "registry.example.org/x:1", True, "alpha", [])
    with pytest.raises(UsageError, match="is not a bundle"):
        registry.push(str(alpha["run"]), "oras://registry.example.org/ns/x:1", True, "alpha", [])


@pytest.mark.parametrize("ref, says", [
    ("oras://user:s3cret@registry.example.org/ns/x:1", "holds credentials"),
    ("oras://user:s3/cret@registry.example.org/ns/x:1", "holds credentials"),
    ("oras://ns/x:1", "names no registry host"),
    ("oras://registry.example.org/ns/x:1\nhpcai: VERIFIED", "control or non-ASCII character"),
    ("oras://registry.example.org/ns/x:1\x1b[2J", "control or non-ASCII character"),
    ("oras://registry.example.org/NS/x:1", "is not a valid OCI reference"),
    ("oras://registry.example.org", "is not a valid OCI reference"),
])
def test_registry_references_are_parsed_strictly_and_credentials_never_printed(ref, says):
    with pytest.raises(UsageError) as refused:
        registry.push("unused", ref, True, "alpha", [])
    line = refused.value.one_line()
    assert says in line and "s3" not in line and "cret" not in line
    assert "\n" not in line and "\x1b" not in line


def test_a_valid_reference_keeps_its_host_port_path_tag_and_digest():
    digest = "sha256:" + "ab" * 32
    assert registry._target("oras://localhost:5000/results/alpha:run1") == "localhost:5000/results/alpha:run1"
    assert registry._target(f"oras://reg.example.org/a/b@{digest}") == f"reg.example.org/a/b@{digest}"
    assert registry.shown(f"oras://u:p@reg.example.org/a/b@{digest}") == f"oras://***@reg.example.org/a/b@{digest}"


def test_pull_from_an_unreachable_registry_fails_once_without_the_clients_retries(tmp_path, monkeypatch):
    """oras-py retries each request 5 times, sleeping 3..83 s (oras/decorator.py): never here."""
    import socket

    import oras.client  # noqa: F401 (oras.decorator alone is a circular import)
    import oras.decorator

    def no_sleep(seconds):
        raise AssertionError(f"the client retried (sleep {seconds} s)")

    monkeypatch.setattr(oras.decorator.time, "sleep", no_sleep)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UsageError, match=rf"cannot read oras://127.0.0.1:{port}/results/a:1: .*Connection refused"):
        registry.pull(f"oras://127.0.0.1:{port}/results/a:1", tmp_path / "out", False)
    assert not (tmp_path / "out").exists()


def test_pull_with_credentials_in_the_reference_is_one_line_without_them(cpu_node, tmp_path):
    from conftest import one_line_error

    done = cpu_node.launch("results", "pull", "oras://alice:hunter2@localhost:5000/r/a:1", "-o", str(tmp_path / "o"))
    assert done.returncode == 2
    one_line_error(done, "holds credentials", "oras://***@localhost:5000/r/a:1")
    assert "hunter2" not in done.stderr + done.stdout and not (tmp_path / "o").exists()


def test_an_envelope_nested_100000_deep_or_of_220_mb_fails_verification_in_one_line(alpha, tmp_path):
    from hpcai.launcher.bundles.files import ENVELOPE_FILE
    from hpcai.launcher.bundles.verify import verify_bundle

    folder = make_bundle(alpha)
    envelope = folder / ENVELOPE_FILE
    envelope.unlink()
    envelope.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "nested too deep" in verdict.reason
    envelope.unlink()
    with open(envelope, "wb") as fh:  # sparse: 220 MB that costs no disk
        fh.truncate(220 << 20)
    verdict = verify_bundle(folder, alpha["trusted"])
    assert verdict.status == "failed" and "larger than 64 MB" in verdict.reason


def test_a_report_over_a_bundle_with_a_nested_envelope_goes_on(alpha, tmp_path):
    from hpcai.launcher.bundles.files import ENVELOPE_FILE
    from hpcai.launcher.report import ReportOptions, make_report

    folder = make_bundle(alpha)
    (folder / ENVELOPE_FILE).unlink()
    (folder / ENVELOPE_FILE).write_bytes(b"[" * 100_000 + b"]" * 100_000)
    make_report([str(folder)], ReportOptions(output=tmp_path / "out"))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["excluded_runs"] and not report["cells"]


@pytest.mark.parametrize("names", [["runs/a", "runs/a/result.json"], ["runs/a/result.json", "runs/a"],
                                   ["runs/x", "runs/x"]])
def test_a_packed_bundle_with_a_name_both_file_and_folder_or_twice_is_refused_before_writing(tmp_path, names):
    import io
    import tarfile

    from hpcai.launcher.bundles.bundle import unpack

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 2
            tar.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(UsageError, match="both as a file and as a folder|twice"):
        unpack(buf.getvalue(), tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UsageError, match="not a tar file"):
        unpack(b"garbage" * 100, tmp_path / "out")
