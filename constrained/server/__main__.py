"""``python -m constrained.server [llama-server flags]``."""

import sys

from .main import main

sys.exit(main())
