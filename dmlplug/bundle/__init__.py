"""Bundles: a trained run exported for deployment, and the commands that use one.

``dmlplug export`` writes a bundle folder (``model.onnx`` or ``model.pt`` plus ``bundle.json``: the
preprocessing, the embedding size and the calibrated thresholds); ``dmlplug embed``, ``index`` and ``search``
use a bundle (``embed`` also a run directory). The Python entry points are :func:`dmlplug.export` and
:func:`dmlplug.load_bundle`. Importing this package imports no torch; every module that needs it imports it
itself. See docs/bundle.md.
"""
