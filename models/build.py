"""Build the reference models: FP32 ONNX, INT8 QDQ ONNX, INT8 OpenVINO IR, FP32 and INT8 TFLite, and the manifest.

Runs in its own pinned environment (`make models` creates `.venv-build` from `models/requirements-build.txt`), never in
the test install: TensorFlow is ~1.5 GB and only needed here. Everything is seeded; rerunning reproduces the committed
artifacts (`make models && git status models/` shows what, if anything, changed).

Each network is written once in a tiny spec (`Net`) that builds the Keras model to train and convert to TFLite, and is
exported to ONNX from the same spec by `to_onnx` (batch-norm folded, NHWC input kept so every artifact takes the same
input). The ONNX export is checked against Keras numerically before anything is written.

The four MLPerf Tiny shapes are not trained: they carry seeded random weights and exist for latency work only; the
manifest says so. `digits_cnn` is trained on scikit-learn's bundled digits (no download) and its held-out split is kept
next to it for accuracy tests.

Beside them, the per-op placement models (models/partial_tflite.py: ADD -> CUMSUM -> MUL, which XNNPACK takes only in
part; models/partial_onnx.py: Add -> FastGelu -> Mul, which OpenVINO's onnxruntime provider takes only in part) are
written without TensorFlow; `--placement-only` writes them and their manifest entries alone.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # oneDNN reorders float sums; keep training bit-reproducible

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SEED = 0
DIGITS_CALIBRATION = 200  # samples of the training split used to calibrate INT8


# --------------------------------------------------------------------------------------------------------------- spec
@dataclass
class Op:
    kind: str
    inputs: list[str]
    output: str
    attrs: dict = field(default_factory=dict)
    layers: dict = field(default_factory=dict)  # keras layers holding the weights


class Net:
    """A network written once, built as Keras and exported as ONNX from the same description."""

    def __init__(self, name: str, input_shape: tuple[int, ...]):
        import keras

        self.keras = keras
        self.name = name
        self.input_shape = input_shape
        self.ops: list[Op] = []
        self.tensors: dict[str, object] = {}
        self.shapes: dict[str, tuple[int, ...]] = {"input": input_shape}
        self.inp = keras.Input(shape=input_shape, name="input")
        self.tensors["input"] = self.inp
        self._n = 0

    def _name(self, kind: str) -> str:
        self._n += 1
        return f"{kind}{self._n}"

    def _act(self, op: Op, x, act: str | None):
        if act == "relu":
            x = self.keras.layers.ReLU(name=op.output + "_relu")(x)
        elif act is not None:
            raise ValueError(act)
        op.attrs["act"] = act
        return x

    def conv(self, x: str, filters: int, k, stride: int = 1, padding: str = "same", bn: bool = True, act="relu") -> str:
        L = self.keras.layers
        k = (k, k) if isinstance(k, int) else tuple(k)
        out = self._name("conv")
        op = Op("conv", [x], out, {"k": k, "stride": stride, "padding": padding, "bn": bn})
        conv = L.Conv2D(filters, k, strides=stride, padding=padding, use_bias=not bn, name=out)
        y = conv(self.tensors[x])
        op.layers["conv"] = conv
        if bn:
            op.layers["bn"] = L.BatchNormalization(name=out + "_bn")
            y = op.layers["bn"](y)
        self.tensors[out] = self._act(op, y, act)
        self.shapes[out] = tuple(int(d) for d in y.shape[1:])
        self.ops.append(op)
        return out

    def dwconv(self, x: str, k: int = 3, stride: int = 1, bn: bool = True, act="relu") -> str:
        L = self.keras.layers
        out = self._name("dwconv")
        op = Op("dwconv", [x], out, {"k": (k, k), "stride": stride, "padding": "same", "bn": bn})
        conv = L.DepthwiseConv2D(k, strides=stride, padding="same", use_bias=not bn, name=out)
        y = conv(self.tensors[x])
        op.layers["conv"] = conv
        if bn:
            op.layers["bn"] = L.BatchNormalization(name=out + "_bn")
            y = op.layers["bn"](y)
        self.tensors[out] = self._act(op, y, act)
        self.shapes[out] = tuple(int(d) for d in y.shape[1:])
        self.ops.append(op)
        return out

    def dense(self, x: str, units: int, bn: bool = False, act=None) -> str:
        L = self.keras.layers
        out = self._name("dense")
        op = Op("dense", [x], out, {"bn": bn})
        dense = L.Dense(units, use_bias=not bn, name=out)
        y = dense(self.tensors[x])
        op.layers["dense"] = dense
        if bn:
            op.layers["bn"] = L.BatchNormalization(name=out + "_bn")
            y = op.layers["bn"](y)
        self.tensors[out] = self._act(op, y, act)
        self.shapes[out] = (units,)
        self.ops.append(op)
        return out

    def add(self, a: str, b: str, act="relu") -> str:
        out = self._name("add")
        op = Op("add", [a, b], out)
        y = self.keras.layers.Add(name=out)([self.tensors[a], self.tensors[b]])
        self.tensors[out] = self._act(op, y, act)
        self.shapes[out] = self.shapes[a]
        self.ops.append(op)
        return out

    def maxpool(self, x: str, size: int = 2) -> str:
        out = self._name("maxpool")
        y = self.keras.layers.MaxPooling2D(size, name=out)(self.tensors[x])
        self.ops.append(Op("maxpool", [x], out, {"size": size}))
        self.tensors[out] = y
        self.shapes[out] = tuple(int(d) for d in y.shape[1:])
        return out

    def global_avgpool(self, x: str) -> str:
        out = self._name("gap")
        y = self.keras.layers.GlobalAveragePooling2D(name=out)(self.tensors[x])
        self.ops.append(Op("gap", [x], out))
        self.tensors[out] = y
        self.shapes[out] = (int(y.shape[-1]),)
        return out

    def flatten(self, x: str) -> str:
        out = self._name("flatten")
        y = self.keras.layers.Flatten(name=out)(self.tensors[x])
        self.ops.append(Op("flatten", [x], out))
        self.tensors[out] = y
        self.shapes[out] = (int(np.prod(self.shapes[x])),)
        return out

    def softmax(self, x: str) -> str:
        out = self._name("softmax")
        y = self.keras.layers.Softmax(name=out)(self.tensors[x])
        self.ops.append(Op("softmax", [x], out))
        self.tensors[out] = y
        self.shapes[out] = self.shapes[x]
        return out

    def model(self, output: str, output_name: str):
        self.output = output
        self.output_name = output_name
        return self.keras.Model(self.inp, self.tensors[output], name=self.name)


# ------------------------------------------------------------------------------------------------------ architectures
def digits_cnn() -> Net:
    n = Net("digits_cnn", (8, 8, 1))
    x = n.conv("input", 16, 3, bn=False)
    x = n.maxpool(x)
    x = n.conv(x, 32, 3, bn=False)
    x = n.flatten(x)
    x = n.dense(x, 64, act="relu")
    x = n.dense(x, 10)
    n.model(x, "logits")
    return n


def resnet8() -> Net:
    """MLPerf Tiny image classification reference (CIFAR-10 ResNet-8, 32x32x3)."""
    n = Net("resnet8", (32, 32, 3))
    x = n.conv("input", 16, 3)
    y = n.conv(x, 16, 3)
    y = n.conv(y, 16, 3, act=None)
    x = n.add(x, y)
    for filters in (32, 64):
        y = n.conv(x, filters, 3, stride=2)
        y = n.conv(y, filters, 3, act=None)
        s = n.conv(x, filters, 1, stride=2, bn=False, act=None)
        x = n.add(s, y)
    x = n.global_avgpool(x)
    x = n.dense(x, 10)
    n.model(n.softmax(x), "probabilities")
    return n


def dscnn_kws() -> Net:
    """MLPerf Tiny keyword spotting reference (DS-CNN small, 49x10 MFCC, 12 classes)."""
    n = Net("dscnn_kws", (49, 10, 1))
    x = n.conv("input", 64, (10, 4), stride=2)
    for _ in range(4):
        x = n.dwconv(x, 3)
        x = n.conv(x, 64, 1)
    x = n.global_avgpool(x)
    x = n.dense(x, 12)
    n.model(n.softmax(x), "probabilities")
    return n


def mobilenet_v1_025_vww() -> Net:
    """MLPerf Tiny visual wake words reference (MobileNetV1 alpha 0.25, 96x96x3, 2 classes)."""
    n = Net("mobilenet_v1_025_vww", (96, 96, 3))
    x = n.conv("input", 8, 3, stride=2)
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2)] + [(128, 1)] * 5 + [(256, 2), (256, 1)]
    for filters, stride in blocks:
        x = n.dwconv(x, 3, stride=stride)
        x = n.conv(x, filters, 1)
    x = n.global_avgpool(x)
    x = n.dense(x, 2)
    n.model(n.softmax(x), "probabilities")
    return n


def fc_autoencoder_ad() -> Net:
    """MLPerf Tiny anomaly detection reference (fully connected autoencoder, 640 inputs)."""
    n = Net("fc_autoencoder_ad", (640,))
    x = "input"
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = n.dense(x, units, bn=True, act="relu")
    x = n.dense(x, 640)
    n.model(x, "reconstruction")
    return n


MLPERF_TINY = {
    "resnet8": resnet8,
    "dscnn_kws": dscnn_kws,
    "mobilenet_v1_025_vww": mobilenet_v1_025_vww,
    "fc_autoencoder_ad": fc_autoencoder_ad,
}


# ------------------------------------------------------------------------------------------------------- ONNX export
def _tf_same_pads(size: int, k: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'same' padding: the odd pixel goes after (bottom/right)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def _fold_bn(kernel_out_last: np.ndarray, bias: np.ndarray | None, bn) -> tuple[np.ndarray, np.ndarray]:
    gamma, beta, mean, var = (np.asarray(w, dtype=np.float64) for w in bn.get_weights())
    scale = gamma / np.sqrt(var + bn.epsilon)
    b = np.zeros_like(mean) if bias is None else bias.astype(np.float64)
    return kernel_out_last * scale, (b - mean) * scale + beta


def _folded(op: Op) -> tuple[np.ndarray, np.ndarray]:
    """An op's kernel and bias with its batch norm folded in, float64 arithmetic in numpy (the same on any CPU)."""
    layer = op.layers["dense" if op.kind == "dense" else "conv"]
    w = layer.get_weights()
    kernel = np.asarray(w[0], dtype=np.float64)
    bias = np.asarray(w[1], dtype=np.float64) if len(w) > 1 else None
    if op.kind == "dwconv":
        kernel = kernel[..., 0]  # (kh, kw, c): depth multiplier 1
    if op.attrs["bn"]:
        kernel, bias = _fold_bn(kernel, bias, op.layers["bn"])
    if bias is None:
        bias = np.zeros(kernel.shape[-1])
    if op.kind == "dwconv":
        kernel = kernel[..., None]
    return kernel.astype(np.float32), bias.astype(np.float32)


