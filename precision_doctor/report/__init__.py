"""Renderers: one per output format (text, JSON, SARIF, concise, github, memory, explain, rule docs), each a
function of the engine's result and the facts. Imports every layer up to the engine; never derives."""
