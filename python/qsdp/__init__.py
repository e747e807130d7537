# SPDX-License-Identifier: Apache-2.0
"""qsdp: compressed collectives for sharded data-parallel training.

The C++ library is header-only (include/qsdp); this package is its PyTorch face, `qsdp.torch`.
qsdp.Error is the C++ library's qsdp::error (a RuntimeError), with the same messages.
"""
from ._ext import Error

__all__ = ["Error"]
__version__ = "0.1.0"
