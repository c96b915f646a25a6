"""Repairs applied to the float16 converter's output, on hand-made graphs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from embedkit.export.precision import _drop_repeated_casts, _unique_node_names  # noqa: E402


def converter_output_with_repeated_casts():
    """What onnxruntime 1.31's converter writes when two float32-kept nodes read one float16 tensor:
    two identical Casts, same node name, same output name."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3])
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("relu", "neg")]
    cast = {"inputs": ["x"], "outputs": ["x_cast_to_fp32"], "to": TensorProto.FLOAT, "name": "x_cast_node"}
    nodes = [
        helper.make_node("Cast", **cast),
        helper.make_node("Relu", ["x_cast_to_fp32"], ["relu"], name="relu_node"),
        helper.make_node("Cast", **cast),
        helper.make_node("Neg", ["x_cast_to_fp32"], ["neg"], name="neg_node"),
    ]
    info = helper.make_tensor_value_info("x_cast_to_fp32", TensorProto.FLOAT, [3])
    graph = helper.make_graph(nodes, "g", [x], outputs, value_info=[info, info])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def load(model):
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_repeated_casts_are_merged_into_one_that_runs():
    model = converter_output_with_repeated_casts()
    with pytest.raises(Exception, match="Duplicate definition|same node name"):
        load(model)  # the failure being repaired: ONNX Runtime refuses the converter's graph
    _drop_repeated_casts(model)
    _unique_node_names(model)
    assert [n.op_type for n in model.graph.node] == ["Cast", "Relu", "Neg"]
    assert [v.name for v in model.graph.value_info] == ["x_cast_to_fp32"]
    x = np.array([-1.5, 0.0, 2.25], dtype=np.float16)
    relu, neg = load(model).run(None, {"x": x})
    np.testing.assert_array_equal(relu, [0.0, 0.0, 2.25])
    np.testing.assert_array_equal(neg, [1.5, -0.0, -2.25])


def test_a_cast_that_differs_is_never_dropped():
    model = converter_output_with_repeated_casts()
    model.graph.node[2].attribute[0].i = TensorProto.DOUBLE  # same output name, other target type
    _drop_repeated_casts(model)
    assert [n.op_type for n in model.graph.node] == ["Cast", "Relu", "Cast", "Neg"]
