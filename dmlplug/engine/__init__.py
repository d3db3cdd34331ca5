"""Training engine: build a run from a recipe, train, evaluate, checkpoint."""
