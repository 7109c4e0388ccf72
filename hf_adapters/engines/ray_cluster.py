"""Reach a Ray cluster for scoring: import Ray (an optional extra), connect or start one, fail fast
and clearly where Ray would wait for minutes (an unreachable address) or forever (workers the
cluster cannot place).

Ray is imported inside these functions only: ``import hf_adapters`` and ``hf-adapters --help``
never import it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: How to get Ray, as the error for a missing Ray says it.
INSTALL_HINT = "pip install 'hf_adapters[ray]'"
#: Seconds our own TCP check waits for a cluster address to answer.
CONNECT_TIMEOUT_S = 3.0
#: Ray's defaults wait 820 s for an unreachable cluster; these, set before Ray is imported, bound
#: the wait once our TCP check has passed (a port that accepts but is not a Ray cluster).
CONNECT_ENVIRONMENT = {
    "RAY_gcs_server_port_wait_time_s": "5",
    "RAY_py_gcs_connect_timeout_s": "10",
    "RAY_gcs_rpc_server_connect_timeout_s": "5",
}

#: The line Ray's C++ log prints on stderr as a process connects whenever ``RAY_BACKEND_LOG_LEVEL`` is set (at any
#: level; the Ray engine sets it to keep the core worker's log to fatal errors): it tells the user nothing.
LOG_LEVEL_ANNOUNCEMENT = b"Set ray log level from environment variable RAY_BACKEND_LOG_LEVEL"


class RayClusterError(ValueError):
    """Ray is missing, the cluster cannot be reached, or it cannot place the workers asked for."""


def import_ray() -> Any:
    """``ray`` (with ``ray.data``), or a RayClusterError saying how to install it."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report sent home
    try:
        import ray
        import ray.data  # noqa: F401 (the engine needs Ray Data, not only Ray core)
    except ImportError as error:
        raise RayClusterError(f"The Ray engine needs Ray Data ({error}); install it with {INSTALL_HINT}.") from None
    return ray


def cluster_address(address: str | None) -> str | None:
    """The address to connect to: ``address``, else ``RAY_ADDRESS``, else None (Ray's choice: the
    cluster ``ray start`` runs on this machine, or a new local one)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def check_reachable(address: str | None, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, in at most ``timeout`` seconds, a ``HOST:PORT`` nobody answers at; ``ray://`` (Ray
    Client) addresses are refused too. ``auto``, ``local`` and None are Ray's to resolve.

    Example:
        >>> check_reachable("127.0.0.1:1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        hf_adapters.engines.ray_cluster.RayClusterError: Cannot reach the Ray cluster at 127.0.0.1:1 ...
    """
    if address in (None, "auto", "local"):
        return
    if address.startswith("ray://"):
        raise RayClusterError(f"{address}: Ray Client addresses (ray://) are not supported; run the command on a "
                              "node of the cluster with --ray-address auto (or the head's HOST:6379).")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise RayClusterError(f"Cannot read the Ray address {address!r}: give HOST:PORT (the head node's GCS "
                              "address, e.g. 10.0.0.1:6379), auto or local.")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as error:
        reason = f"no answer in {timeout:g} s" if isinstance(error, TimeoutError) else \
            (error.strerror or str(error)).lower()
        raise RayClusterError(f"Cannot reach the Ray cluster at {address} ({reason}). Is it "
                              "running (`ray start --head` on its head node) and is the port open?") from None


