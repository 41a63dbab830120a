"""onnx's own BackendTest runner drives Transmuter through onnx.backend.base.Backend."""

import numpy as np
import onnx
import onnx.backend.test
from onnx import TensorProto, helper

from transmuter.integrations.onnx_backend import TransmuterBackend


def test_prepare_and_run_model():
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    a, b = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    (c,) = TransmuterBackend.run_model(model, [a, b])
    np.testing.assert_array_equal(c, a + b)
    (c,) = TransmuterBackend.prepare(model, "MLX", compiled=True).run([a, b])
    np.testing.assert_array_equal(c, a + b)


def test_run_node():
    node = helper.make_node("Relu", ["x"], ["y"])
    (y,) = TransmuterBackend.run_node(node, [np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 2.0])


def test_onnx_backend_test_runner_drives_it():
    """A slice of onnx's BackendTest (the unittest runner onnx ships), through our Backend."""
    runner = onnx.backend.test.BackendTest(TransmuterBackend, __name__)
    runner.include(r"^test_(relu|softmax_axis_0|gather_0|matmul_2d)_cpu$")
    import unittest

    suite = unittest.TestSuite()
    for case in runner.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    result = unittest.TextTestRunner(verbosity=0).run(suite)
    assert result.testsRun >= 4 and result.wasSuccessful(), result.failures + result.errors
