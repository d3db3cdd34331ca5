"""What MLflow runs to load a bundle logged as a model ("models from code"): the model is a :class:`BundleModel`.

MLflow copies this file into the logged model and executes it when the model is loaded, instead of unpickling an
object: the model's code is the installed dmlplug's (:mod:`.mlflow_pyfunc`), not a frozen copy of it.
"""

from mlflow.models import set_model

from dmlplug_builtins.loggers.mlflow_pyfunc import BundleModel

set_model(BundleModel())
