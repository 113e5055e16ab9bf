"""Execute the book's notebook pages side by side, into the cache its build reads.

Jupyter Book 1 executes a page while Sphinx reads it, one page after another (its command
line has no ``-j``): on a two-core machine the first build of the book ran one core for
four minutes while the other waited. This step fills the book's execution cache
(``execute.cache`` of ``_config.yml``) first, ``--jobs`` pages at a time, in worker
processes of their own; the build then finds every page's outputs there (jupyter-cache
matches a page by the hash of its code, the one myst-nb computes) and executes none.

It changes nothing a reader sees and checks nothing itself: a page it executes is cached
exactly as the build would cache it (same reader, folder, timeout and error policy, from
``_config.yml``); a page that fails here is left uncached, so the build executes it again
and reports its error as it always did (``-W``). Pages already cached are not run.

A page that times its own code (its front matter says ``timed: true``; a test holds every
page that reads a clock to it) prints measurements a reader compares: it runs alone, after
the others, with nothing beside it on the machine, as in a build that executes page by page.

    python -m tools.execute_pages [--jobs N]
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
READER = {"name": "myst_nb_md", "type": "plugin"}  # how myst-nb reads a MyST Markdown page into a notebook


def toc_files(toc: dict) -> list[str]:
    """Every ``file:`` of ``_toc.yml``, in the book's order."""
    found = [toc["root"]] if "root" in toc else []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(str(node["file"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in toc.items() if k != "root"})
    return found


def notebook_pages(root: Path = ROOT) -> list[Path]:
    """The pages the build executes: MyST Markdown notebooks of the toc that
    ``execute.exclude_patterns`` does not exclude."""
    from myst_nb.core.read import is_myst_markdown_notebook

    config = yaml.safe_load((root / "_config.yml").read_text())
    excluded = config.get("execute", {}).get("exclude_patterns", [])
    pages = []
    for name in toc_files(yaml.safe_load((root / "_toc.yml").read_text())):
        path = root / f"{name}.md"
        if (path.is_file() and not any(fnmatch.fnmatch(f"{name}.md", p) for p in excluded)
                and is_myst_markdown_notebook(path.read_text(encoding="utf-8"))):
            pages.append(path)
    return pages


def is_timed(path: Path) -> bool:
    """Whether the page times its own code (``timed: true``): it executes alone."""
    from tools.readme import front_matter

    return front_matter(path.read_text(encoding="utf-8"))[0].get("timed") is True


def _execute(path: str, timeout: int, allow_errors: bool):
    """One page, in this worker process: (its executed notebook or None, seconds, error)."""
    from jupyter_cache.executors.utils import single_nb_execution
    from jupyter_cache.readers import get_reader

    nb = get_reader(READER)(path)
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout, allow_errors=allow_errors)
    if result.err is not None:
        return None, result.time, f"{type(result.err).__name__}"
    return result.nb, result.time, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pages executed at once")
    args = parser.parse_args(argv)
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    config = yaml.safe_load((ROOT / "_config.yml").read_text()).get("execute", {})
    if config.get("execute_notebooks") != "cache":
        print("execute_pages: the book does not execute through a cache; nothing to do")
        return 0
    cache = get_cache(str(ROOT / config.get("cache", "_build/.jupyter_cache")))
    records = {str(path): cache.add_nb_to_project(str(path), read_data=READER) for path in notebook_pages()}
    waiting = {record.uri for record in cache.list_unexecuted()}
    # The longest first (as the cache last timed them), so the last page to end is a short one.
    known = {record.uri: record.data.get("execution_seconds", 0.0)
             for record in sorted(cache.list_cache_records(), key=lambda record: record.pk)}  # the latest wins
    todo = sorted((p for p, r in records.items() if r.uri in waiting), key=lambda p: -known.get(records[p].uri, 0.0))
    if not todo:
        return 0
    start = time.perf_counter()
    timeout, allow_errors = int(config.get("timeout", 30)), bool(config.get("allow_errors", False))
    timed = {path for path in todo if is_timed(Path(path))}
    side_by_side, alone = [p for p in todo if p not in timed], [p for p in todo if p in timed]
    # The timed pages after the others have ended, through one worker: one at a time.
    for batch, jobs in ((side_by_side, args.jobs), (alone, 1)):
        if not batch:
            continue
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(batch)))) as pool:
            futures = {pool.submit(_execute, path, timeout, allow_errors): path for path in batch}
            for future in as_completed(futures):
                path = futures[future]
                nb, seconds, error = future.result()
                name = Path(path).relative_to(ROOT)
                if nb is None:
                    print(f"execute_pages: {name} failed ({error}) after {seconds:.0f} s; the build will run it again")
                    continue
                cache.cache_notebook_bundle(
                    CacheBundleIn(nb, records[path].uri, data={"execution_seconds": seconds}),
                    check_validity=False, overwrite=True)
                print(f"execute_pages: {name} in {seconds:.0f} s" + (" (timed: alone)" if path in timed else ""))
    print(f"execute_pages: {len(side_by_side)} pages {args.jobs} at a time, then {len(alone)} timed pages one by "
          f"one, in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
