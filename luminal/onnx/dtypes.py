"""ONNX element types and how luminal holds them.

Every supported ONNX type has a luminal dtype of the same width and signedness, so values keep their type end
to end (initializers, inputs, intermediates, outputs) and integer arithmetic wraps around as ONNX specifies:

=========================================  =========================================  ==============================
ONNX type                                  luminal dtype                              note
=========================================  =========================================  ==============================
FLOAT, DOUBLE, FLOAT16, BFLOAT16           float32, float64, float16, bfloat16        half types: operators compute
                                                                                      in float32, round once
INT8, INT16, INT32, INT64                  int8, int16, int32, int64
UINT8, UINT16, UINT32, UINT64              uint8, uint16, uint32, uint64
BOOL                                       bool
=========================================  =========================================  ==============================

bfloat16 host arrays are ``ml_dtypes.bfloat16`` (what ``onnx.numpy_helper`` returns). Everything else (strings,
complex, float8/float4/int4/int2) is refused with an error naming the value.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..dtype import BFLOAT16_NUMPY, DType

T = TensorProto

LUMINAL_OF = {
    T.FLOAT: DType.float32, T.DOUBLE: DType.float64, T.FLOAT16: DType.float16, T.BFLOAT16: DType.bfloat16,
    T.INT32: DType.int32, T.INT64: DType.int64, T.BOOL: DType.bool,
    T.INT8: DType.int8, T.UINT8: DType.uint8, T.INT16: DType.int16, T.UINT16: DType.uint16,
    T.UINT32: DType.uint32, T.UINT64: DType.uint64,
}
NUMPY_OF = {
    T.FLOAT: np.dtype(np.float32), T.DOUBLE: np.dtype(np.float64), T.FLOAT16: np.dtype(np.float16),
    T.INT32: np.dtype(np.int32), T.INT64: np.dtype(np.int64), T.BOOL: np.dtype(np.bool_),
    T.INT8: np.dtype(np.int8), T.UINT8: np.dtype(np.uint8), T.INT16: np.dtype(np.int16),
    T.UINT16: np.dtype(np.uint16), T.UINT32: np.dtype(np.uint32), T.UINT64: np.dtype(np.uint64),
    T.BFLOAT16: BFLOAT16_NUMPY,
}
ONNX_OF_NUMPY = {v: k for k, v in NUMPY_OF.items()}
ONNX_OF_LUMINAL = {v: k for k, v in LUMINAL_OF.items()}
FLOATS = {T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16}
HALF = {T.FLOAT16, T.BFLOAT16}  # computed in float32 by the operators, rounded once
INTS = {T.INT8, T.UINT8, T.INT16, T.UINT16, T.INT32, T.INT64, T.UINT32, T.UINT64}
SUPPORTED = set(LUMINAL_OF)


def name(onnx_type: int) -> str:
    """``"FLOAT"``, ``"UINT8"``... for an ONNX element type number."""
    try:
        return T.DataType.Name(onnx_type)
    except ValueError:
        return f"type {onnx_type}"


def supported_names() -> str:
    return ", ".join(sorted(name(t) for t in SUPPORTED))


def luminal(onnx_type: int) -> DType:
    """The luminal dtype that holds an ONNX element type (``KeyError`` for unsupported types)."""
    return LUMINAL_OF[onnx_type]


def numpy(onnx_type: int) -> np.dtype:
    return NUMPY_OF[onnx_type]


def of_numpy(dtype) -> int:
    """The ONNX element type of a numpy dtype (``KeyError`` when it has none we support)."""
    return ONNX_OF_NUMPY[np.dtype(dtype)]


def of_luminal(dtype: DType) -> int:
    return ONNX_OF_LUMINAL[dtype]


def int_range(onnx_type: int) -> tuple[int, int]:
    """The value range of an integer type (saturation bounds for QuantizeLinear, wrap-around for Cast)."""
    info = np.iinfo(NUMPY_OF[onnx_type])
    return int(info.min), int(info.max)
