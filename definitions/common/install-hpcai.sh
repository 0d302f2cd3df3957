#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one install step every image runs in %post (definitions/*/*.def).
#
# It puts hpcai and its family's pinned stack into a venv at /opt/hpcai/venv
# that sees the base image's Python packages, and never touches the base's
# torch: the base's build is what the image measures. Steps:
#   1. a venv on the base's python3 (--system-site-packages, plus a .pth of
#      site.addsitedir lines for bases whose python3 is itself a venv, like
#      rocm/pytorch's /opt/venv, so that venv's own .pth files work too);
#   2. the requirements file of this flavour and family, every line
#      name==version, installed with --no-deps so pip never resolves (and so
#      never reaches for torch); the pinned setuptools goes into the venv
#      first (hpcai's build needs >=77); a pin the base already has is
#      skipped, at another version too unless step 3 shows the stack needs
#      the pin; KEEP packages the base has are never replaced (versions
#      compare by their public part: a base's 0.5.19+d2026 is 0.5.19). The
#      base's own pip constraint (NGC's PIP_CONSTRAINT) is set aside: the
#      venv may carry newer versions than the base of anything but KEEP,
#      which a constraint file of the base's KEEP versions holds;
#   3. `pip check` must report nothing new, and torch must be unchanged;
#   4. hpcai from /opt/hpcai/src without dependencies (and ROCm's own amdsmi;
#      a .pth that turns torchrun's libuv request off where torch lacks libuv);
#   5. /opt/hpcai/build-info.json and /opt/hpcai/pip-freeze.txt (provenance).
#
# Inputs (environment, from the definition's build arguments):
#   HPCAI_FLAVOUR cuda|rocm|cpu, HPCAI_FAMILY cv|llm-train|llm-serve (required),
#   HPCAI_VERSION, HPCAI_COMMIT, HPCAI_WORKLOADS ("all": the family's), HPCAI_BASE_IMAGE (recorded),
#   PIP_CERT, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS (used only
#   when non-empty: site mirrors and CA bundles stay out of the image);
#   ROCM_PATH (ROCm's own variable, default /opt/rocm: where amdsmi's source is);
#   HPCAI_PREFIX (default /opt/hpcai; tests run this script on stand-in bases).
set -euo pipefail

PREFIX=${HPCAI_PREFIX:-/opt/hpcai}
SRC=$PREFIX/src
VENV=$PREFIX/venv
# The base builds of these are what the image is about; an image never swaps them.
KEEP="torch torchvision torchaudio triton pytorch-triton pytorch-triton-rocm numpy sglang sgl-kernel sglang-kernel flashinfer-python"

say() { echo "[install-hpcai] $*"; }
die() { echo "[install-hpcai] error: $*" >&2; exit 1; }

: "${HPCAI_FLAVOUR:?HPCAI_FLAVOUR is not set}" "${HPCAI_FAMILY:?HPCAI_FAMILY is not set}"
REQS=$SRC/definitions/requirements/$HPCAI_FLAVOUR-$HPCAI_FAMILY.txt
[ -f "$SRC/pyproject.toml" ] || die "$SRC holds no hpcai source: pass --build-arg HPCAI_SRC=<a clean copy of the repository>"
[ -f "$REQS" ] || die "no requirements file $REQS for flavour $HPCAI_FLAVOUR, family $HPCAI_FAMILY"

# A docker base's ENV (its PATH to python3) is not always applied in %post.
if [ -f /.singularity.d/env/10-docker2singularity.sh ]; then
  # shellcheck disable=SC1091
  . /.singularity.d/env/10-docker2singularity.sh
fi

# Site settings from build arguments, only when given; nothing is written to pip.conf.
for name in PIP_CERT PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS; do
  if [ -n "${!name:-}" ]; then export "${name?}"; else unset "$name"; fi
done
# NGC's images (25.03 on) set PIP_CONSTRAINT=/etc/pip/constraint.txt, a pin of every
# package they ship, which pip applies even with --no-deps: a pin newer than the base's
# (safetensors for diffusers, lightning-utilities for torchmetrics) would stop the build.
# The venv is hpcai's own and may carry newer versions of anything but KEEP; the base's
# file is recorded (step 5) and replaced by one holding the KEEP packages (after step 1).
base_constraint=${PIP_CONSTRAINT:-}
unset PIP_CONSTRAINT PIP_BUILD_CONSTRAINT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

