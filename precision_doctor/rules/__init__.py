"""The rules: one folder per series (pd1_machine, pd2_precision, ...), one rule per file named after it
(pd201_fp16_params_with_grad_scaler.py), the helpers several rules of a series share beside them (`_*.py`), and the
machinery every rule uses: `registry` (@rule and what a rule declares) and `_common`. Rules import the layers below,
the registry and shared helpers, never another rule; `catalog` loads them."""
