"""Controllers that adapt the KV cache while a meeting runs: a PID on device memory, a bandit over sparsity."""

from kvstore.control.bandit import SparsityBandit
from kvstore.control.controller import ControllerConfig, KVController, cap_binds
from kvstore.control.pid import PID

__all__ = ["PID", "ControllerConfig", "KVController", "SparsityBandit", "cap_binds"]
