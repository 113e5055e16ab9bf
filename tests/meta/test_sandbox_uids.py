"""The uids a root-run grader drops its contestants to are leased machine-wide.

The kernel counts ``RLIMIT_NPROC`` per uid over the whole machine. When each grading
process drew its uid from a set of its own, two pytest workers (or a worker and the grader
a release test starts) handed their contestants the same uid, their processes and threads
shared one limit, and Chapter 10's gloo ranks failed to start threads. A lease is a lock on
a file, so it is seen by every process and dropped when its holder dies.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grading.layout import ROOT
from grading.proc import sandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="uids are leased only by a grader run as root")

HOLD = ("from grading.proc import sandbox; import sys; lease = sandbox.UidLease(); print(lease.uid, flush=True); "
        "sys.stdin.read()")


def test_two_leases_in_one_process_differ_and_a_released_uid_is_free_again():
    first, second = sandbox.UidLease(), sandbox.UidLease()
    try:
        assert first.uid != second.uid
        first.release()
        again = sandbox.UidLease()
        assert again.uid != second.uid  # the released uid (or another free one), never a held one
        again.release()
    finally:
        first.release()
        second.release()


def test_another_process_never_gets_a_held_uid_and_a_dead_holder_frees_it():
    holder = subprocess.Popen([sys.executable, "-c", HOLD], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(holder.stdout.readline())
        with sandbox.child_uid() as mine:
            assert mine != theirs
    finally:
        holder.kill()
        holder.wait()
    leases = []
    try:
        while True:  # after the holder died, its uid is among those free again
            leases.append(sandbox.UidLease())
            if leases[-1].uid >= theirs:
                break
        assert theirs in {lease.uid for lease in leases}
    finally:
        for lease in leases:
            lease.release()


def test_a_process_keeps_one_uid_for_its_contestants():
    assert sandbox.process_uid() == sandbox.process_uid()
    other = subprocess.run([sys.executable, "-c", "from grading.proc import sandbox; print(sandbox.process_uid())"],
                           cwd=ROOT, capture_output=True, text=True, check=True)
    assert int(other.stdout) != sandbox.process_uid()
