"""Triton kernels behind the CUDA fast paths of adopter_kernels.

Importing a submodule imports ``triton``; the public ops import them lazily, only once a call has been
routed to the Triton backend (see ``adopter_kernels._dispatch``), so ``import adopter_kernels`` never
needs triton. Every kernel computes in float32 and stores in the input dtype.
"""
