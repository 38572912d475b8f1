"""LENGTH = len(TEXT) in bytes, times WEIGHT if the request sent one.

Used by tests/integration/test_sdk_triton.py.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            length = np.array([[len(row[0])] for row in text], dtype=np.float32)
            weight = pb_utils.get_input_tensor_by_name(request, "WEIGHT")
            if weight is not None:
                length = length * weight.as_numpy()
            out = pb_utils.Tensor("LENGTH", length.astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
