"""`python -m hpcai.launcher.cli`: the same as `hpcai-launch`."""
from hpcai.launcher.cli.commands import main

main()