# A working folder copied as HPCAI_SRC may carry these; they must not reach the image.
for junk in .git .venv results images build bench/out hpcai.egg-info hpcai_power_bench.egg-info; do
  if [ -e "$SRC/$junk" ]; then say "dropping $SRC/$junk (pass a clean copy as HPCAI_SRC)"; rm -rf "${SRC:?}/$junk"; fi
done

# ---- 1. the venv -------------------------------------------------------------------
BASE_PY=$(command -v python3) || die "the base image has no python3"
say "base python: $BASE_PY ($("$BASE_PY" --version 2>&1))"
if ! "$BASE_PY" -m venv --system-site-packages "$VENV" 2>/dev/null; then
  # Ubuntu bases without python3-venv: no ensurepip, so borrow the base's pip.
  rm -rf "$VENV"
  "$BASE_PY" -m venv --system-site-packages --without-pip "$VENV"
fi
PY=$VENV/bin/python3
# The base's own site folders the venv does not see, for bases whose python3 is
# itself a venv: added with site.addsitedir, so their .pth files (editable
# installs) are processed too, as they are for the base's python3.
site_dir=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$BASE_PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$PREFIX/.base-sites"
"$PY" - "$PREFIX/.base-sites" > "$site_dir/_hpcai_base_site.pth" <<'EOF'
import sys
seen = set(sys.path)
for folder in open(sys.argv[1]).read().split():
    if folder not in seen:
        print(f"import site; site.addsitedir({folder!r})")
EOF
"$PY" -m pip --version >/dev/null || die "no pip for $PY: the base image needs python3-pip or python3-venv"
PIP=("$PY" -m pip)

# name==version of every distribution the venv sees now (the base's), names normalised.
freeze_base() {
  "$PY" - <<'EOF'
import importlib.metadata as md, re
seen = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        seen.setdefault(re.sub(r"[-_.]+", "-", name).lower(), dist.version)
for name in sorted(seen):
    print(f"{name}=={seen[name]}")
EOF
}
# pip check's complaints, one per line ("No broken requirements" is none).
check_problems() { "${PIP[@]}" check 2>/dev/null | grep -v '^No broken requirements' | sort || true; }

freeze_base > "$PREFIX/base-freeze.txt"
check_problems > "$PREFIX/.check-before"
torch_before=$(grep '^torch==' "$PREFIX/base-freeze.txt" || echo "torch absent")
say "base has $(wc -l < "$PREFIX/base-freeze.txt") distributions; $torch_before"
# The base's builds of the KEEP packages, as pip's only constraint from here on.
keep_pattern=$(echo "$KEEP" | sed 's/ /|/g')
grep -E "^($keep_pattern)==" "$PREFIX/base-freeze.txt" > "$PREFIX/keep-constraints.txt" || true
export PIP_CONSTRAINT=$PREFIX/keep-constraints.txt
if [ -n "$base_constraint" ]; then
  say "the base's PIP_CONSTRAINT ($base_constraint) is set aside; KEEP packages stay the base's: $(tr '\n' ' ' < "$PIP_CONSTRAINT")"
fi

# Whether the base's version satisfies a pin: equal, or the pin names no local
# label and the base's public version is the pin (sglang 0.5.19+d20260911 is 0.5.19).
same_version() {  # HAVE WANT
  [ "$1" = "$2" ] || { [[ $2 != *+* ]] && [ "${1%%+*}" = "$2" ]; }
}

