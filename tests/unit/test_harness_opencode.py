"""The opencode plugin (plugins/awp.js), run under node with a stand-in awp."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from awp.harness import plugin_files

NODE = shutil.which("node")

DRIVER = r"""
const mod = await import(process.argv[2]);
const hooks = await mod.AwpPlugin({});
const output = { title: "t", output: "tool said hi", metadata: {} };
await hooks["tool.execute.after"]({ tool: "bash", sessionID: "s", callID: "c" }, output);
await hooks["chat.params"]({ model: { id: "gpt-5.5", providerID: "openai" } }, {});
await hooks["chat.params"]({ model: { id: "gpt-5.5", providerID: "openai" } }, {});
const quiet = { output: "nothing new" };
process.env.FAKE_QUIET = "1";
await hooks["tool.execute.after"]({ tool: "read" }, quiet);
console.log(JSON.stringify({ output: output.output, quiet: quiet.output }));
"""

FAKE_AWP = """#!/bin/sh
echo "$AWP_HARNESS $*" >> "$FAKE_LOG"
if [ "$1" = hook ] && [ -z "$FAKE_QUIET" ]; then
  printf 'New awp messages (1). framed\\n'
fi
"""


def _drive(tmp_path, driver_js: str):
    """Load the wired plugin in node with ``driver_js``: (its JSON output, the fake awp's log)."""
    fake = tmp_path / "awp"
    fake.write_text(FAKE_AWP)
    fake.chmod(0o755)
    plugin = tmp_path / "awp.js"
    plugin.write_text(plugin_files.opencode_plugin([str(fake)]))
    driver = tmp_path / "driver.mjs"
    driver.write_text(driver_js)
    log = tmp_path / "log"
    p = subprocess.run([NODE, str(driver), plugin.as_uri()], capture_output=True, text=True,
                       timeout=60, env={"PATH": "/usr/bin:/bin", "FAKE_LOG": str(log)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), log


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_opencode_plugin(tmp_path) -> None:
    got, log = _drive(tmp_path, DRIVER)
    assert got == {"output": "tool said hi\n\nNew awp messages (1). framed",
                   "quiet": "nothing new"}
    # the model is reported once per change; the harness is named explicitly
    assert log.read_text().splitlines() == [
        "opencode hook inbox --format text",
        "opencode model gpt-5.5",
        "opencode hook inbox --format text",
    ]


DRIVER_V2 = r"""
const mod = await import(process.argv[2]);
const def = mod.default;
if (def.id !== "awp" || typeof def.setup !== "function") throw new Error("no v2 definition");
if (def.server !== mod.AwpPlugin) throw new Error("v1 server is not the plugin function");
const hooks = {};
await def.setup({ tool: { hook: async (name, fn) => { hooks[name] = fn; return { dispose() {} }; } } });
const out = [];
const a = { status: "completed", tool: "bash", result: { output: "tool said hi" } };
await hooks["execute.after"](a);
const b = { status: "completed", tool: "mcp", result: { content: [{ type: "text", text: "x" }] } };
await hooks["execute.after"](b);
const c = { status: "error", tool: "bash", result: { output: "failed" } };
await hooks["execute.after"](c);
await def.setup({});  // a context without tool hooks: nothing to do, no throw
console.log(JSON.stringify({ a: a.result.output, b: b.result.content, c: c.result.output,
                             names: Object.keys(hooks) }));
"""


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_opencode_plugin_v2_definition(tmp_path) -> None:
    """opencode 2.x loads only a default export with an id and setup."""
    got, log = _drive(tmp_path, DRIVER_V2)
    assert got == {"a": "tool said hi\n\nNew awp messages (1). framed",
                   "b": [{"type": "text", "text": "x"},
                         {"type": "text", "text": "New awp messages (1). framed"}],
                   "c": "failed", "names": ["execute.after"]}
    assert log.read_text().splitlines() == ["opencode hook inbox --format text"] * 2
