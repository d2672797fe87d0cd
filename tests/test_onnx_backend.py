"""ONNX's conformance suite (``onnx.backend.test.BackendTest`` node tests) on luminal's devices.

Default run: every node test on the ``reference`` device, and a fixed sample (:data:`CPU_SAMPLE`) on the
``cpu`` device. ``LUMINAL_ONNX_FULL=1`` runs every node test on both devices.

Every test that is not run is listed here with its reason: :func:`exclusion` (dtype, value kind, domain,
operator version, unimplemented operator, computed from the test's model) and :data:`EXCLUDED` /
:data:`KNOWN_FAILURES` (by name). Excluded tests are unittest skips (reported as skipped, with the reason);
known failures are expected failures (reported as xfail, and an unexpected pass fails the run). Nothing
skipped counts as a pass.

The pass rate per operator group (``docs/onnx.md``) comes from ``python tests/test_onnx_backend.py --report``
(``--device reference|cpu|both``), which runs the same test functions without any exclusion by name and
counts each outcome.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time
import unittest

import pytest

onnx = pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402
import onnx.backend.test.loader as _loader  # noqa: E402
import onnx.backend.test.runner as _runner  # noqa: E402

from luminal.onnx import dtypes  # noqa: E402
from luminal.onnx.backend import LuminalBackend  # noqa: E402
from luminal.onnx.importer import check_operator  # noqa: E402

FULL = os.environ.get("LUMINAL_ONNX_FULL") == "1"

# ---------------------------------------------------------------------------------------------------- exclusions
# By name: tests whose operator is implemented but whose expected output cannot be reproduced.
EXCLUDED = {
    r"^test_training_dropout": "training-mode Dropout draws a random mask (onnx's RNG cannot be reproduced)",
    r"^test_(bernoulli|randomuniformlike|randomnormallike|random_)": "random number generation (onnx's RNG)",
}
# By name: variants of implemented operators that luminal cannot compute (counted as "op not implemented").
NOT_IMPLEMENTED_VARIANTS: dict[str, str] = {}  # (float BitCasts at run time were here: BitCast is a primitive now)
# Known failures (expected failures: an unexpected pass is reported).
KNOWN_FAILURES = {
    r"^test_dft_inverse(_opset19)?$": "the expected output holds float32 rounding noise (~2e-7) above the "
                                      "test's atol=1e-7 where the exact result is 0; luminal computes it exactly",
    r"^test_attention_4d_causal_fp16_expanded$": "float16 rounding: 2 of 192 values differ by one float16 ulp "
                                                 "(above rtol=1e-3) from the per-op rounding of the expanded graph",
}
# Only on the cpu device (known compiled-backend differences). Empty: test_affine_grid_2d*_expanded (a Gather
# fused into a padded consumer) and test_tril_zero were fixed in the cpu backend (f903e47 and later).
CPU_KNOWN_FAILURES: dict[str, str] = {}

# A fixed, documented sample for the cpu device in the default run: one or two tests per operator family.
CPU_SAMPLE = [
    "test_add_bcast", "test_div", "test_pow", "test_mod_mixed_sign_int32", "test_equal", "test_where_example",
    "test_clip", "test_relu", "test_tanh", "test_erf", "test_gelu_default_1", "test_bitwise_and_i32_2d",
    "test_reduce_mean_keepdims_example", "test_argmax_keepdims_example", "test_softmax_axis_1",
    "test_hardmax_axis_1", "test_cumsum_1d_exclusive", "test_top_k", "test_mean_example",
    "test_reshape_reordered_all_dims", "test_transpose_all_permutations_2", "test_concat_3d_axis_1",
    "test_slice", "test_split_equal_parts_1d_opset18", "test_unsqueeze_axis_0", "test_expand_dim_changed",
    "test_tile", "test_edge_pad", "test_range_int32_type_negative_delta", "test_onehot_with_axis",
    "test_gather_1", "test_gather_elements_1", "test_gathernd_example_int32", "test_scatter_elements_with_axis",
    "test_scatternd", "test_matmul_4d", "test_gemm_all_attributes", "test_einsum_batch_matmul",
    "test_conv_with_strides_padding", "test_convtranspose_pads", "test_maxpool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad", "test_globalaveragepool", "test_batchnorm_example",
    "test_instancenorm_example", "test_layer_normalization_4d_axis1", "test_group_normalization_example",
    "test_rms_normalization_2d_axis1", "test_resize_upsample_scales_linear", "test_gridsample",
    "test_attention_4d", "test_lstm_defaults", "test_quantizelinear", "test_sce_mean",
    # narrow integers and bfloat16 in their own dtypes
    "test_add_uint8", "test_div_int8", "test_bitshift_left_int8_overflow", "test_bitcast_int8_to_uint8", "test_bitcast_float32_to_int32",
    "test_quantizelinear_int16", "test_cast_FLOAT_to_BFLOAT16", "test_einsum_batch_matmul_bfloat16",
]

_ONNX_DOMAINS = ("", "ai.onnx")


def _types_of(model) -> set:
    """Every element type (or value kind) a model's interface, constants and casts use."""
    out = set()
    g = model.graph
    for vi in list(g.input) + list(g.output):
        kind = vi.type.WhichOneof("value")
        out.add(vi.type.tensor_type.elem_type if kind == "tensor_type" else kind)
    for init in g.initializer:
        out.add(init.data_type)
    for node in g.node:
        for a in node.attribute:
            if a.name in ("to", "output_dtype", "dtype", "output_datatype") and a.type == onnx.AttributeProto.INT:
                out.add(a.i)
            if a.type == onnx.AttributeProto.TENSOR:
                out.add(a.t.data_type)
    out.discard(0)
    return out


