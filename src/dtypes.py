"""ONNX element types <-> NumPy dtypes (with ml_dtypes for bfloat16, float8 and int4)."""

import ml_dtypes
import numpy as np
from onnx import TensorProto

_ONNX_TO_NP = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.STRING: np.dtype(object),
    TensorProto.COMPLEX64: np.dtype(np.complex64),
    TensorProto.COMPLEX128: np.dtype(np.complex128),
    TensorProto.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    TensorProto.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    TensorProto.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    TensorProto.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    TensorProto.INT4: np.dtype(ml_dtypes.int4),
    TensorProto.UINT4: np.dtype(ml_dtypes.uint4),
}
for _name, _np_name in [("FLOAT4E2M1", "float4_e2m1fn"), ("INT2", "int2"), ("UINT2", "uint2"),
                        ("FLOAT8E8M0", "float8_e8m0fnu")]:
    if hasattr(TensorProto, _name) and hasattr(ml_dtypes, _np_name):
        _ONNX_TO_NP[getattr(TensorProto, _name)] = np.dtype(getattr(ml_dtypes, _np_name))

_NP_TO_ONNX = {v: k for k, v in _ONNX_TO_NP.items()}


def to_numpy(onnx_type: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type (TensorProto enum)."""
    try:
        return _ONNX_TO_NP[onnx_type]
    except KeyError:
        raise NotImplementedError(
            f"ONNX element type {TensorProto.DataType.Name(onnx_type)} has no NumPy equivalent"
        ) from None


def to_onnx(dtype) -> int:
    return _NP_TO_ONNX[np.dtype(dtype)]


def name(dtype) -> str:
    """Short readable name of a dtype: float32, int64, bfloat16, ..."""
    dt = np.dtype(dtype)
    return "string" if dt.kind == "O" else dt.name


def is_float(dtype) -> bool:
    dt = np.dtype(dtype)
    return np.issubdtype(dt, np.floating) or dt in (
        np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn),
        np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2),
        np.dtype(ml_dtypes.float8_e5m2fnuz))


def is_half(dtype) -> bool:
    return np.dtype(dtype) in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
