"""GLM-5.3 (GlmMoeDsaForCausalLM): geometry, spec, reference forward and launches."""