def exclusion(model) -> tuple[str, str] | None:
    """``(category, reason)`` when a node test is out of luminal.onnx's scope, from its model."""
    unsupported = sorted(t if isinstance(t, str) else dtypes.name(t) for t in _types_of(model)
                         if isinstance(t, str) or t not in dtypes.SUPPORTED)
    kinds = [t for t in unsupported if t.endswith("_type")]
    if kinds:
        return "dtype", f"{'/'.join(k.replace('_type', '') for k in kinds)} values are not supported (tensors only)"
    if unsupported:
        return "dtype", f"unsupported element type {', '.join(unsupported)}"
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for node in model.graph.node:
        if node.domain not in _ONNX_DOMAINS:
            return "domain", f"operator domain '{node.domain}' ({node.op_type}) is not supported"
    for node in model.graph.node:
        version, problem = check_operator(node.op_type, "", opsets.get("", 1))
        if problem and "predates" in problem:
            return "opset", f"{node.op_type}-{version} predates the opset-13 versions luminal.onnx implements"
    for node in model.graph.node:
        version, problem = check_operator(node.op_type, "", opsets.get("", 1))
        if problem:
            return "operator", f"operator {node.op_type} is not implemented"
        for a in node.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                for n in sub.node:
                    if check_operator(n.op_type, "", opsets.get("", 1))[1]:
                        return "operator", f"operator {n.op_type} (in a subgraph) is not implemented"
    return None


def _match(table: dict, name: str):
    return next((reason for pattern, reason in table.items() if re.search(pattern, name)), None)


# ---------------------------------------------------------------------------------------------------- suite
with __import__("warnings").catch_warnings():  # the case generators divide by zero on purpose
    __import__("warnings").simplefilter("ignore")
    _NODE_CASES = _loader.load_model_tests(kind="node")
_CASES = {case.name: case for case in _NODE_CASES}


def _cached_loader(data_dir=_loader.DATA_DIR, kind=None):
    """The node cases are generated once (about 8 s) and shared by both backends."""
    if kind == "node":
        return _NODE_CASES
    return []  # the model-zoo categories need downloads or predate opset 13


_runner.load_model_tests = _cached_loader


