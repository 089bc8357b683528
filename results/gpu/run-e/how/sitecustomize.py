"""Device runs only: MLflow did not travel (the device's 64 MiB limit), so any `mlflow` import gets a do-nothing
module. Nothing the stages compute or write depends on it."""
import importlib.abc
import importlib.machinery
import sys
from unittest.mock import MagicMock


class _NoTracking(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "mlflow" or name.startswith("mlflow."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = MagicMock(name=spec.name)
        module.__path__, module.__spec__, module.__name__ = [], spec, spec.name
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _NoTracking())
