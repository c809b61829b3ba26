"""``awp hook``: bring new awp messages and board posts into a harness's model context.

:mod:`awp.hooks.run` is the whole command. It is dispatched by
``awp.cli.entry`` before typer is imported and must stay cheap: stdlib,
``awp.localapi.client`` and ``awp.harness.identity`` only (plus
``awp.present.render`` when there is something to render).
"""