def _node_suite(device: str, names=None, by_name_exclusions: bool = True) -> type[unittest.TestCase]:
    """A TestCase class with ONNX's node tests for one luminal device (``names``: a subset)."""
    bt = onnx.backend.test.BackendTest(LuminalBackend.for_device(device), __name__)
    generated = bt.test_cases["OnnxBackendNodeModelTest"]
    suite = type(f"Onnx_{device}", (unittest.TestCase,), {})
    known = dict(KNOWN_FAILURES, **(CPU_KNOWN_FAILURES if device == "cpu" else {}))
    for attr in dir(generated):
        if not attr.startswith("test_") or not attr.endswith("_cpu"):
            continue
        name = attr[:-4]
        if name not in _CASES or (names is not None and name not in names):
            continue
        fn = getattr(generated, attr)
        excluded = exclusion(_CASES[name].model)
        reason = excluded[1] if excluded else (_match(EXCLUDED, name) if by_name_exclusions else None) or \
            _match(NOT_IMPLEMENTED_VARIANTS, name)
        if reason:
            fn = unittest.skip(reason)(fn)
        elif by_name_exclusions and _match(known, name):
            fn = unittest.expectedFailure(fn)
        setattr(suite, name, fn)
    return suite


TestOnnxNodeReference = _node_suite("reference")
TestOnnxNodeCpu = _node_suite("cpu", None if FULL else set(CPU_SAMPLE))


# ---------------------------------------------------------------------------------------------------- report
GROUPS = {
    "arithmetic & math": "Abs Acos Acosh Add Asin Asinh Atan Atanh Ceil Cos Cosh Div Erf Exp Floor IsInf IsNaN Log "
                         "Max Mean Min Mod Mul Neg Pow Reciprocal Round Sign Sin Sinh Sqrt Sub Sum Tan Clip",
    "activations": "Celu Elu Gelu HardSigmoid HardSwish LeakyRelu Mish PRelu Relu Selu Shrink Sigmoid Softplus "
                   "Softsign Swish Tanh ThresholdedRelu SwiGLU",
    "logic, comparison, bitwise": "And Or Xor Not Equal Greater GreaterOrEqual Less LessOrEqual Where BitShift "
                                  "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot BitCast",
    "reductions, scans, top-k": "ArgMax ArgMin ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean "
                                "ReduceMin ReduceProd ReduceSum ReduceSumSquare CumSum CumProd TopK Softmax "
                                "LogSoftmax Hardmax",
    "shape & layout": "Cast CastLike Concat Constant ConstantOfShape DepthToSpace Expand Flatten Identity Pad "
                      "Range Reshape Shape Size Slice SpaceToDepth Split Squeeze Tile Transpose Unsqueeze "
                      "CenterCropPad EyeLike Trilu",
    "indexing & scatter": "Gather GatherElements GatherND ScatterElements ScatterND Scatter OneHot Compress "
                          "NonZero Unique ReverseSequence TensorScatter",
    "linear algebra": "MatMul Gemm Einsum Det",
    "convolution & pooling": "Conv ConvTranspose AveragePool MaxPool LpPool GlobalAveragePool GlobalMaxPool "
                             "GlobalLpPool MaxUnpool Col2Im DeformConv RoiAlign CausalConvWithState",
    "normalization & dropout": "BatchNormalization InstanceNormalization LayerNormalization GroupNormalization "
                               "RMSNormalization LpNormalization MeanVarianceNormalization LRN Dropout",
    "attention": "Attention RotaryEmbedding LinearAttention",
    "resize & sampling": "Resize Upsample GridSample AffineGrid",
    "quantization": "QuantizeLinear DequantizeLinear DynamicQuantizeLinear MatMulInteger ConvInteger "
                    "QLinearMatMul QLinearConv",
    "recurrent": "RNN GRU LSTM",
    "control flow & sequences": "If Loop Scan SequenceConstruct SequenceInsert SequenceMap SplitToSequence "
                                "ConcatFromSequence Optional OptionalGetElement OptionalHasElement",
    "signal": "DFT STFT HannWindow HammingWindow BlackmanWindow MelWeightMatrix",
    "losses": "NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss",
    "random": "Bernoulli RandomUniformLike RandomNormalLike RandomUniform RandomNormal Multinomial",
    "strings, images, detection": "ImageDecoder NonMaxSuppression TfIdfVectorizer RegexFullMatch StringConcat "
                                  "StringNormalizer StringSplit",
    "other domains": "Adagrad Adam Momentum FlexAttention ArrayFeatureExtractor Binarizer LabelEncoder "
                     "TreeEnsemble",
}
_GROUP_OF = {op: g for g, ops in GROUPS.items() for op in ops.split()}


