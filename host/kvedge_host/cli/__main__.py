# `python -m kvedge_host.cli`
import sys

from kvedge_host.cli import main

sys.exit(main())
