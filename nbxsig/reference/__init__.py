"""Pure-torch twins of the Triton kernels: the CPU path for users (float64-capable) and the test
oracle. Nothing here imports Triton."""
