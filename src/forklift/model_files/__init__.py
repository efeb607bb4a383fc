"""Files on disk ⇄ objects: Darknet, Caffe, ONNX, label files and the model directory."""
