"""Offline sm_90 (H100/H200) compilation for the ``test_*_compile.py`` files, shared by all of them.

The interpreter (how the rest of the suite runs kernels) accepts code that the compiler refuses, so
those files also compile the real kernels ahead of time: AST → TTIR → TTGIR → LLVM IR → PTX → cubin,
with Triton's bundled ptxas. Each file writes a script that calls :data:`PRELUDE`'s ``compile_sm90``
and prints ``compiled`` at the end; :func:`run_sm90_script` runs it in a child process because this
suite's ``TRITON_INTERPRET=1`` swaps Triton's JIT for the interpreter.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Prepended to every script: the imports and the one place that calls triton.compile.
PRELUDE = r'''
import sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

def cuobjdump(compiled, *flags):
    """Triton's bundled cuobjdump with ``flags`` (``-sass``, ``-res-usage``) on a compiled kernel's cubin."""
    import os, subprocess, tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        return subprocess.run([tool, *flags, f.name], capture_output=True, text=True, check=True).stdout

def compile_sm90(kernel, pointers, constexprs, floats=(), attrs=None, **options):
    """Compile ``kernel`` for sm_90: arguments named in ``constexprs`` are constexpr, the others take
    their type from ``pointers``, else fp32 when named in ``floats``, else i32. Exits with status 77
    (the parent skips) where Triton's ptxas is unavailable."""
    signature = {}
    for name in kernel.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = pointers.get(name, "fp32" if name in floats else "i32")
    source = ASTSource(kernel, signature, constexprs=constexprs, attrs=attrs)
    try:
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    except RuntimeError as err:
        if "ptxas" in str(err).lower():
            sys.exit(77)  # no ptxas here: nothing to check
        raise
'''


def run_sm90_script(script: str, *, timeout: float = 600) -> None:
    """Run :data:`PRELUDE` + ``script`` without the interpreter; skip where ptxas is missing, else fail
    unless the script exits cleanly and prints ``compiled``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + script], env=env, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode == 77:
        pytest.skip("Triton's ptxas is unavailable on this machine")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "compiled" in done.stdout
