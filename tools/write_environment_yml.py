"""Write environment.yml from requirements.txt, so conda users get the same pins.

    python tools/write_environment_yml.py
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = """\
# conda env create -f environment.yml   (the same pins as requirements.txt; a test keeps them equal)
# then, for the real-model lab:  pip install --no-deps -r requirements-nodeps.txt
name: long-context-book
channels:
  - conda-forge
dependencies:
  - python=3.11
  - pip
  - pip:
"""

if __name__ == "__main__":
    lines = [l.strip() for l in (ROOT / "requirements.txt").read_text().splitlines()]
    pins = [l for l in lines if l and not l.startswith("#")]
    (ROOT / "environment.yml").write_text(HEADER + "".join(f"      - {p}\n" for p in pins))
