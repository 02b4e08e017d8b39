"""Smaller and faster models: int8 / int4 quantization (torchao, through HF's `TorchAoConfig`), ONNX export
with an onnxruntime parity check, distillation into fewer layers, and fake quantization for sensitivity
studies. Each needs the `compress` extra (torchao, onnx, onnxscript, onnxruntime)."""
