"""The checks of macOS binaries that tools/check/macos_binaries.py runs on Linux.

macho: the Mach-O reader (load commands, binds, export tries) the others use.
stream_protocol: tensorflow-metal's stream class against our `TF_MetalStream`.
tensorflow_wheel: the TensorFlow images of an unpacked macOS wheel.
plugin_compat: whether dyld loads tensorflow-metal's plugin into a TensorFlow.
text_stubs: what the SDK's system libraries export.
wheel: our macOS wheel (tags, arm64, minimum macOS, rpaths, binds, exports).
"""
