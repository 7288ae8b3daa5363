"""The simulated pair's Triton image (`scripts/testbed triton`): the real Triton Inference Server 2.51 with its
Python backend, the stand-in vllm backend (triton_image/NOTES.md) and the real vLLM CPU build, in every node.

Its TP=2 start in seed 003's shape (tritonserver on spark-a whose vLLM engine is rank 0, `vllm serve --headless
--node-rank 1` on spark-b, the Eagle3 draft), first proven here by hand with `sparkpair_testbed/triton_serve.py`'s
commands, is proven through sparkpair itself by tests/integration/test_launch_triton.py (`sparkpair launch
qwen3-235b --runtime triton`: readiness, generate and generate_stream, the metrics port, status, bench, logs,
stop), so the suite starts Triton once.
"""
from __future__ import annotations

import pytest
from sparkpair_testbed import triton_image
from sparkpair_testbed.hostexec import node_run
from sparkpair_testbed.layout import USER, WORKER

pytestmark = pytest.mark.integration


def test_the_image_holds_tritonserver_its_python_backend_and_the_stand_in_vllm_backend(testbed_triton):
    probe = ("tritonserver --help 2>&1 | head -1; ls /opt/tritonserver/backends/python /opt/tritonserver/backends/vllm; "
             "python -c \"import numpy, vllm, sys; print(numpy.__version__, vllm.__version__, sys.version_info[:2])\"")
    out = node_run(WORKER, ["docker", "run", "--rm", "--network", "none", triton_image.TRITON_IMAGE_TAG, "sh", "-c",
                            probe], user=USER, timeout=120).stdout.split()
    assert out[:2] == ["Usage:", "tritonserver"]
    assert {"libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py", "model.py",
            "stat_logger.py"} <= set(out)
    assert out[-4:-2] == ["1.26.4", "0.32.0"] and out[-2:] == ["(3,", "11)"]  # numpy < 2; vllm.__version__; Python 3.11
    assert testbed_triton.image == triton_image.TRITON_IMAGE_TAG and testbed_triton.image_id.startswith("sha256:")
