#!/bin/sh
# Runs once, in a container of the vLLM image's Debian base with no network (modelopt_image.py):
# the ModelOpt wheelhouse (modelopt_wheels.py) is mounted read-only at /wheels. Installs
# nvidia-modelopt[hf] and its resolved closure into the venv /opt/modelopt, offline.
set -eu
python3 -m venv --without-pip /opt/modelopt
pip_wheel=$(ls /wheels/pip-*.whl)
/opt/modelopt/bin/python "$pip_wheel/pip" install -q --no-index --no-deps --no-cache-dir "$pip_wheel"
/opt/modelopt/bin/pip install -q --no-index --find-links /wheels --no-deps --no-cache-dir -r /wheels/closure.txt
/opt/modelopt/bin/python -c "import modelopt.torch.speculative, modelopt.torch.export, transformers, accelerate; print('modelopt', modelopt.__version__)"
mkdir -p /workspace
rm -rf /root/.cache
