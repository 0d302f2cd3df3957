import sys

from hpcai.workloads.entrypoint import main

sys.exit(main())
