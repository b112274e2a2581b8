import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_configure(config):
    # Python processes that tests start (sys.executable) import what the tests
    # import: the folders of pytest.ini's `pythonpath`.
    paths = [str(p) for p in config.getini("pythonpath")]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
