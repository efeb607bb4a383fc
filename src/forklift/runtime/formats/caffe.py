"""Caffe (Faster R-CNN from py-faster-rcnn and other Caffe nets): `.prototxt`, `.caffemodel`, `.labels`, run by
OpenCV DNN, the one engine here that reads Caffe's Python-free layers; nothing here converts it to ONNX."""

from __future__ import annotations

from typing import TYPE_CHECKING

from forklift.model_files.model_dir import ModelDirectory
from forklift.runtime.formats.registry import FormatEntry, register
from forklift.runtime.summary import ModelFacts
from forklift.vocabulary import ModelFormat, Runtime, Task

if TYPE_CHECKING:
    from forklift.runtime.base import PredictOptions, Predictor


def _predictor(model: ModelDirectory, runtime: Runtime, options: PredictOptions) -> Predictor:
    from forklift.runtime.opencv_caffe import CaffeFasterRCNNPredictor

    return CaffeFasterRCNNPredictor(model, options)


def _summary(model: ModelDirectory) -> ModelFacts:
    import cv2

    from forklift.model_files.caffe import class_names, load_caffe_net, num_classes
    from forklift.model_files.prototxt import read_prototxt

    tree = read_prototxt(model.files["prototxt"])
    classes = num_classes(tree, str(model.files["prototxt"]))
    net = load_caffe_net(model, tree)
    width = model.config.input_width or 1000
    height = model.config.input_height or 600
    parameters = sum(int(blob.size) for name in net.getLayerNames() for blob in net.getLayer(name).blobs)
    try:
        flops = int(net.getFLOPS([(1, 3, height, width), (1, 3)]))
    except cv2.error:
        flops = None
    return ModelFacts(
        task=Task.DETECT,
        classes=classes - 1,
        labels=class_names(model, classes)[1:],  # index 0 is the background
        input_width=width,
        input_height=height,
        parameters=parameters,
        flops=flops,
    )


ENTRY = register(
    FormatEntry(
        ModelFormat.CAFFE,
        runtimes=(Runtime.OPENCV,),
        predictor=_predictor,
        summary=_summary,
        export=None,
        no_export="OpenCV runs Caffe models here, and nothing converts them to ONNX",
    )
)
