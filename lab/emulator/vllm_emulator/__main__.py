"""`python3 -m vllm_emulator serve MODEL [flags]`, the same as the `vllm` wrapper."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
