# Sourced by the H200 scripts that drive SGLang's own model (step_h200.sh, audit_h200.sh), from the repo root with
# .whl (SGLang's wheels: device_wheels.sh) and the h200_sglang_model stand-ins ($STUBS, default .carry/stubs)
# carried: Triton's cache, the wheels unzipped into /tmp/site, PYTHONPATH, G (this folder) and CTX (the model's
# context for its builds).
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53
export PYTHONPATH="$PWD:$PWD/test/unit:$PWD/$G:/tmp/site:${STUBS:-$PWD/.carry/stubs}"
CTX=132080  # check_step's REAL_MAX_POS (132096) less the page-table room registry.max_context adds
