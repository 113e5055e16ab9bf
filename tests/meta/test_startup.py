"""What a grading run imports before its first test, and what it may leave out.

A student grades one exercise dozens of times, and most of each run was imports that
grading never uses: torch's compiler (pulled in by ``torch.use_deterministic_algorithms``),
hypothesis (by its pytest plugin's summary), rfc3987_syntax (by nbformat, named in
pytest.ini's warning filters before grading could turn it off). These checks are on what
is imported, not on time, so they hold on any machine.
"""

from __future__ import annotations

import builtins
import configparser
import json
import os
import subprocess
import sys
import time
import types

import pytest

from grading.judge import plugin
from grading.layout import PYTEST_INI, ROOT
from grading.proc import zygote as launcher_module

# Modules a judge or a zygote has no use for on the way to its first test.
NEVER_AT_START = ("torch._inductor", "torch._dynamo", "hypothesis", "rfc3987_syntax", "trio")


def test_judge_and_zygote_imports_leave_out_the_compiler_and_hypothesis():
    """The plugin (the judge), the zygote's own imports and the deterministic setup of
    both, in a fresh process: none of them imports torch's compiler or hypothesis, and
    torch is deterministic all the same, inductor included once something imports it."""
    code = f"""
import json, sys
import grading.judge.plugin, grading.contestant.main, grading.notebook.loader, grading.judge.substitute, grading.compare
from grading.determinism import make_deterministic
import torch
make_deterministic()
loaded = [m for m in {NEVER_AT_START!r} if sys.modules.get(m) is not None]  # None: refused (grading/__init__)
state = [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
         torch.utils.deterministic.fill_uninitialized_memory]
import torch._inductor.config
state.append(torch._inductor.config.deterministic)
print(json.dumps({{"loaded": loaded, "state": state}}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}  # no zygote: not a pytest
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], f"imported at start: {result['loaded']}"
    assert result["state"] == [True, True, True, True], result["state"]


def test_warning_filters_name_only_built_in_categories():
    """pytest imports the module of every category its filters name, before any plugin:
    nbformat's would be imported before grading turns off what costs a second in it."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(PYTEST_INI)
    filters = [line.strip() for line in ini["pytest"].get("filterwarnings", "").splitlines() if line.strip()]
    assert filters
    for line in filters:
        category = (line.split(":") + [""] * 3)[2].strip()
        assert category == "" or (category in vars(builtins) and isinstance(vars(builtins)[category], type)), \
            f"pytest.ini: {line!r} names a category pytest must import"


class _Manager:
    def __init__(self, plugins: dict):
        self.plugins = dict(plugins)

    def get_plugin(self, name):
        return self.plugins.get(name)

    def unregister(self, plugin):
        self.plugins = {k: v for k, v in self.plugins.items() if v is not plugin}


def _session(reports=(), statistics=False):
    hypothesis_plugin = types.SimpleNamespace(PRINT_STATISTICS_OPTION="--hypothesis-show-statistics")
    reporter = types.SimpleNamespace(stats={"passed": list(reports)})
    manager = _Manager({plugin.HYPOTHESIS_PLUGIN: hypothesis_plugin, "terminalreporter": reporter})
    config = types.SimpleNamespace(pluginmanager=manager,
                                   getoption=lambda name, default=None: statistics if "statistics" in name else default)
    return types.SimpleNamespace(config=config), manager


@pytest.mark.parametrize("imported, reports, statistics, kept", [
    (False, [], False, False),  # no hypothesis test ran: nothing for its summary to say
    (True, [], False, True),  # a hypothesis test ran here: its plugin reports
    (False, [types.SimpleNamespace(_hypothesis_failing_examples="[]")], False, True),  # an xdist worker's failure
    (False, [], True, True),  # statistics asked for
], ids=["no-hypothesis-test", "hypothesis-imported", "worker-failing-example", "statistics-asked"])
def test_hypothesis_plugin_is_let_go_only_when_it_has_nothing_to_report(monkeypatch, imported, reports, statistics,
                                                                         kept):
    if imported:
        monkeypatch.setitem(sys.modules, "hypothesis", types.ModuleType("hypothesis"))
    else:
        monkeypatch.delitem(sys.modules, "hypothesis", raising=False)
    session, manager = _session(reports, statistics)
    plugin.pytest_sessionfinish(session)
    assert (manager.get_plugin(plugin.HYPOTHESIS_PLUGIN) is not None) == kept


def test_head_start_zygote_outlives_the_thread_that_started_it():
    """The sandbox dies with the thread that started it (bwrap's --die-with-parent): a
    zygote started in the background must still be the one that forks the first
    contestant, not a second one started when the first was found dead."""
    launch = launcher_module.Launcher(launcher_module.current_limits())
    try:
        launch.prestart(background=True)
        deadline = time.monotonic() + 120
        while launch.proc is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with launch.lock:  # the start, done
            first = launch.proc
        assert first is not None, "the zygote was not started"
        time.sleep(1.0)  # time enough for a signal to its parent's death to arrive
        assert first.poll() is None, f"the zygote ended: {launch.tail()}"
        sock, pid = launch.spawn()
        sock.close()
        launch.end(pid)
        assert launch.proc is first, "spawn had to start another zygote"
    finally:
        launch.close()


def test_torch_is_made_deterministic_in_one_place():
    """``torch.use_deterministic_algorithms`` imports torch's compiler: the judge and the
    zygote call grading.determinism instead, which sets the same flags without it."""
    callers = [path.name for path in (ROOT / "grading").glob("*.py")
               if path.name != "determinism.py" and "use_deterministic_algorithms(" in path.read_text()]
    assert callers == [], f"call grading.determinism.make_deterministic() instead, in {callers}"


def test_release_profile_waits_for_hypothesis_and_meets_it_first():
    """The student edition's no-shrinking profile (grading.judge.replay) imports hypothesis only
    when a test does, and is in force before that test's own ``@settings`` are made."""
    code = """
import json, sys
from grading.judge import replay
replay._no_shrinking()
before = "hypothesis" in sys.modules
from hypothesis import Phase, settings
mine = settings(max_examples=3)
print(json.dumps([before, settings.get_current_profile_name(), Phase.shrink in mine.phases, mine.database is None]))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, "grading-release", False, True]