shadowed=()
# ---- 2. the pinned stack --------------------------------------------------------------
# A pin the base lacks is added; one it has at the same version is skipped; one
# it has at another version keeps the base's copy unless step 3 finds the stack
# needs the pin. KEEP packages are the base's or the build fails. setuptools is
# hpcai's build tool (step 4; pyproject.toml needs >=77): the pin always goes in.
add=$PREFIX/added-requirements.txt
other=$PREFIX/.base-differs
tools=$PREFIX/.build-tools
: > "$add"; : > "$other"; : > "$tools"
while read -r line; do
  line=${line%%#*}; line=${line//[[:space:]]/}
  [ -n "$line" ] || continue
  [[ $line == *==* ]] || die "$REQS: '$line' is not pinned as name==version"
  name=$(echo "${line%%==*}" | tr 'A-Z_.' 'a-z--'); want=${line#*==}
  have=$(grep -m1 "^$name==" "$PREFIX/base-freeze.txt" | cut -d= -f3 || true)
  if [ -z "$have" ]; then
    echo "$name==$want" >> "$add"
  elif ! same_version "$have" "$want"; then
    [[ " $KEEP " != *" $name "* ]] ||
      die "the base image has $name $have but $REQS pins $want: pick the base tag that ships $want (BASE_IMAGE) or change the pin"
    if [ "$name" = setuptools ]; then
      echo "$name==$want" >> "$tools"; shadowed+=("setuptools: $want in the venv over the base's $have (hpcai's build)")
    else
      echo "$name==$want $have" >> "$other"
    fi
  fi
done < "$REQS"
install_pins() {  # FILE of name==version lines
  [ -s "$1" ] || return 0
  say "installing $(wc -l < "$1") pinned packages (no dependency resolution)"
  "${PIP[@]}" install --no-deps --only-binary=:all: --progress-bar off -r "$1"
}
install_pins "$tools"
cat "$tools" >> "$add"
install_pins "$add"

# ---- 3. nothing broken, torch untouched ----------------------------------------------
new_problems() { check_problems | comm -13 "$PREFIX/.check-before" -; }
for _ in 1 2 3 4 5; do
  problems=$(new_problems)
  [ -n "$problems" ] && [ -s "$other" ] || break
  # The base's version of a package a problem names gives way to the pin, in the venv.
  : > "$PREFIX/.shadow"
  while read -r pin have; do
    pattern=$(echo "${pin%%==*}" | sed 's/-/[-_.]/g')
    if echo "$problems" | grep -qiE "(you have|requires) $pattern[ ,]"; then
      echo "$pin" >> "$PREFIX/.shadow"; shadowed+=("${pin%%==*}: ${pin#*==} in the venv over the base's $have")
    fi
  done < "$other"
  [ -s "$PREFIX/.shadow" ] || break
  grep -vF -f <(sed 's/$/ /' "$PREFIX/.shadow") "$other" > "$other.tmp" || true
  mv "$other.tmp" "$other"
  install_pins "$PREFIX/.shadow"
  cat "$PREFIX/.shadow" >> "$add"
done
for note in "${shadowed[@]}"; do say "shadowed: $note"; done
while read -r pin have; do say "kept the base's ${pin%%==*} $have (pinned ${pin#*==})"; done < "$other"
problems=$(new_problems)
if [ -n "$problems" ]; then
  echo "$problems" >&2
  die "the pinned packages leave requirements unmet (above): add or change pins in $REQS"
fi
torch_after=$(freeze_base | grep '^torch==' || echo "torch absent")
[ "$torch_before" = "$torch_after" ] || die "torch changed from '$torch_before' to '$torch_after'"

# ---- 4. hpcai, from the source, without dependencies -----------------------------------
# Built in a scratch copy so the source in the image stays as given; setuptools
# comes from the pins (no build isolation: nothing unpinned is fetched).
build=$(mktemp -d)
cp -a "$SRC/." "$build/"
"${PIP[@]}" install --no-deps --no-build-isolation "$build"
rm -rf "$build"
# ROCm's amdsmi must match the base's libamd_smi: install the copy ROCm ships.
if [ "$HPCAI_FLAVOUR" = rocm ] && ! "$PY" -c 'import amdsmi' 2>/dev/null; then
  amd_smi_src=$(ls -d "${ROCM_PATH:-/opt/rocm}/share/amd_smi" 2>/dev/null || true)
  [ -n "$amd_smi_src" ] || die "the ROCm base has no amdsmi and no ${ROCM_PATH:-/opt/rocm}/share/amd_smi"
  amd_smi_copy=$(mktemp -d)
  cp -a "$amd_smi_src/." "$amd_smi_copy/" && "${PIP[@]}" install --no-deps --no-build-isolation "$amd_smi_copy"
  rm -rf "$amd_smi_copy"
fi

# Debian's torch has no libuv, which torchrun's stores ask for: default it off there.
if "$PY" - 2>/dev/null <<'EOF'
import sys
try:
    import torch.distributed as dist
    dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True)
except RuntimeError as exc:
    sys.exit(0 if "libuv" in str(exc) else 1)
sys.exit(1)
EOF
then
  say "this torch has no libuv: torchrun's stores use the other TCPStore backend (hpcai.workloads.torch_compat)"
  echo 'import hpcai.workloads.torch_compat; hpcai.workloads.torch_compat.install()' > "$site_dir/hpcai-torch-compat.pth"
fi

# ---- 5. provenance (/opt/hpcai/build-info.json, /opt/hpcai/pip-freeze.txt) ---------------
"${PIP[@]}" freeze > "$PREFIX/pip-freeze.txt"
# The base's own constraint file, as it was: what the base pins, for the record.
for file in $base_constraint; do
  if [ -f "$file" ]; then cat "$file"; fi
done > "$PREFIX/base-pip-constraint.txt"
[ -s "$PREFIX/base-pip-constraint.txt" ] || rm -f "$PREFIX/base-pip-constraint.txt"
HPCAI_ADDED="$add" HPCAI_SHADOWED="$(printf '%s\n' "${shadowed[@]}")" \
HPCAI_KEPT="$(cat "$other")" HPCAI_PREFIX="$PREFIX" HPCAI_BASE_CONSTRAINT="$base_constraint" "$PY" - <<'EOF'
import datetime, importlib.metadata as md, json, os, platform, shutil
from pathlib import Path

import hpcai
from hpcai.workloads.catalog import family_workloads

env = os.environ.get
family = env("HPCAI_FAMILY")
# "all" (the definitions' default) or empty: every workload the catalog puts in this family.
workloads = [w for w in (env("HPCAI_WORKLOADS") or "").split(",") if w not in ("", "all")] or family_workloads(family)
unknown = sorted(set(workloads) - set(family_workloads(family)))
if unknown:
    raise SystemExit(f"[install-hpcai] error: HPCAI_WORKLOADS names {', '.join(unknown)}, "
                     f"not in the {family} family ({', '.join(family_workloads(family))})")
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
info = {
    "version": env("HPCAI_VERSION") or None,
    "package_version": hpcai.__version__,
    "commit": env("HPCAI_COMMIT") or None,
    "flavour": env("HPCAI_FLAVOUR"),
    "family": family,
    "workloads": workloads,
    "base_image": env("HPCAI_BASE_IMAGE") or None,
    "build_date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "python": platform.python_version(),
    "torch": version("torch"),
    "added": Path(env("HPCAI_ADDED")).read_text().split(),
    "shadowed_base": [k for k in env("HPCAI_SHADOWED", "").splitlines() if k],
    # Pins the base has at another version: its copy was kept (the stack works with it).
    "kept_from_base": [f"{pin.split('==')[0]} {have} (pinned {pin.split('==')[1]})"
                       for pin, have in (k.split() for k in env("HPCAI_KEPT", "").splitlines() if k)],
    # The base's PIP_CONSTRAINT (NGC's): set aside for the KEEP packages' versions.
    "base_pip_constraint": env("HPCAI_BASE_CONSTRAINT") or None,
}
build_info = Path(env("HPCAI_PREFIX")) / "build-info.json"
build_info.write_text(json.dumps(info, indent=2) + "\n")
# hpcai.provenance reads the commit from here (no .git inside an image).
shutil.copy(build_info, Path(hpcai.__file__).with_name("_build_info.json"))
print("[install-hpcai] build info:", json.dumps(info))
EOF
rm -f "$PREFIX/.check-before" "$PREFIX/.base-differs" "$PREFIX/.shadow" "$PREFIX/.build-tools" "$PREFIX/.base-sites"
say "done: $("$PY" -c 'import hpcai; print("hpcai", hpcai.__version__)') in $VENV"
