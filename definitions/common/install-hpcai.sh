#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one install step every image runs in %post (definitions/*/*.def).
#
# It puts hpcai and its family's pinned stack into a venv at /opt/hpcai/venv
# that sees the base image's Python packages, and never touches the base's
# torch: the base's build is what the image measures. Steps:
#   1. a venv on the base's python3 (--system-site-packages, plus a .pth for
#      bases whose python3 is itself a venv or conda, like rocm/pytorch);
#   2. the requirements file of this flavour and family, every line
#      name==version, installed with --no-deps so pip never resolves (and so
#      never reaches for torch); a pin the base already has is skipped, at
#      another version too unless step 3 shows the stack needs the pin; KEEP
#      packages the base has are never replaced;
#   3. `pip check` must report nothing new, and torch must be unchanged;
#   4. hpcai from /opt/hpcai/src without dependencies (and ROCm's own amdsmi;
#      a .pth that turns torchrun's libuv request off where torch lacks libuv);
#   5. /opt/hpcai/build-info.json and /opt/hpcai/pip-freeze.txt (provenance).
#
# Inputs (environment, from the definition's build arguments):
#   HPCAI_FLAVOUR cuda|rocm|cpu, HPCAI_FAMILY cv|llm-train|llm-serve (required),
#   HPCAI_VERSION, HPCAI_COMMIT, HPCAI_WORKLOADS, HPCAI_BASE_IMAGE (recorded),
#   PIP_CERT, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS (used only
#   when non-empty: site mirrors and CA bundles stay out of the image).
set -euo pipefail

PREFIX=/opt/hpcai
SRC=$PREFIX/src
VENV=$PREFIX/venv
# The base builds of these are what the image is about; an image never swaps them.
KEEP="torch torchvision torchaudio triton pytorch-triton-rocm numpy sglang sgl-kernel flashinfer-python"

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
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore

# A working folder copied as HPCAI_SRC may carry these; they must not reach the image.
for junk in .git .venv results images build bench/out hpcai.egg-info; do
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
# The base's own site folders, for bases whose python3 is a venv or conda env.
site_dir=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
"$BASE_PY" -c 'import site; print("\n".join(site.getsitepackages()))' > "$site_dir/_hpcai_base_site.pth"
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

# ---- 2. the pinned stack --------------------------------------------------------------
# A pin the base lacks is added; one it has at the same version is skipped; one
# it has at another version keeps the base's copy unless step 3 finds the stack
# needs the pin. KEEP packages are the base's or the build fails.
add=$PREFIX/added-requirements.txt
other=$PREFIX/.base-differs
: > "$add"; : > "$other"
while read -r line; do
  line=${line%%#*}; line=${line//[[:space:]]/}
  [ -n "$line" ] || continue
  [[ $line == *==* ]] || die "$REQS: '$line' is not pinned as name==version"
  name=$(echo "${line%%==*}" | tr 'A-Z_.' 'a-z--'); want=${line#*==}
  have=$(grep -m1 "^$name==" "$PREFIX/base-freeze.txt" | cut -d= -f3 || true)
  if [ -z "$have" ]; then
    echo "$name==$want" >> "$add"
  elif [ "$have" != "$want" ]; then
    [[ " $KEEP " != *" $name "* ]] ||
      die "the base image has $name $have but $REQS pins $want: pick the base tag that ships $want (BASE_IMAGE) or change the pin"
    echo "$name==$want $have" >> "$other"
  fi
done < "$REQS"
install_pins() {  # FILE of name==version lines
  [ -s "$1" ] || return 0
  say "installing $(wc -l < "$1") pinned packages (no dependency resolution)"
  "${PIP[@]}" install --no-deps --only-binary=:all: --progress-bar off -r "$1"
}
install_pins "$add"

# ---- 3. nothing broken, torch untouched ----------------------------------------------
new_problems() { check_problems | comm -13 "$PREFIX/.check-before" -; }
shadowed=()
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
  amd_smi_src=$(ls -d /opt/rocm/share/amd_smi 2>/dev/null || true)
  [ -n "$amd_smi_src" ] || die "the ROCm base has no amdsmi and no /opt/rocm/share/amd_smi"
  cp -a "$amd_smi_src" /tmp/amd_smi && "${PIP[@]}" install --no-deps --no-build-isolation /tmp/amd_smi
  rm -rf /tmp/amd_smi
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

# ---- 5. provenance ---------------------------------------------------------------------
"${PIP[@]}" freeze > "$PREFIX/pip-freeze.txt"
HPCAI_ADDED="$add" HPCAI_SHADOWED="$(printf '%s\n' "${shadowed[@]}")" \
HPCAI_KEPT="$(cat "$other")" "$PY" - <<'EOF'
import datetime, importlib.metadata as md, json, os, platform, shutil
from pathlib import Path

import hpcai
from hpcai.workloads.catalog import family_workloads

env = os.environ.get
family = env("HPCAI_FAMILY")
workloads = [w for w in (env("HPCAI_WORKLOADS") or "").split(",") if w] or family_workloads(family)
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
}
Path("/opt/hpcai/build-info.json").write_text(json.dumps(info, indent=2) + "\n")
# hpcai.provenance reads the commit from here (no .git inside an image).
shutil.copy("/opt/hpcai/build-info.json", Path(hpcai.__file__).with_name("_build_info.json"))
print("[install-hpcai] build info:", json.dumps(info))
EOF
rm -f "$PREFIX/.check-before" "$PREFIX/.base-differs" "$PREFIX/.shadow"
say "done: $("$PY" -c 'import hpcai; print("hpcai", hpcai.__version__)') in $VENV"
