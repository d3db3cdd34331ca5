"""Built-in dmlplug plugins (installed as ``dmlplug_builtins``); they use only the public hooks."""