def main_operator(name: str) -> str:
    """The operator a node test is about (expanded variants: the operator of their unexpanded twin)."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    case = _CASES.get(base) or _CASES[name]
    ops = [n.op_type for n in case.model.graph.node]
    if len(set(ops)) == 1:
        return ops[0]
    for op in ops:
        if _GROUP_OF.get(op) not in (None, "shape & layout", "arithmetic & math"):
            return op
    return ops[-1]


def run_report(devices) -> str:
    """Run every node test (no exclusion by name) and tabulate outcomes per operator group and device."""
    lines = []
    for device in devices:
        suite = _node_suite(device, by_name_exclusions=False)
        rows = collections.defaultdict(collections.Counter)
        failures, all_frozen = [], []
        start = time.time()
        for name in sorted(_CASES):
            group = _GROUP_OF.get(main_operator(name), "other")
            excluded = exclusion(_CASES[name].model)
            if excluded and excluded[0] in ("dtype", "domain", "opset"):
                rows[group][excluded[0]] += 1
                continue
            if _match(EXCLUDED, name):
                rows[group]["random"] += 1
                continue
            if excluded or _match(NOT_IMPLEMENTED_VARIANTS, name):
                rows[group]["operator"] += 1
                continue
            try:
                LuminalBackend.last_prepared = None
                getattr(suite, name)(suite(name))
                rows[group]["pass"] += 1
                rep = LuminalBackend.last_prepared
                if rep is not None and rep.frozen and set(rep.frozen) >= set(rep._input_names()):
                    all_frozen.append(name)
            except Exception as err:  # noqa: BLE001 - every failure is counted and listed
                rows[group]["fail"] += 1
                first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
                failures.append(f"{name}: {type(err).__name__}: {first[:160]}")
        elapsed = time.time() - start
        lines.append(f"\n### device `{device}` ({elapsed:.0f} s)\n")
        lines.append("| operator group | tests | excl. dtype | excl. domain | excl. old version | excl. random | "
                     "in scope | passed | op not implemented | failed | pass rate (in scope) | "
                     "pass rate (supported dtypes) |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        total = collections.Counter()
        for group in list(GROUPS) + ["other"]:
            c = rows.get(group)
            if not c:
                continue
            total.update(c)
            lines.append(_row(group, c))
        lines.append(_row("**all**", total))
        lines.append(f"\nPassed with every input frozen to a constant (computed at import time, no run-time "
                     f"input left): {len(all_frozen)}: {', '.join(all_frozen)}")
        lines.append("\nFailures:\n" + "\n".join(f"- {f}" for f in failures) if failures else "\nNo failures.")
    return "\n".join(lines)


def _row(label, c) -> str:
    scope = c["pass"] + c["fail"] + c["operator"]
    supported = scope + c["opset"] + c["domain"] + c["random"]
    tests = supported + c["dtype"]
    rate = f"{100 * c['pass'] / scope:.1f} %" if scope else "-"
    rate2 = f"{100 * c['pass'] / supported:.1f} %" if supported else "-"
    return (f"| {label} | {tests} | {c['dtype']} | {c['domain']} | {c['opset']} | {c['random']} | {scope} | "
            f"{c['pass']} | {c['operator']} | {c['fail']} | {rate} | {rate2} |")


if __name__ == "__main__":
    import argparse
    import warnings

    warnings.filterwarnings("ignore")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", action="store_true", help="run every node test and print the tables")
    parser.add_argument("--device", default="both", choices=["reference", "cpu", "both"])
    args = parser.parse_args()
    if not args.report:
        sys.exit(pytest.main([__file__, "-q"]))
    print(run_report(["reference", "cpu"] if args.device == "both" else [args.device]))
