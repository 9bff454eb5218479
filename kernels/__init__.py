"""Kernels: torch reference ops and Triton kernels for sparse decode and (de)quantization. Imports only torch/triton."""
