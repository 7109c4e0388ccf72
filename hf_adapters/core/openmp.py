"""OpenMP's wait policy in the processes this package starts: the command line and its Ray workers.

Torch's CPU kernels run each operation on a team of OpenMP threads, and by default a thread that
finishes its share spins at the barrier before it sleeps. On a loaded machine (a shared server, CI,
Ray workers beside each other) the thread it waits for is often descheduled, and the spinning one
burns the time slice that thread needed: measured on 2 cores with 4 busy processes beside it,
scoring took 6.5 times as long as on the quiet machine with spinning and 3.2 times with passive
waiting, against a fair share of 3; on the quiet machine the two took the same time
(``benchmarks/speed/contention.py``, README "Performance"). libgomp reads the policy when it is loaded,
so it is set before torch is imported, and only where the user has not set it.
"""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

#: The variable OpenMP reads its wait policy from, and the value these processes default to.
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"


def wait_passively() -> None:
    """Default ``OMP_WAIT_POLICY`` to ``PASSIVE`` for this process and those it starts, unless it is set
    or torch is already imported (then it would not take effect here, only in child processes)."""
    if WAIT_POLICY_ENV in os.environ:
        return
    if "torch" in sys.modules:
        logger.debug("torch is already imported: %s=%s would not take effect.", WAIT_POLICY_ENV, PASSIVE)
        return
    os.environ[WAIT_POLICY_ENV] = PASSIVE
