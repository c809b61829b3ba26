"""Harness identity: the eight harness ids, and detection from the environment.

The order of precedence (see the "Harness identity" docs) is an explicit
``--harness`` or ``AWP_HARNESS`` (remembered by the daemon), then the
remembered value, then detection. Detection looks at ``AI_AGENT`` first, then
at the marker variables each harness sets for the commands its agent runs,
in an order where the harnesses most often found wrapping others come last
(a harness launched from inside another inherits its variables).

Imported by ``awp hook`` on every tool call: stdlib only, nothing at import.
"""

from __future__ import annotations

#: Every harness id awp knows, in the order the docs list them.
HARNESSES = ("claude", "opencode", "codex", "cursor", "gemini", "copilot", "grok", "pi")

#: Human names, for bootstrap's output.
TITLES = {
    "claude": "Claude Code",
    "opencode": "opencode",
    "codex": "Codex",
    "cursor": "Cursor",
    "gemini": "Gemini CLI",
    "copilot": "GitHub Copilot CLI",
    "grok": "grok",
    "pi": "pi",
}

#: Spellings seen in ``AI_AGENT`` (and accepted for ``--harness``) per id.
_ALIASES = {
    "claude": "claude", "claude-code": "claude", "claudecode": "claude",
    "claude_code": "claude",
    "opencode": "opencode", "open-code": "opencode",
    "codex": "codex", "codex-cli": "codex", "openai-codex": "codex",
    "cursor": "cursor", "cursor-agent": "cursor", "cursor-cli": "cursor",
    "gemini": "gemini", "gemini-cli": "gemini", "gemini_cli": "gemini",
    "copilot": "copilot", "copilot-cli": "copilot", "github-copilot": "copilot",
    "github-copilot-cli": "copilot", "gh-copilot": "copilot",
    "grok": "grok", "grok-cli": "grok",
    "pi": "pi", "pi-coding-agent": "pi", "pi-agent": "pi",
}

#: Marker variables in the order they are checked.
MARKERS = (
    ("CODEX_THREAD_ID", "codex"),
    ("CODEX_SANDBOX", "codex"),
    ("CURSOR_AGENT", "cursor"),
    ("GEMINI_CLI", "gemini"),
    ("COPILOT_CLI", "copilot"),
    ("OPENCODE", "opencode"),
    ("PI_CODING_AGENT", "pi"),
    ("CLAUDECODE", "claude"),
)


def normalize(value: object) -> str | None:
    """The harness id for a spelling (``claude-code`` -> ``claude``), else ``None``."""
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if not v:
        return None
    hit = _ALIASES.get(v)
    if hit:
        return hit
    # "claude-code/2.1.3", "codex 0.40": the name before a version.
    for sep in ("/", " ", "@"):
        if sep in v:
            return _ALIASES.get(v.split(sep, 1)[0])
    return None


def detect(env: dict[str, str] | None = None) -> str:
    """The harness the environment says we run in, or ``""``.

    Never remembered: the caller reports it as detected.
    """
    if env is None:
        import os

        env = os.environ  # type: ignore[assignment]
    assert env is not None
    hit = normalize(env.get("AI_AGENT"))
    if hit:
        return hit
    for var, harness in MARKERS:
        if env.get(var):
            return harness
    return ""


def explicit(flag: str | None, env: dict[str, str] | None = None) -> str:
    """An explicit harness: ``--harness`` beats ``AWP_HARNESS``; ``""`` if neither.

    Raises ``ValueError`` for a value that names no known harness.
    """
    if env is None:
        import os

        env = os.environ  # type: ignore[assignment]
    assert env is not None
    for raw, where in ((flag, "--harness"), (env.get("AWP_HARNESS"), "AWP_HARNESS")):
        if raw is None or not str(raw).strip():
            continue
        hit = normalize(raw)
        if hit is None:
            raise ValueError(
                f"{where}: unknown harness {raw!r}: choose from {', '.join(HARNESSES)}")
        return hit
    return ""
