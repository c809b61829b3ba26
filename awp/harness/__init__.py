"""Agent harnesses: which one awp runs in, and installing awp into them.

``awp.harness.identity`` is imported on the hook's hot path and stays
stdlib-only and cheap; ``awp.harness.bootstrap`` (``awp bootstrap``) and
``awp.harness.plugin_files`` (the embedded plugin) are loaded only by the
commands that need them.
"""