def to_onnx(net: Net, opset: int = 17):
    """Export a trained Net to an ONNX graph with NHWC input (as the TFLite model) and folded batch norms."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    image = len(net.input_shape) == 3
    onnx_name = {"input": "input"}
    layout = {"input": "nhwc" if image else "flat"}
    if image:
        nodes.append(helper.make_node("Transpose", ["input"], ["input_nchw"], perm=[0, 3, 1, 2], name="to_nchw"))
        onnx_name["input"] = "input_nchw"
        layout["input"] = "nchw"

    for op in net.ops:
        src = [onnx_name[i] for i in op.inputs]
        out = op.output
        if op.kind in ("conv", "dwconv"):
            kernel, bias = _folded(op)
            if op.kind == "conv":
                wt = kernel.transpose(3, 2, 0, 1)  # (kh, kw, in, out) -> (out, in, kh, kw)
                group = 1
            else:
                wt = kernel[..., 0].transpose(2, 0, 1)[:, None]  # (kh, kw, c, 1) -> (c, 1, kh, kw)
                group = wt.shape[0]
            h, w_ = net.shapes[op.inputs[0]][:2]
            kh, kw = op.attrs["k"]
            s = op.attrs["stride"]
            if op.attrs["padding"] == "same":
                (pt, pb), (pl, pr) = _tf_same_pads(h, kh, s), _tf_same_pads(w_, kw, s)
            else:
                pt = pb = pl = pr = 0
            name = out + "_conv" if op.attrs["act"] else out
            nodes.append(
                helper.make_node(
                    "Conv",
                    [src[0], const(out + "_w", wt.astype(np.float32)), const(out + "_b", bias.astype(np.float32))],
                    [name],
                    kernel_shape=[kh, kw],
                    strides=[s, s],
                    pads=[pt, pl, pb, pr],
                    group=group,
                    name=out,
                )
            )
            layout[out] = "nchw"
        elif op.kind == "dense":
            kernel, bias = _folded(op)
            name = out + "_gemm" if op.attrs["act"] else out
            nodes.append(
                helper.make_node(
                    "Gemm",
                    [src[0], const(out + "_w", kernel.astype(np.float32)), const(out + "_b", bias.astype(np.float32))],
                    [name],
                    name=out,
                )
            )
            layout[out] = "flat"
        elif op.kind == "add":
            name = out + "_sum" if op.attrs["act"] else out
            nodes.append(helper.make_node("Add", src, [name], name=out))
            layout[out] = layout[op.inputs[0]]
        elif op.kind == "maxpool":
            k = op.attrs["size"]
            nodes.append(helper.make_node("MaxPool", src, [out], kernel_shape=[k, k], strides=[k, k], name=out))
            layout[out] = "nchw"
        elif op.kind == "gap":
            nodes.append(helper.make_node("GlobalAveragePool", src, [out + "_pool"], name=out + "_pool"))
            nodes.append(helper.make_node("Flatten", [out + "_pool"], [out], axis=1, name=out))
            layout[out] = "flat"
        elif op.kind == "flatten":
            # Keras flattens NHWC: go back to NHWC first so the dense weights keep their order.
            nodes.append(helper.make_node("Transpose", src, [out + "_nhwc"], perm=[0, 2, 3, 1], name=out + "_nhwc"))
            nodes.append(helper.make_node("Flatten", [out + "_nhwc"], [out], axis=1, name=out))
            layout[out] = "flat"
        elif op.kind == "softmax":
            nodes.append(helper.make_node("Softmax", src, [out], axis=-1, name=out))
            layout[out] = "flat"
        else:  # pragma: no cover - the spec has no other ops
            raise ValueError(op.kind)
        if op.attrs.get("act") == "relu":
            pre = nodes[-1].output[0]
            nodes.append(helper.make_node("Relu", [pre], [out], name=out + "_relu"))
        onnx_name[out] = out

    # Rename the final tensor to the public output name.
    final = onnx_name[net.output]
    nodes.append(helper.make_node("Identity", [final], [net.output_name], name="output"))
    graph = helper.make_graph(
        nodes,
        net.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, *net.input_shape])],
        [helper.make_tensor_value_info(net.output_name, TensorProto.FLOAT, [1, *net.shapes[net.output]])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="edge_runtime models/build.py",
        producer_version="1",
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _strip_identity(path: Path) -> None:
    """Drop the trailing Identity: quantizers and converters handle a graph whose output is produced directly better."""
    import onnx

    m = onnx.load(str(path))
    g = m.graph
    ident = [n for n in g.node if n.op_type == "Identity" and n.output[0] == g.output[0].name]
    for n in ident:
        src = n.input[0]
        for other in g.node:
            for i, o in enumerate(other.output):
                if o == src:
                    other.output[i] = n.output[0]
        g.node.remove(n)
    onnx.save(m, str(path))


# ------------------------------------------------------------------------------------------------------------- data
def digits_data():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[..., None]  # (N, 8, 8, 1) in [0, 1]
    y = d.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)


def random_data(shape: tuple[int, ...], n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if len(shape) == 1:
        return rng.standard_normal((n, *shape)).astype(np.float32)
    return rng.random((n, *shape), dtype=np.float32)


# ------------------------------------------------------------------------------------------------------- conversion
def folded_keras(net: Net, batch: int | None = None):
    """The same network as Keras layers without batch norms, carrying the folded weights (what TFLite is built from)."""
    import keras

    L = keras.layers
    inp = keras.Input(batch_shape=(batch, *net.input_shape), name="input")
    t = {"input": inp}
    for op in net.ops:
        x = [t[i] for i in op.inputs]
        if op.kind in ("conv", "dwconv", "dense"):
            kernel, bias = _folded(op)
            if op.kind == "conv":
                layer = L.Conv2D(kernel.shape[-1], op.attrs["k"], strides=op.attrs["stride"],
                                 padding=op.attrs["padding"], name=op.output)  # fmt: skip
            elif op.kind == "dwconv":
                layer = L.DepthwiseConv2D(op.attrs["k"], strides=op.attrs["stride"], padding="same", name=op.output)
            else:
                layer = L.Dense(kernel.shape[-1], name=op.output)
            y = layer(x[0])
            layer.set_weights([kernel, bias])
        elif op.kind == "add":
            y = L.Add(name=op.output)(x)
        elif op.kind == "maxpool":
            y = L.MaxPooling2D(op.attrs["size"], name=op.output)(x[0])
        elif op.kind == "gap":
            y = L.GlobalAveragePooling2D(name=op.output)(x[0])
        elif op.kind == "flatten":
            y = L.Flatten(name=op.output)(x[0])
        elif op.kind == "softmax":
            y = L.Softmax(name=op.output)(x[0])
        else:  # pragma: no cover - the spec has no other ops
            raise ValueError(op.kind)
        if op.attrs.get("act") == "relu":
            y = L.ReLU(name=op.output + "_relu")(y)
        t[op.output] = y
    return keras.Model(inp, t[net.output], name=net.name)


def write_tflite(net: Net, model, calib: np.ndarray, fp32_path: Path, int8_path: Path) -> None:
    import tensorflow as tf

    # Batch 1, static: edge models run one sample at a time, and a static shape keeps every delegate usable. Batch
    # norms folded here in numpy (float64, as for ONNX), not by the converter: TensorFlow's folding rounds differently
    # on different x86 CPUs, and the files would then depend on the CPU that built them.
    fixed = folded_keras(net, batch=1)
    if model is not None:
        probe = calib[:8]
        ref = model.predict(probe, verbose=0)
        got = np.concatenate([fixed.predict(probe[i : i + 1], verbose=0) for i in range(len(probe))])
        err = float(np.max(np.abs(ref - got)))
        if err > 1e-4 * max(1.0, float(np.max(np.abs(ref)))):
            raise SystemExit(f"{net.name}: the folded Keras model differs from the original by {err}")

    conv = tf.lite.TFLiteConverter.from_keras_model(fixed)
    fp32_path.write_bytes(conv.convert())

    def representative():
        for i in range(len(calib)):
            yield [calib[i : i + 1]]

    conv = tf.lite.TFLiteConverter.from_keras_model(fixed)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = representative
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    int8_path.write_bytes(conv.convert())


ORT_QUANT = {
    "format": "QDQ",
    "activation_type": "QUInt8",
    "weight_type": "QInt8",
    "per_channel": True,
    "reduce_range": False,
    "calibrate_method": "MinMax",
}


def write_onnx_int8(fp32_path: Path, calib: np.ndarray, int8_path: Path, activations: str = "u8") -> None:
    sys.path.insert(0, str(ROOT))
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edge_runtime.quantize.data import calibration_reader  # the reader `edge-runtime quantize` uses

    with tempfile.TemporaryDirectory() as tmp:
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(fp32_path), str(pre), skip_symbolic_shape=True)
        quantize_static(
            str(pre),
            str(int8_path),
            calibration_reader([{"input": calib[i : i + 1]} for i in range(len(calib))]),
            quant_format=QuantFormat.QDQ,
            # U8S8 by default: faster than FP32 on the x86 CPUs tried, where S8S8 was not (models/speedup.toml)
            activation_type=QuantType.QUInt8 if activations == "u8" else QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=ORT_QUANT["per_channel"],
            reduce_range=ORT_QUANT["reduce_range"],
            calibrate_method=CalibrationMethod.MinMax,
        )


def write_openvino_ir(int8_onnx: Path, xml_path: Path) -> None:
    import openvino as ov

    model = ov.convert_model(str(int8_onnx))
    ov.save_model(model, str(xml_path), compress_to_fp16=False)


# The models given a dynamic-batch variant (issue 26, `edge-runtime serve` batches requests): every op of their graphs
# keeps the batch axis apart, so a symbolic first dimension is all they need. BATCH_SAFE_OPS is checked, not assumed: a
# Reshape with a constant shape, for one, would pin the batch again.
DYNAMIC_BATCH = ("digits_cnn", "resnet8", "fc_autoencoder_ad")
BATCH_SAFE_OPS = {"Add", "Conv", "DequantizeLinear", "Flatten", "Gemm", "GlobalAveragePool", "MaxPool",
                  "QuantizeLinear", "Relu", "Softmax", "Transpose"}  # fmt: skip


def dynamic_paths(d: Path, name: str) -> dict[str, Path]:
    return {"int8_dynamic_onnx": d / f"{name}_int8_dynamic.onnx", "int8_dynamic_ir": d / f"{name}_int8_dynamic.xml"}


def write_dynamic_batch(int8_onnx: Path, onnx_dst: Path, xml_dst: Path) -> None:
    """The INT8 ONNX with the first dimension of every input and output the symbolic `batch` (its inferred inner
    shapes dropped, so runtimes infer them again), and its OpenVINO IR, where that dimension stays dynamic (-1)."""
    import onnx
    import openvino as ov

    m = onnx.load(str(int8_onnx))
    unsafe = sorted({n.op_type for n in m.graph.node} - BATCH_SAFE_OPS)
    if unsafe:
        raise SystemExit(f"{int8_onnx.name}: ops {unsafe} may fix the batch; not in BATCH_SAFE_OPS")
    for v in (*m.graph.input, *m.graph.output):
        dim = v.type.tensor_type.shape.dim[0]
        dim.ClearField("dim_value")
        dim.dim_param = "batch"
    del m.graph.value_info[:]
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(onnx_dst))
    write_openvino_ir(onnx_dst, xml_dst)
    ir = ov.Core().read_model(str(xml_dst))
    fixed = [p.get_any_name() for p in (*ir.inputs, *ir.outputs) if not p.get_partial_shape()[0].is_dynamic]
    if fixed:
        raise SystemExit(f"{xml_dst.name}: the first dimension of {fixed} is not dynamic after conversion")


# ---------------------------------------------------------------------------------------------------------- manifest
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        return repr(round(v, 6))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(type(v))


def versions() -> dict[str, str]:
    from importlib.metadata import version

    pkgs = ["tensorflow-cpu", "keras", "onnx", "onnxruntime", "openvino", "scikit-learn", "numpy", "ai-edge-litert"]
    out = {"python": platform.python_version()}
    for p in pkgs:
        out[p] = version(p)
    return out


def tensor_specs(path: Path, fmt: str) -> tuple[list[dict], list[dict]]:
    """Input/output specs as the runtime sees them (name, shape, dtype, quantization)."""
    sys.path.insert(0, str(ROOT))
    import edge_runtime

    backend = {"onnx": "onnxruntime", "openvino": "openvino", "tflite": "tflite"}[fmt]
    with edge_runtime.load(path, backend=backend, sandbox=False) as s:

        def spec(t):
            d = {"name": t.name, "shape": [-1 if x is None else int(x) for x in t.shape], "dtype": str(t.dtype)}
            if t.quantization is not None:
                d["scale"] = float(t.quantization.scale)
                d["zero_point"] = int(t.quantization.zero_point)
            return d

        return [spec(t) for t in s.inputs], [spec(t) for t in s.outputs]


def digits_accuracy(paths: dict[str, Path], x: np.ndarray, y: np.ndarray) -> dict[str, dict]:
    """Top-1 on the held-out split per backend, and INT8 agreement with FP32 on the same backend."""
    sys.path.insert(0, str(ROOT))
    from edge_runtime.runtime.accuracy import classify

    runs = {
        "onnxruntime": ("fp32_onnx", "int8_onnx", "onnxruntime"),
        "openvino": ("fp32_onnx", "int8_ir", "openvino"),
        "tflite": ("fp32_tflite", "int8_tflite", "tflite"),
    }
    out = {}
    for name, (fp32_key, int8_key, backend) in runs.items():
        p32 = classify(paths[fp32_key], x, backend=backend)
        p8 = classify(paths[int8_key], x, backend=backend)
        out[name] = {
            "fp32_top1": float(np.mean(p32 == y)),
            "int8_top1": float(np.mean(p8 == y)),
            "int8_fp32_agreement": float(np.mean(p8 == p32)),
        }
    return out


# -------------------------------------------------------------------------------------------------------------- main
def build_one(name: str, outdir: Path, log, retrain: bool = False) -> dict:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    d = outdir / name
    d.mkdir(parents=True, exist_ok=True)
    trained = name == "digits_cnn"
    if trained:
        net = digits_cnn()
        model = keras.Model(net.inp, net.tensors[net.output])
        x_tr, x_te, y_tr, y_te = digits_data()
        weights = HERE / name / f"{name}_weights.npz"
        if retrain or not weights.is_file():
            # Training is seeded and deterministic on one CPU, but its float sums round differently on another x86
            # CPU, and 40 epochs carry that into the last bits of every weight: the trained weights are therefore
            # kept in the repository, and every artifact is built from them (byte-reproducible on any x86 CPU).
            model.compile(
                optimizer=keras.optimizers.Adam(3e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
            model.fit(x_tr, y_tr, epochs=40, batch_size=32, verbose=0, shuffle=True)
            weights = d / f"{name}_weights.npz"
            np.savez_compressed(weights, **{w.path: np.asarray(w.numpy()) for w in model.weights})
            how = "trained"
        else:
            with np.load(weights) as z:
                for w in model.weights:
                    w.assign(z[w.path])
            how = f"weights from {weights.relative_to(ROOT)}"
        keras_acc = float(np.mean(np.argmax(model.predict(x_te, verbose=0), axis=1) == y_te))
        log(f"  {name}: {how}, Keras test top-1 {keras_acc:.4f}")
        calib = x_tr[:DIGITS_CALIBRATION]
        np.savez_compressed(d / "digits_test.npz", x=x_te, y=y_te)
        np.savez_compressed(d / "digits_calibration.npz", x=calib)
    else:
        net = MLPERF_TINY[name]()
        model = keras.Model(net.inp, net.tensors[net.output])
        # Untrained: move batch-norm statistics off their defaults so folding is exercised, seeded.
        rng = np.random.default_rng(SEED)
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                g, b, m, v = layer.get_weights()
                layer.set_weights(
                    [
                        rng.uniform(0.5, 1.5, g.shape).astype(np.float32),
                        rng.normal(0, 0.1, b.shape).astype(np.float32),
                        rng.normal(0, 0.1, m.shape).astype(np.float32),
                        rng.uniform(0.5, 1.5, v.shape).astype(np.float32),
                    ]
                )
        calib = random_data(net.input_shape, 100, SEED + 1)
        x_te = random_data(net.input_shape, 16, SEED + 2)
        y_te = None

    paths = {
        "fp32_onnx": d / f"{name}_fp32.onnx",
        "int8_onnx": d / f"{name}_int8.onnx",
        "int8_ir": d / f"{name}_int8.xml",
        "fp32_tflite": d / f"{name}_fp32.tflite",
        "int8_tflite": d / f"{name}_int8.tflite",
    }
    import onnx

    onnx_model = to_onnx(net)
    onnx.save(onnx_model, str(paths["fp32_onnx"]))
    # The ONNX export must compute what Keras computes before anything is built on it.
    import onnxruntime as ort

    sess = ort.InferenceSession(str(paths["fp32_onnx"]), providers=["CPUExecutionProvider"])
    probe = x_te[:8]
    ref = model.predict(probe, verbose=0)
    got = np.concatenate([sess.run(None, {"input": probe[i : i + 1]})[0] for i in range(len(probe))])
    err = float(np.max(np.abs(ref - got)))
    if err > 1e-4 * max(1.0, float(np.max(np.abs(ref)))):
        raise SystemExit(f"{name}: ONNX export differs from Keras by {err}")
    log(f"  {name}: ONNX export matches Keras (max abs diff {err:.2e})")
    write_onnx_int8(paths["fp32_onnx"], calib, paths["int8_onnx"])
    write_openvino_ir(paths["int8_onnx"], paths["int8_ir"])
    write_tflite(net, model, calib, paths["fp32_tflite"], paths["int8_tflite"])
    if name in DYNAMIC_BATCH:
        dyn = dynamic_paths(d, name)
        write_dynamic_batch(paths["int8_onnx"], dyn["int8_dynamic_onnx"], dyn["int8_dynamic_ir"])
        paths.update(dyn)
    log(f"  {name}: wrote {', '.join(p.name for p in paths.values())}")

    accuracy = digits_accuracy(paths, x_te, y_te) if trained else None
    return {
        "name": name,
        "trained": trained,
        "paths": paths,
        "calibration": len(calib),
        "accuracy": accuracy,
        "net": net,
    }


MANIFEST_COMMENT = [
    "# Reference models, written by `models/build.py` (`make models`). Do not edit by hand: rebuild.",
    "# Each [[artifact]] is one file the runtime loads; tests check every sha256 and the digits accuracy below.",
    "# A dimension of -1 in a shape is dynamic (the first one, the batch, of the *_dynamic files).",
]


def provenance(key: str, name: str) -> tuple[str, str, str]:
    """(format, precision, how it was made) of model `name`'s artifact `key` (a key of build_one's paths)."""
    derived = f"derived from {name}/{name}_int8.onnx by models/build.py:write_dynamic_batch"
    derived += " (first dimension made dynamic)"
    kinds = {
        "fp32_onnx": ("onnx", "fp32", "exported from the Keras model by models/build.py:to_onnx (batch norm folded)"),
        "int8_onnx": (
            "onnx",
            "int8",
            "onnxruntime.quantization.quantize_static " + toml_value(ORT_QUANT).replace('"', "'"),
        ),
        "int8_ir": ("openvino", "int8", "openvino.convert_model of the INT8 QDQ ONNX, saved without FP16 compression"),
        "fp32_tflite": ("tflite", "fp32", "tf.lite.TFLiteConverter from the Keras model"),
        "int8_tflite": (
            "tflite",
            "int8",
            "tf.lite.TFLiteConverter full-integer (TFLITE_BUILTINS_INT8, int8 input and output)",
        ),
        "int8_dynamic_onnx": ("onnx", "int8", derived),
        "placement_tflite": ("tflite", "fp32", placement_model().PROVENANCE),
        "placement_onnx": ("onnx", "fp32", placement_model("partial_onnx").PROVENANCE),
        "int8_dynamic_ir": (
            "openvino",
            "int8",
            derived + f"; openvino.convert_model of {name}_int8_dynamic.onnx, saved without FP16 compression",
        ),
    }
    return kinds[key]


def artifact_lines(model: str, key: str, path: Path, outdir: Path, calibration: int) -> list[str]:
    """One [[artifact]] entry of the manifest, a blank line after it."""
    fmt, precision, how = provenance(key, model)
    inputs, outputs = tensor_specs(path, fmt)
    lines = ["[[artifact]]", f"model = {toml_value(model)}"]
    lines.append(f"file = {toml_value(path.relative_to(outdir).as_posix())}")
    lines.append(f"sha256 = {toml_value(sha256(path))}")
    if fmt == "openvino":
        bin_path = path.with_suffix(".bin")
        lines.append(f"weights_file = {toml_value(bin_path.relative_to(outdir).as_posix())}")
        lines.append(f"weights_sha256 = {toml_value(sha256(bin_path))}")
    lines.append(f"format = {toml_value(fmt)}")
    lines.append(f"precision = {toml_value(precision)}")
    if precision == "int8":  # the INT8 flavour: ONNX and its IR are U8S8; full-integer TFLite is S8S8
        acts = "s8" if fmt == "tflite" else "u8"
        lines.append(f'activations = "{acts}"')
        lines.append('weights = "s8"')
    lines.append(f"calibration_samples = {calibration if precision == 'int8' else 0}")
    lines.append(f"provenance = {toml_value(how)}")
    lines.append(f"inputs = {toml_value(inputs)}")
    lines.append(f"outputs = {toml_value(outputs)}")
    lines.append("")
    return lines


def write_manifest(results: list[dict], outdir: Path) -> None:
    vers = versions()
    lines = [
        *MANIFEST_COMMENT,
        "",
        "schema = 1",
        f"seed = {SEED}",
        f"build_versions = {toml_value(vers)}",
        # The machine kind only: a kernel or host name would make every rebuild differ from the committed manifest.
        f"build_machine = {toml_value(platform.machine())}",
        "",
    ]
    for r in results:
        name = r["name"]
        lines.append("[[model]]")
        lines.append(f"name = {toml_value(name)}")
        lines.append(f"trained = {toml_value(r['trained'])}")
        if r["trained"]:
            lines.append(
                'description = "Small CNN trained on the handwritten digits bundled with scikit-learn '
                '(load_digits, 8x8, 10 classes); held-out split in digits_test.npz."'
            )
            lines.append(f'test_split = "{name}/digits_test.npz"')
            lines.append(f'calibration_data = "{name}/digits_calibration.npz"')
        else:
            doc = MLPERF_TINY[name].__doc__.strip()
            lines.append(
                f"description = {toml_value(doc + ' Seeded random weights, not trained: for latency work only.')}"
            )
        lines.append(f"calibration_samples = {r['calibration']}")
        lines.append("")
        if r["accuracy"]:
            for backend, acc in r["accuracy"].items():
                lines.append(f"[model.accuracy.{backend}]")
                for k, v in acc.items():
                    lines.append(f"{k} = {toml_value(round(v, 6))}")
                lines.append("")
        for key, path in r["paths"].items():
            lines += artifact_lines(name, key, path, outdir, r["calibration"])
    lines += placement_lines(outdir)
    (outdir / "manifest.toml").write_text("\n".join(lines))


# ------------------------------------------------------------------------------------------------ placement models
# models/partial_*.py -> (its manifest key, the comment above its entry): the per-op placement models (issue 29).
PLACEMENT = {
    "partial_tflite": (
        "placement_tflite",
        "# Not a reference network (no [[model]] entry): the per-op placement model, XNNPACK takes no CUMSUM.",
    ),
    "partial_onnx": (
        "placement_onnx",
        "# Not a reference network (no [[model]] entry): the per-op placement model, OpenVINO's onnxruntime provider "
        "takes no FastGelu.",
    ),
}


def placement_model(module: str = "partial_tflite"):
    """models/partial_tflite.py or models/partial_onnx.py: a per-op placement model (issue 29), built without
    TensorFlow."""
    sys.path.insert(0, str(HERE))
    import importlib

    return importlib.import_module(module)


def placement_lines(outdir: Path) -> list[str]:
    """Their [[artifact]] entries, after every reference model's: artifacts with no [[model]] entry (no network)."""
    lines = []
    for module, (key, head) in PLACEMENT.items():
        pm = placement_model(module)
        lines += [head, *artifact_lines(pm.MODEL, key, outdir / pm.FILE, outdir, 0)]
    return lines


