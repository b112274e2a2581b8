"""Prints make variables with the installed TensorFlow's compile and link flags."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf  # noqa: E402

print("TF_CFLAGS := " + " ".join(tf.sysconfig.get_compile_flags()))
print("TF_LFLAGS := " + " ".join(tf.sysconfig.get_link_flags()))
print("TF_VERSION := " + tf.__version__)
print("TF_IS_CUDA_BUILD := " + ("1" if tf.test.is_built_with_cuda() else "0"))
