"""Signed result bundles end to end: real runs (`llama3-8b-inference --preset
tiny` on the serving STAND-IN, tests/standins, and FAKE GPUs, tests/fakes: the
same node as test_validity_checks.py) measured under two sites, alpha and beta;
then `hpcai-launch results keygen|bundle|verify|compare|push|pull` and `report`
through the CLI, with real Ed25519 keys and, for push and pull, the real OCI
registry (docker-registry, tests/image_fixtures.py)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from conftest import ROOT, FakeNode, one_line_error
from fakes import fake_gpu_state as fgs

pytestmark = pytest.mark.slow
SERVE = ["llama3-8b-inference", "--preset", "tiny", "--device", "cuda", "--output-len", "32",
         "--steps-per-epoch", "24"]


def write_site(folder, name, sign_key, trusted):
    """A site file: its name, signing key and the keys it trusts [(site, key, expires)]."""
    entries = ", ".join(f'{{ site = "{s}", key = "{k}"' + (f', expires = "{e}"' if e else "") + " }"
                        for s, k, e in trusted)
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\n[images]\nregistry_https = false\n'
                    f'[results]\nsign_key = "{sign_key}"\ntrusted_keys = [{entries}]\n')
    return path


@pytest.fixture(scope="module")
def centres(tmp_path_factory):
    """Two sites' keys and site files, a verifier trusting both, alpha's run at
    300 W and beta's sweep (one in-run process) at 300 W and 250 W."""
    tmp = tmp_path_factory.mktemp("centres")
    node = FakeNode(tmp, fgs.make_devices(1, "nvidia", utilization_pct=95.0))
    node.env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "standins"), node.env["PYTHONPATH"]])
    node.env["HPCAI_SGLANG_STANDIN_TOKEN_S"] = "0.01"
    keys = tmp / "keys"
    keys.mkdir()
    for name in ("alpha", "beta", "mallory"):
        done = node.launch("results", "keygen", str(keys / name))
        assert done.returncode == 0, done.stderr
    sites = {name: write_site(tmp, name, keys / name, [("alpha", keys / "alpha.pub", None),
                                                        ("beta", keys / "beta.pub", None)])
             for name in ("alpha", "beta")}
    sites["verifier"] = write_site(tmp, "verifier", "", [("alpha", keys / "alpha.pub", "2099-12-31"),
                                                         ("beta", keys / "beta.pub", None)])
    runs = {}
    for label, caps in (("alpha", "300"), ("beta", "300,250")):
        out = tmp / f"runs-{label}"
        done = node.launch(*SERVE, "--cap", caps, "--site", str(sites[label]), "-o", str(out))
        assert done.returncode == 0, done.stderr[-3000:]
        for result in out.rglob("result.json"):
            runs[label + ("250" if "cap250W" in result.parent.name else "")] = result.parent
    (sweep,) = [p.parent for p in (tmp / "runs-beta").glob("*/sweep.json")]
    runs["beta-sweep"] = sweep
    assert sorted(runs) == ["alpha", "beta", "beta-sweep", "beta250"]
    yield {"node": node, "tmp": tmp, "keys": keys, "sites": sites, "runs": runs}
    node.stop_everything()


def launch(centres, *args):
    return centres["node"].launch(*args)


def bundle(centres, label, site, out, *extra):
    done = launch(centres, "results", "bundle", str(centres["runs"][label]), "-o", str(out),
                  "--site", str(centres["sites"][site]), *extra)
    assert done.returncode == 0, done.stderr
    return out


