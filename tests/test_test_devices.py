"""tests/devices.py: which devices the op tests run on."""
import pytest

from tests import devices


def test_every_device_present_by_default():
    assert devices.device_names(env={}, logical_types=["CPU"]) == ["/CPU:0"]
    assert devices.device_names(env={}, logical_types=["CPU", "GPU", "GPU"]) == ["/CPU:0", "/GPU:0"]


def test_environment_picks_device_types():
    env = {devices.ENV: "gpu"}
    assert devices.device_names(env=env, logical_types=["CPU", "GPU"]) == ["/GPU:0"]
    env = {devices.ENV: " CPU , GPU "}
    assert devices.device_names(env=env, logical_types=["CPU", "GPU"]) == ["/CPU:0", "/GPU:0"]


def test_a_missing_or_unknown_device_type_is_an_error():
    with pytest.raises(ValueError, match="lists no GPU device here"):
        devices.device_names(env={devices.ENV: "GPU"}, logical_types=["CPU"])
    with pytest.raises(ValueError, match="unknown device type 'TPU'"):
        devices.device_names(env={devices.ENV: "TPU"}, logical_types=["CPU", "TPU"])


def test_ids():
    assert devices.device_id("/GPU:0") == "GPU" and devices.device_id("/CPU:0") == "CPU"


def test_op_tests_are_parametrized_by_device():
    """This machine's op tests carry a device id: the mechanism is in use."""
    import tensorflow as tf

    names = devices.device_names()
    assert names[0] == "/CPU:0"
    assert ("/GPU:0" in names) == bool(tf.config.list_logical_devices("GPU"))
