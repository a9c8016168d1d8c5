"""Renderers: one per output format, each a function of the engine's result and the facts."""

