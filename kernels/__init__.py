"""Kernels: torch reference ops and Triton kernels for sparse decode and (de)quantization. Imports only torch/triton
and its own ``formats`` (the table of block formats, pure Python): the lowest layer, below kvstore and app."""
