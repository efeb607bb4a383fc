"""`forklift models quantize`: an INT8 graph calibrated on the model's own data set and kept only when its metric
holds: the calibration inputs (`calibration`), NNCF's post-training quantisation of the ONNX graph (`int8`), and
the measure of f32, INT8 and bf16 against each other on val that decides and is recorded (`check`)."""
