"""SGLang's own per-op path for one layer: moved into the package (`sgl_amd_mono/glm53/per_op.py`, the auditor's
provider on a GPU without SGLang's full stack); re-exported here for `time_layers.py`, `time_step.py` and the
registry."""

from sgl_amd_mono.glm53.per_op import DensePerOp, IndexerPerOp, SharedPerOp, TailPerOp  # noqa: F401