def write_placement_models(outdir: Path, log) -> None:
    """Write every placement model under `outdir`."""
    for module in PLACEMENT:
        pm = placement_model(module)
        log(f"  {pm.MODEL}: wrote {pm.write(outdir).name}")


def write_placement_only(outdir: Path, log) -> None:
    """`--placement-only`: write the placement models and put their entries in outdir/manifest.toml in place of the
    old ones (at the end, where write_manifest puts them), leaving every other entry as it is; no TensorFlow
    needed."""
    write_placement_models(outdir, log)
    files = {toml_value(placement_model(m).FILE) for m in PLACEMENT}
    manifest = outdir / "manifest.toml"
    chunks = manifest.read_text().rstrip("\n").split("\n\n")  # entries are separated by one blank line
    chunks = [c for c in chunks if not any(f"file = {f}" in c.split("\n") for f in files)]
    chunks.append("\n".join(placement_lines(outdir)).rstrip("\n"))
    manifest.write_text("\n\n".join(chunks) + "\n")


def refresh_dynamic_entries(outdir: Path, names: list[str]) -> None:
    """Rewrite just the *_dynamic entries of `names` in outdir/manifest.toml, where write_manifest would put them (after
    the model's other artifacts), leaving every other entry as it is: `--dynamic-only` runs without TensorFlow, so
    it cannot rebuild the rest. The result is the text write_manifest writes for the same files."""
    import tomllib

    path = outdir / "manifest.toml"
    chunks = path.read_text().rstrip("\n").split("\n\n")  # entries are separated by one blank line
    head = [line for line in chunks[0].split("\n") if not line.startswith("#")]
    chunks[0] = "\n".join(MANIFEST_COMMENT + head)
    doc = tomllib.loads("\n\n".join(chunks))
    calibration = {m["name"]: m["calibration_samples"] for m in doc["model"]}
    new = {name: dynamic_paths(outdir / name, name) for name in names}
    files = {p.relative_to(outdir).as_posix() for paths in new.values() for p in paths.values()}

    def entry(chunk: str) -> dict:
        return tomllib.loads(chunk)["artifact"][0] if chunk.startswith("[[artifact]]") else {}

    chunks = [c for c in chunks if entry(c).get("file") not in files]
    for name, paths in new.items():
        last = max(i for i, c in enumerate(chunks) if entry(c).get("model") == name)
        lines = [line for key, p in paths.items() for line in artifact_lines(name, key, p, outdir, calibration[name])]
        chunks.insert(last + 1, "\n".join(lines).rstrip("\n"))
    path.write_text("\n\n".join(chunks) + "\n")


