"""Execute notebooks in place so their stored outputs are fresh (``make solutions``).

Runs each notebook in its own directory, on the ``python3`` kernel of the virtual
environment, the same way nbval and the book build will run it.

    python tools/execute_notebooks.py solutions/01_kv_memory.ipynb [...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

CELL_TIMEOUT_S = 600


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    print(f"executed {path} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        execute(Path(arg))
