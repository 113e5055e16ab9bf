"""``python -m gpucompile SPEC RESULT``: the child process of :func:`gpucompile.compile_many`."""

import sys

from gpucompile import child_main

sys.exit(child_main(sys.argv[1], sys.argv[2]))
