"""Which of PyTorch's attention kernels the transformers backend lets ``scaled_dot_product_attention`` use.

On CUDA, PyTorch may pick cuDNN's attention for half-precision inputs. cuDNN plans a kernel for
each new shape of its inputs, and the backend's shapes keep changing: in greedy decoding the keys
grow by one at every step, and length-sorted batches each have their own width. Measured on an
H200 (issue 51), that planning took 74% of the host's time in decoding (3.3 ms a call), and
decoding ran about 5x faster without it. So the backend runs its forward passes on the other
kernels (FlashAttention, memory-efficient, math). Float32 never runs on cuDNN's kernel, so float32
results do not change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

#: The kernels left to ``scaled_dot_product_attention`` on CUDA (those of them enabled): all but cuDNN's.
CUDA_ATTENTION_KERNELS = {
    SDPBackend.FLASH_ATTENTION: torch.backends.cuda.flash_sdp_enabled,
    SDPBackend.EFFICIENT_ATTENTION: torch.backends.cuda.mem_efficient_sdp_enabled,
    SDPBackend.MATH: torch.backends.cuda.math_sdp_enabled,
}


@contextlib.contextmanager
def without_cudnn_attention(device: torch.device) -> Iterator[None]:
    """On a CUDA ``device``, keep ``scaled_dot_product_attention`` off cuDNN's kernel inside the block
    (``torch.nn.attention.sdpa_kernel`` with the other kernels the caller has enabled; where cuDNN's
    is the only one enabled, it stays); elsewhere change nothing.

    Example:
        >>> with without_cudnn_attention(torch.device("cuda")):
        ...     torch.backends.cuda.cudnn_sdp_enabled()
        False
    """
    kernels = [kernel for kernel, enabled in CUDA_ATTENTION_KERNELS.items() if enabled()]
    if device.type != "cuda" or not kernels:
        yield
        return
    with sdpa_kernel(kernels):
        yield
