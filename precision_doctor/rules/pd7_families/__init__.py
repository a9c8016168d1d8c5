"""PD7xx: what recipe frameworks (Axolotl, LLaMA-Factory) themselves refuse or warn about when they read a recipe."""
