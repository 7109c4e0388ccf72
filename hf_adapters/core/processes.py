"""This process's place among the processes of one job: accelerate's state, the same for every caller.

``accelerate launch`` (and torchrun, which it runs) starts one process per device and tells each its
rank. accelerate's state is made once per process, by whoever asks first, so every part of the package
asks here. Without an accelerator the processes meet on the CPU (gloo): accelerate's default state
would take each of them for a job of its own, and two processes would each score every row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelerate import PartialState


def process_state() -> PartialState:
    """accelerate's state of this process (one process, rank 0 of 1, outside ``accelerate launch``).

    Example:
        >>> process_state().num_processes
        1
    """
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.accelerator.is_available())
