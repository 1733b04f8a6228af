"""`python -m vkq ...` is the `vkq` command."""
import sys

from .cli import main

sys.exit(main())
