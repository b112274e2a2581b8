"""Worker processes on this machine for the multi-worker tests: TF_CONFIGs of
localhost ports, and waiting for the processes."""
import json
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tf_configs(n):
    """TF_CONFIG of each of `n` workers of one cluster on localhost ports."""
    cluster = {"worker": [f"localhost:{free_port()}" for _ in range(n)]}
    return [json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}) for i in range(n)]


def wait_all(procs, timeout=300):
    """The (stdout, stderr) of each process (text pipes); every one must exit 0 within `timeout`
    seconds, and none is left running."""
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (so, se) in zip(procs, outputs):
        assert p.returncode == 0, so[-2000:] + se[-4000:]
    return outputs
