"""Engines that run a loaded model behind one interface: `Predictor.predict(images) -> results`."""