def write_dynamic_only(names: list[str], outdir: Path, log) -> None:
    """`--dynamic-only`: the dynamic-batch variants from the committed INT8 ONNX files (onnx and openvino only, no
    TensorFlow), and their manifest entries."""
    names = [n for n in names if n in DYNAMIC_BATCH]
    for name in names:
        d = outdir / name
        dyn = dynamic_paths(d, name)
        write_dynamic_batch(d / f"{name}_int8.onnx", dyn["int8_dynamic_onnx"], dyn["int8_dynamic_ir"])
        log(f"  {name}: wrote {', '.join(p.name for p in dyn.values())}")
    refresh_dynamic_entries(outdir, names)


# ---------------------------------------------------------------------------------------------------------- speed-up
SPEEDUP_ROUNDS = 5


def measure_speedups(names: list[str], outdir: Path, log, iterations: int = 500) -> None:
    """The committed INT8 files against FP32 where they are built (`make models-speedup`): ONNX Runtime U8S8 (the
    committed flavour) and S8S8 (quantized here, not kept) against the FP32 ONNX, and OpenVINO's INT8 IR against the
    same FP32 ONNX read by OpenVINO; the median of interleaved rounds, one thread, with the measurement engine of
    `edge-runtime quantize`. Timings are not artifacts: they go to speedup.toml, which `make models` leaves alone."""
    sys.path.insert(0, str(ROOT))
    from edge_runtime.quantize.evaluate import latency_us
    from edge_runtime.system.root import SystemRoot

    root = SystemRoot()
    flags = sorted(root.cpu_flags() & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8",
                                       "asimddp", "i8mm"})  # fmt: skip
    lines = [
        "# INT8 speed-up over FP32 of the committed reference models, measured where they were built",
        "# (`make models-speedup`: median latency of interleaved rounds, one thread, inputs bound once).",
        "# Timings, not artifacts: they differ from run to run and CPU to CPU; `make models` does not touch this file.",
        "",
        f"cpu = {toml_value(root.cpu_model() or platform.machine())}",
        f"cpu_flags = {toml_value(flags)}",
        f"rounds = {SPEEDUP_ROUNDS}",
        f"iterations = {iterations}",
        "",
    ]
    for name in names:
        d = outdir / name
        if name == "digits_cnn":
            with np.load(d / "digits_calibration.npz") as z:
                calib = z["x"]
        else:
            calib = random_data(MLPERF_TINY[name]().input_shape, 100, SEED + 1)
        sample = {"input": calib[:1]}
        with tempfile.TemporaryDirectory() as tmp:
            s8 = Path(tmp) / "s8s8.onnx"
            write_onnx_int8(d / f"{name}_fp32.onnx", calib, s8, activations="s8")
            runs = {
                "onnxruntime_fp32": (d / f"{name}_fp32.onnx", "onnxruntime"),
                "onnxruntime_u8s8": (d / f"{name}_int8.onnx", "onnxruntime"),
                "onnxruntime_s8s8": (s8, "onnxruntime"),
                "openvino_fp32": (d / f"{name}_fp32.onnx", "openvino"),
                "openvino_u8s8": (d / f"{name}_int8.xml", "openvino"),
            }
            lat: dict[str, list[float]] = {k: [] for k in runs}
            for _ in range(SPEEDUP_ROUNDS):
                for k, (path, backend) in runs.items():
                    lat[k].append(latency_us(path, backend, sample, iterations))
        p50 = {k: float(np.median(v)) for k, v in lat.items()}
        sp = {k: p50[f"{k.split('_')[0]}_fp32"] / v for k, v in p50.items() if not k.endswith("fp32")}
        log(f"  {name}: " + ", ".join(f"{k} {v:.2f}x" for k, v in sp.items()))
        lines += ["[[model]]", f"name = {toml_value(name)}", 'committed = "u8s8"']
        lines += [f"{k}_p50_us = {p50[k]:.1f}" for k in p50 if k.endswith("fp32")]
        lines += [f"{k}_speedup = {v:.3f}" for k, v in sp.items()]
        lines.append("")
    (outdir / "speedup.toml").write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: models/)")
    ap.add_argument(
        "--only", action="append", choices=["digits_cnn", *MLPERF_TINY], help="build only this model (repeatable)"
    )
    ap.add_argument(
        "--retrain",
        action="store_true",
        help="train digits_cnn again and write its weights (the result depends on the CPU's float rounding)",
    )
    ap.add_argument(
        "--speedup",
        action="store_true",
        help="measure the committed INT8 files against FP32 here and write speedup.toml (builds nothing)",
    )
    ap.add_argument(
        "--dynamic-only",
        action="store_true",
        help="write only the dynamic-batch variants (*_int8_dynamic.onnx/.xml) from the committed INT8 ONNX files and "
        "their manifest entries: needs onnx and openvino, not TensorFlow",
    )
    ap.add_argument(
        "--placement-only",
        action="store_true",
        help="write only the per-op placement models (models/partial_tflite.py, models/partial_onnx.py) and their "
        "manifest entries: needs ai-edge-litert and onnx, not TensorFlow",
    )
    args = ap.parse_args(argv)
    names = args.only or ["digits_cnn", *MLPERF_TINY]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.speedup:
        measure_speedups(names, args.out, log)
        log(f"wrote {args.out / 'speedup.toml'}")
        return 0
    if args.dynamic_only:
        write_dynamic_only(names, args.out, log)
        log(f"wrote {args.out / 'manifest.toml'} (the *_dynamic entries)")
        return 0
    if args.placement_only:
        write_placement_only(args.out, log)
        log(f"wrote {args.out / 'manifest.toml'} (the placement models' entries)")
        return 0

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    results = []
    for i, name in enumerate(names, 1):
        log(f"[{i}/{len(names)}] {name}")
        results.append(build_one(name, args.out, log, args.retrain))
    write_placement_models(args.out, log)
    write_manifest(results, args.out)
    for r in results:
        if r["accuracy"]:
            for backend, acc in r["accuracy"].items():
                log(
                    f"  {r['name']} on {backend}: FP32 {acc['fp32_top1']:.4f}  INT8 {acc['int8_top1']:.4f}  "
                    f"agreement {acc['int8_fp32_agreement']:.4f}"
                )
    log(f"wrote {args.out / 'manifest.toml'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
