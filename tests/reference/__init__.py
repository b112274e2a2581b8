"""Independent NumPy references of the ops (no TensorFlow: the CUDA harness
tests on a GPU machine without TensorFlow use them too)."""
