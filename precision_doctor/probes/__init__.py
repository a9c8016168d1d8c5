"""Probes: the only code that reads the outside world (the script's AST, configs, job scripts, checkpoints, GPUs,
processes, installed libraries; live mode runs the script). Each returns facts; what it cannot see is unknown with
its reason. Imports model/, knowledge/, system/ and settings, never derive/ or the rules."""
