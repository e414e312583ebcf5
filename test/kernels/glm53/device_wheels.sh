#!/usr/bin/env bash
# The wheels the device scripts unzip into /tmp/site (h200_env.sh, select_h200.sh, ab_trees.sh, ...): SGLang 0.5.23
# and the packages its import closure needs beyond the device image's torch / Triton, for CPython 3.12 on x86_64,
# into .whl (git-ignored; carry it). The device reaches no network, so they are fetched here. openai 3.x imports
# httpx2 (httpcore2, anyio, h11, idna with it): without them check_step's SGLang import fails on the device.
#   bash test/kernels/glm53/device_wheels.sh      # from the repo root
set -eu
D=${WHL:-.whl}; mkdir -p "$D"
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d "$D" sglang==0.5.23
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
  -d "$D" orjson pybase64 msgspec pydantic pydantic-core typing-inspection annotated-types pyzmq starlette \
  apache-tvm-ffi compressed-tensors dill distro gguf loguru openai partial-json-parser sniffio truststore ipython \
  traitlets decorator jedi parso matplotlib-inline pexpect ptyprocess prompt-toolkit wcwidth stack-data executing \
  asttokens pure-eval jiter ipython-pygments-lexers httpx2 httpcore2 anyio h11 idna
ls "$D" | wc -l
