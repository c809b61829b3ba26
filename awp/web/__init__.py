"""``awp web``: the dashboard page and its web API (see docs/web.md)."""
