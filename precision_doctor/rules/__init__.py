"""The check modules. Importing this package imports every module in it, which registers their rules: adding a
rule is adding (or editing) a module here, never a list."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")
