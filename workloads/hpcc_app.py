"""HPC Challenge (Debian's `hpcc`) as the exec workload's `hpcc` preset.

hpcc reads hpccinf.txt from its working folder and writes hpccoutf.txt there:
this writes the input (hpcc's own example input, /usr/share/doc/hpcc/examples/
_hpccinf.txt, with one MPI rank and the problem size asked for) into a scratch
folder of the run, runs hpcc there, prints its summary and exits non-zero
unless hpcc says every test ran (a failed solve is a failed run).

    python -m hpcai.workloads.hpcc_app --n 2000 --nb 80
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# hpcc 1.5.0's example input (HPL section, then PTRANS), one rank: P = Q = 1.
INPUT = """HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
{n}         Ns
1            # of NBs
{nb}           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
1            Ps
1            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
"""
# The summary figures printed (hpccoutf.txt's "Begin of Summary section").
SUMMARY_KEYS = ("HPL_Tflops", "StarDGEMM_Gflops", "StarSTREAM_Triad", "StarRandomAccess_GUPs",
                "StarFFT_Gflops", "PTRANS_GBs", "Success")


def summary(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in SUMMARY_KEYS:
            found[key] = value.strip()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpcai.workloads.hpcc_app")
    parser.add_argument("--n", type=int, default=2000, help="HPL problem size")
    parser.add_argument("--nb", type=int, default=80, help="HPL block size")
    args = parser.parse_args(argv)
    hpcc = shutil.which("hpcc")
    if hpcc is None:
        print("hpcc_app: error: hpcc is not installed: apt-get install hpcc", file=sys.stderr)
        return 2
    base = os.environ.get("HPCAI_RUN_DIR")
    scratch = Path(tempfile.mkdtemp(prefix="hpcc-", dir=base if base and Path(base).is_dir() else None))
    (scratch / "hpccinf.txt").write_text(INPUT.format(n=args.n, nb=args.nb))
    env = dict(os.environ)
    # Open MPI's singleton refuses root without these; a site's batch user is not root.
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    code = subprocess.run([hpcc], cwd=scratch, env=env).returncode
    out = scratch / "hpccoutf.txt"
    text = out.read_text(errors="replace") if out.exists() else ""
    figures = summary(text)
    for key in SUMMARY_KEYS:
        if key in figures:
            print(f"hpcc {key}={figures[key]}", flush=True)
    if code != 0 or figures.get("Success") != "1" or "End of HPC Challenge tests" not in text:
        print(f"hpcc_app: error: hpcc exited with code {code}, Success={figures.get('Success')}: "
              f"see {out}", file=sys.stderr)
        return code or 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
