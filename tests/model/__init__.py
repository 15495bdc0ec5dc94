"""The model-based test of the claim engine (issue 25)."""
