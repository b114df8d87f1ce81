"""Pure-PyTorch references of every hopperkit op: the semantics oracle.

They run on CPU and on any GPU, compute in float32 from the stored (quantized) operands, and are what
the public API falls back to wherever no kernel exists. Public names mirror the public API.
"""