def verify_fails(centres, folder, *fragments, site="verifier", extra=()):
    """Verification fails in one line naming what broke."""
    done = launch(centres, "results", "verify", str(folder), "--site", str(centres["sites"][site]),
                  *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1 and "FAILED" in lines[0], done.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bundle_and_verify_roundtrip_with_the_statement_saying_what_produced_the_run(centres, tmp_path):
    out = bundle(centres, "alpha", "alpha", tmp_path / "b", "--tar")
    run = centres["runs"]["alpha"].name
    assert sorted(p.name for p in (out / "runs" / run).iterdir()) == \
        ["mllog.txt", "power", "result.json", "samples.csv", "spec.json"]  # power/: MLPerf Power's file
    env = json.loads((out / "statement.dsse.json").read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json" and len(env["signatures"]) == 1
    import base64
    import hashlib

    stmt = json.loads(base64.b64decode(env["payload"]))
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    digests = {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]}
    result = out / "runs" / run / "result.json"
    assert digests[f"runs/{run}/result.json"] == hashlib.sha256(result.read_bytes()).hexdigest()
    pred = stmt["predicate"]
    assert pred["site"] == "alpha"
    (rec,) = pred["runs"]
    doc = json.loads(result.read_text())
    assert rec["gpus"][0]["uuid"] == doc["gpus"][0]["uuid"]
    # The board serial the (fake) NVML gave, recorded by the run, named by the statement.
    assert rec["gpus"][0]["serial"] == doc["gpus"][0]["serial"] == centres["node"].devices()[0]["serial"]
    assert rec["caps"]["requested_w"] == 300.0 and rec["caps"]["enforced"] is True
    assert rec["validity"]["recomputed"] == doc["validity"]["verdict"]
    for target in (out, tmp_path / "b.tar"):
        done = launch(centres, "results", "verify", str(target), "--site", str(centres["sites"]["verifier"]))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "VERIFIED: signed by the key site 'alpha' gave you" in done.stdout


def test_a_sweep_bundles_as_its_runs_and_its_summary(centres, tmp_path):
    out = bundle(centres, "beta-sweep", "beta", tmp_path / "b")
    sweep = centres["runs"]["beta-sweep"].name
    assert (out / "runs" / sweep / "sweep.json").is_file()
    assert sorted(p.parent.name for p in out.rglob("result.json")) == \
        sorted([centres["runs"]["beta"].name, centres["runs"]["beta250"].name])
    done = launch(centres, "results", "verify", str(out), "--site", str(centres["sites"]["verifier"]),
                  "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    (verdict,) = json.loads(done.stdout)
    assert verdict["status"] == "verified" and verdict["site"] == "beta" and len(verdict["runs"]) == 2


def test_a_site_bundles_only_what_it_measured(centres, tmp_path):
    done = launch(centres, "results", "bundle", str(centres["runs"]["alpha"]), "-o", str(tmp_path / "b"),
                  "--site", str(centres["sites"]["beta"]))
    one_line_error(done, "measured under site 'alpha', not 'beta'")
    assert not (tmp_path / "b").exists()


def test_a_tampered_number_fails_verification(centres, tmp_path):
    out = bundle(centres, "alpha", "alpha", tmp_path / "b")
    result = next(out.rglob("result.json"))
    doc = json.loads(result.read_text())
    doc["throughput"]["node"] *= 3
    result.write_text(json.dumps(doc))
    verify_fails(centres, out, "result.json is not the file that was signed")


def test_a_swapped_file_fails_verification(centres, tmp_path):
    out = bundle(centres, "alpha", "alpha", tmp_path / "b")
    samples = next(out.rglob("samples.csv"))
    samples.unlink()
    shutil.copy(centres["runs"]["beta"] / "samples.csv", samples)
    verify_fails(centres, out, "samples.csv is not the file that was signed")


def test_a_wrong_key_fails_verification(centres, tmp_path):
    out = bundle(centres, "alpha", "alpha", tmp_path / "b", "--key", str(centres["keys"] / "mallory"))
    verify_fails(centres, out, "signed by a key this site does not trust")


def test_a_result_replayed_under_another_sites_name_fails_verification(centres, tmp_path):
    # Beta re-signs alpha's files as its own: the statement is genuine beta, the runs are not.
    from hpcai.launcher.bundles import dsse, keys
    from hpcai.launcher.bundles.statement import serialise

    out = bundle(centres, "alpha", "alpha", tmp_path / "b")
    env = json.loads((out / "statement.dsse.json").read_text())
    stmt = json.loads(dsse.parse(json.dumps(env).encode())[1])
    stmt["predicate"]["site"] = "beta"
    beta = keys.load_private(centres["keys"] / "beta")
    (out / "statement.dsse.json").write_text(json.dumps(
        dsse.sign(serialise(stmt), beta, keys.key_id(beta.public_key()))))
    verify_fails(centres, out, "measured under site 'alpha' but the statement names 'beta'",
                 "replayed under another site's name")
    # Alpha's genuine bundle handed over as beta's.
    genuine = bundle(centres, "alpha", "alpha", tmp_path / "g")
    verify_fails(centres, genuine, "the bundle is site 'alpha''s, not 'beta''s",
                 extra=("--expect-site", "beta"))


def test_an_expired_or_untrusted_key_fails_verification(centres, tmp_path):
    out = bundle(centres, "alpha", "alpha", tmp_path / "b")
    keys = centres["keys"]
    expired = write_site(tmp_path, "expired", "", [("alpha", keys / "alpha.pub", "2020-01-31")])
    done = launch(centres, "results", "verify", str(out), "--site", str(expired))
    assert done.returncode == 1 and done.stdout.count("\n") == 1
    assert "site 'alpha''s key" in done.stdout and "expired on 2020-01-31" in done.stdout
    untrusted = write_site(tmp_path, "only-beta", "", [("beta", keys / "beta.pub", None)])
    done = launch(centres, "results", "verify", str(out), "--site", str(untrusted))
    assert done.returncode == 1 and "signed by a key this site does not trust" in done.stdout
    # A key trusted for another site does not vouch for alpha's name either.
    misnamed = write_site(tmp_path, "misnamed", "", [("beta", keys / "alpha.pub", None)])
    done = launch(centres, "results", "verify", str(out), "--site", str(misnamed))
    assert done.returncode == 1 and "signed with site 'beta''s key" in done.stdout


def test_a_hand_edited_throughput_signed_by_its_site_still_fails(centres, tmp_path):
    # The site itself edits before signing: the hashes hold, the figures do not.
    run = tmp_path / centres["runs"]["alpha"].name
    shutil.copytree(centres["runs"]["alpha"], run)
    doc = json.loads((run / "result.json").read_text())
    doc["throughput"]["node"] *= 3
    doc["throughput"]["per_gpu"] *= 3
    (run / "result.json").write_text(json.dumps(doc))
    done = launch(centres, "check", str(run))
    assert done.returncode == 1 and "figures_consistency" in done.stdout
    done = launch(centres, "results", "bundle", str(run), "-o", str(tmp_path / "b"),
                  "--site", str(centres["sites"]["alpha"]))
    assert done.returncode == 0, done.stderr
    verify_fails(centres, tmp_path / "b", "figures_consistency", "changed after the run")


def test_compare_two_centres_runs(centres, tmp_path):
    a = bundle(centres, "alpha", "alpha", tmp_path / "a")
    b = bundle(centres, "beta", "beta", tmp_path / "b")
    site = str(centres["sites"]["verifier"])
    done = launch(centres, "results", "compare", str(a), str(b), "--site", site, "--json")
    (pair,) = json.loads(done.stdout)
    assert (pair["origin_a"], pair["verification_a"], pair["origin_b"], pair["verification_b"]) == \
        ("alpha", "verified", "beta", "verified")
    assert pair["verdict"] in ("comparable", "comparable with caveats")
    assert all(r["grade"] != "not comparable" for r in pair["reasons"])
    done = launch(centres, "results", "compare", str(a), str(centres["runs"]["beta250"]), "--site", site)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT COMPARABLE" in done.stdout and "cap 300.0 W vs 250.0 W" in done.stdout
    assert "(beta, unsigned)" in done.stdout


def test_report_over_two_sites_bundles_shows_origins_and_never_averages_a_failed_one(centres, tmp_path):
    both = tmp_path / "bundles"
    bundle(centres, "alpha", "alpha", both / "alpha")
    beta = bundle(centres, "beta", "beta", both / "beta")
    beta_result = next(beta.rglob("result.json"))
    doc = json.loads(beta_result.read_text())
    doc["throughput"]["per_gpu"] = doc["throughput"]["node"] = 99999.0
    beta_result.write_text(json.dumps(doc))
    env = {**centres["node"].env, "HPCAI_SITE": str(centres["sites"]["verifier"])}
    done = centres["node"].launch("report", str(both), "-o", str(tmp_path / "rep"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    rows = {r[2]: r for r in report["tables"]["origins"]["rows"]}
    assert rows["alpha"][3:] == ["verified", "included"]
    assert rows["beta"][3:] == ["failed", "not included"]
    assert all(c["throughput_per_gpu"] != 99999.0 for c in report["cells"])
    (excluded,) = report["excluded_runs"]
    assert "bundle verification failed" in excluded["problems"][-1]
    assert "## Origins and verification" in (tmp_path / "rep" / "report.md").read_text()
    # Every row of the figures says whose runs it averages and that they verified.
    (table,) = [t for key, t in report["tables"].items() if key.startswith("throughput-")]
    assert table["header"][-1] == "Origin"
    # Only alpha's verified runs are averaged; beta's tampered run keeps a row of its own
    # with its failed check and no figure (issue 41: marks only on their own run set's row).
    assert table["rows"][0][-1] == "alpha (verified)"
    assert [(row[2], row[-1]) for row in table["rows"][1:]] == [("– ✗ figures_consistency", "–")]


def test_push_pull_and_verify_through_the_real_registry(centres, registry, tmp_path):
    a = bundle(centres, "alpha", "alpha", tmp_path / "a")
    ref = f"{registry}/results/alpha:run1"
    site = str(centres["sites"]["verifier"])
    done = launch(centres, "results", "push", str(a), ref, "--site", str(centres["sites"]["alpha"]))
    assert done.returncode == 0, done.stdout + done.stderr
    done = launch(centres, "results", "pull", ref, "-o", str(tmp_path / "pulled"), "--site", site)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VERIFIED" in done.stdout
    assert (tmp_path / "pulled" / "statement.dsse.json").read_bytes() == \
        (a / "statement.dsse.json").read_bytes()
    done = launch(centres, "results", "verify", ref, "--site", site)
    assert done.returncode == 0 and "VERIFIED: signed by the key site 'alpha' gave you" in done.stdout
    # The artifact carries hpcai's own media types.
    import urllib.request

    host, repo = ref[len("oras://"):].split("/", 1)
    request = urllib.request.Request(f"http://{host}/v2/{repo.split(':')[0]}/manifests/run1",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    manifest = json.loads(urllib.request.urlopen(request, timeout=30).read())
    assert manifest["config"]["mediaType"] == "application/vnd.hpcai.result-bundle.config.v1+json"
    assert [x["mediaType"] for x in manifest["layers"]] == ["application/vnd.hpcai.result-bundle.v1.tar"]
    # The report reads the reference itself: pulled, verified, its origin shown.
    env = {**centres["node"].env, "HPCAI_SITE": site}
    done = centres["node"].launch("report", ref, "-o", str(tmp_path / "rep"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads((tmp_path / "rep" / "report.json").read_text())["tables"]["origins"]["rows"]
    assert [r[2:] for r in rows] == [["alpha", "verified", "included"]]
    # A pull never writes over a folder that holds something.
    done = launch(centres, "results", "pull", ref, "-o", str(tmp_path / "pulled"), "--site", site)
    one_line_error(done, "already exists and is not an empty folder")


def test_the_images_signature_is_checked_when_bundled(apptainer_exe, tiny_image, signing_keys, tmp_path):
    """A real SIF signed and verified by real Apptainer with a real PEM key pair."""
    from hpcai.launcher.bundles.image_status import signature_status
    from hpcai.launcher.images.apptainer import Apptainer
    from hpcai.launcher.images.store import describe

    private, public = signing_keys
    signed = tmp_path / "signed.sif"
    shutil.copy(tiny_image, signed)
    apptainer = Apptainer(apptainer_exe)
    apptainer.sign(signed, private)
    site = {"images": {"verify_key": str(public)}, "apptainer": {"executable": apptainer_exe}}
    record = describe(signed, {})
    assert signature_status(site, record).startswith("verified with images.verify_key")
    assert signature_status(site, describe(tiny_image, {})).startswith("failed: tiny.sif does not verify")
    assert signature_status({"images": {"verify_key": ""}}, record) == \
        "not checked: the site names no images.verify_key"
    with open(signed, "ab") as fh:
        fh.write(b"\0")
    assert "no longer the image the run used" in signature_status(site, record)
    assert signature_status(site, None) is None  # the host runtime: no image