def connect(address: str | None = None, **init_options: Any) -> bool:
    """Connect this process to a Ray cluster, unless it is already connected: to ``address`` (or
    ``RAY_ADDRESS``; ``HOST:PORT``, ``auto`` or ``local``), else the one running on this machine,
    else a new local one. ``init_options`` go to ``ray.init`` (with Ray's logs kept to errors).
    Returns whether this call connected (and so should disconnect). A RayClusterError says why not.

    Example:
        >>> from hf_adapters.engines.ray_cluster import connect
        >>> connect("auto")  # doctest: +SKIP
        True
    """
    address = cluster_address(address)
    check_reachable(address)
    if address not in (None, "auto", "local") and "ray" not in sys.modules:
        for name, value in CONNECT_ENVIRONMENT.items():
            os.environ.setdefault(name, value)
    ray = import_ray()
    if ray.is_initialized():
        return False
    # No dashboard. The raylet of a local cluster still starts its dashboard and runtime-env agents (no ray.init
    # option leaves them out; workers need the second): after a killed driver they spend up to a minute trying to
    # report the raylet's death to the stopped GCS (ray._private.process_watcher), then exit.
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR, **init_options}
    try:
        with _sigterm_handler_kept(), _log_level_announcement_dropped():
            ray.init(address=address, **options)
    except ConnectionError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        hint = (" Start one with `ray start --head`, or leave out --ray-address to start a local one."
                if address == "auto" else "")
        raise RayClusterError(f"Cannot connect to a Ray cluster ({address}): {first_line}{hint}") from None
    return True


@contextmanager
def _sigterm_handler_kept() -> Iterator[None]:
    """SIGTERM's handler as it was before the body (``ray.init``, which puts in its own, ending the
    process with status 15 and no word), where this process had set one of its own: the command
    line's, which stops a job as a Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(handler):
            signal.signal(signal.SIGTERM, handler)


@contextmanager
def _log_level_announcement_dropped() -> Iterator[None]:
    """What the body (``ray.init``) writes to this process's stderr (file descriptor 2: Ray's C++ log writes there),
    held back and then written, less the :data:`LOG_LEVEL_ANNOUNCEMENT` line. Ray's own processes log to their
    files, so only this one's lines are held."""
    try:
        stderr = os.dup(2) if "RAY_BACKEND_LOG_LEVEL" in os.environ else None
    except OSError:  # no stderr to keep clean
        stderr = None
    if stderr is None:
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(stderr, 2)
            os.close(stderr)
            held.seek(0)
            kept = b"".join(line for line in held if LOG_LEVEL_ANNOUNCEMENT not in line)
            while kept:
                kept = kept[os.write(2, kept):]


def check_resources(num_workers: int, gpus_per_worker: float, cpus_per_worker: float = 1.0) -> None:
    """Refuse workers the connected cluster cannot place (Ray would wait for them forever): more
    CPUs or GPUs in all than it has, or more GPUs per worker than any one node has."""
    ray = import_ray()
    total = ray.cluster_resources()
    cpus, gpus = total.get("CPU", 0), total.get("GPU", 0)
    if num_workers * cpus_per_worker > cpus:
        raise RayClusterError(f"{num_workers} workers need {num_workers * cpus_per_worker:g} CPUs; the Ray cluster "
                              f"has {cpus:g}. Use fewer workers.")
    if gpus_per_worker <= 0:
        return
    per_node = max((node["Resources"].get("GPU", 0) for node in ray.nodes() if node.get("Alive")), default=0)
    if gpus_per_worker > per_node:
        raise RayClusterError(f"--gpus-per-worker {gpus_per_worker:g} is more than any node of the Ray cluster has "
                              f"({per_node:g} GPUs at most); Ray would wait for it forever.")
    if num_workers * gpus_per_worker > gpus:
        raise RayClusterError(f"{num_workers} workers with {gpus_per_worker:g} GPUs each need "
                              f"{num_workers * gpus_per_worker:g} GPUs; the Ray cluster has {gpus:g}.")


@contextmanager
def ray_session(address: str | None = None, **init_options: Any) -> Iterator[Any]:
    """``ray`` while connected (see :func:`connect`); disconnects on leaving if it connected, so a
    local cluster it started stops with it.

    Example:
        >>> from hf_adapters.engines.ray_cluster import ray_session
        >>> with ray_session("local", num_cpus=2) as ray:  # doctest: +SKIP
        ...     ray.cluster_resources()["CPU"]
        2.0
    """
    connected = connect(address, **init_options)
    ray = import_ray()
    try:
        yield ray
    finally:
        if connected:
            ray.shutdown()
