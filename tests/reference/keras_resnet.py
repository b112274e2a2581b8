"""ResNet-50's bottleneck blocks in Keras, the Conv2D -> BiasAdd -> (Add) -> Relu
graphs the fusion pass rewrites: built by tests/test_fused_conv2d_fusion.py (which
checks the fused model's numbers) and benchmarks/bench_fused_conv2d.py (which times
it)."""


def blocks(keras, bn=False):
    """(res_conv, res_identity): res_conv(x, stride, (f1, f2)) is the block with a
    projection shortcut, res_identity(x, (f1, f2)) the one with an identity shortcut.
    With bn, each convolution has no bias and is followed by BatchNormalization."""
    layers = keras.layers

    def conv(x, f, k, s=1, pad="valid"):
        x = layers.Conv2D(f, kernel_size=k, strides=s, padding=pad, use_bias=not bn)(x)
        return layers.BatchNormalization()(x) if bn else x

    def body(x, s, filters):
        f1, f2 = filters
        x = layers.Activation("relu")(conv(x, f1, 1, s))
        x = layers.Activation("relu")(conv(x, f1, 3, pad="same"))
        return conv(x, f2, 1)

    def res_identity(x, filters):
        return layers.Activation("relu")(layers.Add()([body(x, 1, filters), x]))

    def res_conv(x, s, filters):
        y = body(x, s, filters)
        return layers.Activation("relu")(layers.Add()([y, conv(x, filters[1], 1, s)]))

    return res_conv, res_identity
