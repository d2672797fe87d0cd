"""Operator handlers, one module per family; importing this package registers them all."""

from . import (attention, control, elementwise, indexing, misc, nn, norm, quant, reduce, resize,  # noqa: F401
               rnn, sampling, shape, signal)

import onnx as _onnx  # noqa: E402

from ..registry import REGISTRY  # noqa: E402

# Operator versions older than the ones current at opset 13 whose semantics the handlers cover (the later
# versions only added element types, or the handler reads both the attribute and the input form). Other
# operators need their opset-13 version or later (e.g. Softmax-11 flattened to 2-D; Clip-6 and Pad-2 took
# attributes; Resize-11 had other coordinate modes).
OLDER_VERSIONS = {
    1: "Identity Softsign Softplus Transpose Not Size GlobalMaxPool GlobalAveragePool LRN LpNormalization "
       "SpaceToDepth",
    6: "Abs Neg Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Floor Ceil Elu Selu LeakyRelu HardSigmoid "
       "InstanceNormalization Tile",
    7: "Add Sub Mul Div Pow Equal Less Greater Sin Cos Tan Asin Acos Atan And Or Xor RNN GRU LSTM",
    8: "Sum Max Min Mean Expand",
    9: "Erf Sign IsNaN Where MatMul Sinh Cosh Asinh Acosh Atanh Shrink PRelu ConstantOfShape NonZero EyeLike "
       "MeanVarianceNormalization BatchNormalization Cast",
    10: "Mod QuantizeLinear DequantizeLinear MatMulInteger ConvInteger QLinearMatMul QLinearConv ThresholdedRelu "
        "ReverseSequence IsInf Slice",
    11: "Gemm Concat Gather Flatten Conv ConvTranspose AveragePool MaxPool Range Clip Pad Squeeze Unsqueeze Split "
        "ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp "
        "ReduceSumSquare ArgMax ArgMin TopK CumSum GatherElements GatherND ScatterND ScatterElements OneHot Round "
        "Det BitShift DynamicQuantizeLinear Loop If DepthToSpace Compress Unique MaxUnpool Shape GlobalLpPool "
        "LpPool Einsum",
    12: "Celu LessOrEqual GreaterOrEqual",
}
for _version, _ops in OLDER_VERSIONS.items():
    for _op in _ops.split():
        _spec = REGISTRY[("", _op)]
        _current = _spec.min_version or _onnx.defs.get_schema(_op, 13).since_version
        _spec.min_version = min(_version, _current)
