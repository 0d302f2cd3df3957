"""`python -m hpcai.launcher.cli`: the same as `hpcai-launch`."""
from hpcai.launcher.cli.hpcai_launch import main

main()
