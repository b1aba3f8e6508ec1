"""Stub ``vllm.triton_utils`` (``tl``, ``triton``).

vLLM's ``vllm/triton_utils`` re-exports Triton.  Where Triton and a GPU are
present this stub does the same, so the release's ``@triton.jit`` kernels run
as they are.  Elsewhere (CPU) ``triton.jit`` keeps the kernel's Python
function, and a launch runs the harness's torch rendering of that kernel
(:mod:`mla_spec_stub.kernels`, checked against Triton's own interpreter by a
test); a kernel without a rendering is refused, by name.
"""

from mla_spec_stub import kernels

if kernels.use_real_triton():
    import triton  # noqa: F401
    import triton.language as tl  # noqa: F401
else:
    import inspect

    class _Jitted:
        def __init__(self, fn):
            self.fn = fn
            self.__name__ = fn.__name__
            self.params = tuple(inspect.signature(fn).parameters)

        def __getitem__(self, grid):
            return lambda *args, **kwargs: kernels.launch(self.fn.__name__, grid, args, kwargs, self.params)

    class _Triton:
        @staticmethod
        def jit(fn=None, **options):
            return (lambda f: _Jitted(f)) if fn is None else _Jitted(fn)

        @staticmethod
        def cdiv(a, b):
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n):
            return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()

        def __getattr__(self, name):
            raise AttributeError(f"the release reaches triton.{name}, which the harness does not stub")

    class _TL:
        """``tl`` outside a kernel body: only ``tl.constexpr`` annotations are read."""

        constexpr = "constexpr"

        def __getattr__(self, name):
            raise AttributeError(
                f"the release reaches tl.{name} outside a kernel, which the harness does not stub"
            )

    triton = _Triton()
    tl = _TL()
