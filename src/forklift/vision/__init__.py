"""Pure functions shared by predict, serve, train and eval: decoding, resizing, boxes, results."""
