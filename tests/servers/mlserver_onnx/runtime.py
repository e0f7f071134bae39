"""A minimal MLServer runtime over ONNX Runtime (CPU, one thread), for the tests' KServe v2 server.

Loaded by MLServer from a model-settings.json that `tests/servers/mlserver_server.py` writes:
`"implementation": "mlserver_onnx.runtime.OnnxRuntimeModel"`, `"parameters": {"uri": "/abs/model.onnx"}`.
Inputs and outputs (names, KServe datatypes, shapes with -1 for a dynamic dimension) are read from the ONNX file, so the
server's model metadata matches the file. Runs only inside .venv-mlserver; imports nothing from the project.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.codecs.numpy import to_datatype
from mlserver.errors import MLServerError
from mlserver.types import InferenceRequest, InferenceResponse, MetadataTensor
from mlserver.utils import get_model_uri
from onnx_model import ORT_DTYPES


def _metadata(args: list) -> list[MetadataTensor]:
    tensors = []
    for arg in args:
        if arg.type not in ORT_DTYPES:
            raise MLServerError(f"unsupported tensor type {arg.type!r} for {arg.name!r}; known: {sorted(ORT_DTYPES)}")
        shape = [d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape]
        tensors.append(MetadataTensor(name=arg.name, datatype=to_datatype(np.dtype(ORT_DTYPES[arg.type])), shape=shape))
    return tensors


class OnnxRuntimeModel(MLModel):
    """One ONNX model, one ONNX Runtime session; predict() runs it on the request's tensors."""

    async def load(self) -> bool:
        path = await get_model_uri(self.settings)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(path, sess_options=opts, providers=["CPUExecutionProvider"])
        self._dtypes = {i.name: ORT_DTYPES.get(i.type) for i in self._session.get_inputs()}
        # MLServer's metadata endpoint answers from the settings: fill them from the file.
        self.settings.inputs = _metadata(self._session.get_inputs())
        self.settings.outputs = _metadata(self._session.get_outputs())
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {}
        for request_input in payload.inputs:
            if request_input.name not in self._dtypes:
                raise MLServerError(f"unknown input {request_input.name!r}; the model has {sorted(self._dtypes)}")
            array = NumpyCodec.decode_input(request_input)
            feeds[request_input.name] = np.ascontiguousarray(array, dtype=self._dtypes[request_input.name])
        missing = sorted(set(self._dtypes) - set(feeds))
        if missing:
            raise MLServerError(f"missing inputs {missing}")
        names = [o.name for o in self._session.get_outputs()]
        results = self._session.run(names, feeds)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            id=payload.id,
            outputs=[NumpyCodec.encode_output(name, value) for name, value in zip(names, results, strict=True)],
        )
