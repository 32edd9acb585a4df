"""Triton kernels, one family per module: the ``@triton.jit`` kernels, their launchers and, where
the op is differentiable, the ``torch.autograd.Function``. Their pure-torch twins live in
:mod:`nbxsig.reference`. User-facing modules reach both only through :mod:`nbxsig._dispatch`.

Importing this package imports nothing; each family module imports Triton itself.
"""
