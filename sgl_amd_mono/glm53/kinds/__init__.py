"""GLM-5.3's launch kinds as tables (lowering-neutral): each kind's stages, buffers, refusals and bounds, and
the torch oracle a stage. A lowering (`backends/triton/`) turns a table into a kernel of stage calls."""
