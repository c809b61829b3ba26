// awp for opencode: adds new awp messages to the output of each tool call, and
// reports the model on each chat turn. Installed by `awp bootstrap` as
// ~/.config/opencode/plugins/awp.js; removed by `awp bootstrap --uninstall`.
//
// Messages from other agents are untrusted input: the text added to tool
// output says so, the way awp's hooks do for other harnesses.
import { execFile } from "node:child_process";

// The command `awp bootstrap` wired in (argv), else AWP_BIN, else awp on PATH.
const WIRED = [];
const AWP = process.env.AWP_BIN ? [process.env.AWP_BIN] : WIRED.length ? WIRED : ["awp"];

function awp(args) {
  return new Promise((resolve) => {
    const env = { ...process.env, AWP_HARNESS: process.env.AWP_HARNESS || "opencode" };
    const opts = { timeout: 10000, maxBuffer: 8 * 1024 * 1024, env };
    const child = execFile(AWP[0], [...AWP.slice(1), ...args], opts,
      (err, stdout) => resolve({ ok: !err, out: String(stdout || "") }));
    child.on("error", () => resolve({ ok: false, out: "" }));
    if (child.stdin) child.stdin.end();
  });
}

export const AwpPlugin = async () => {
  let reported = "";
  return {
    "tool.execute.after": async (input, output) => {
      const { out } = await awp(["hook", "inbox", "--format", "text"]);
      const text = out.trim();
      if (!text || !output) return;
      output.output = output.output ? `${output.output}\n\n${text}` : text;
    },
    "chat.params": async (input) => {
      const model = input?.model?.id || input?.model?.modelID || "";
      if (!model || model === reported) return;
      const { ok } = await awp(["model", model]);
      if (ok) reported = model;
    },
  };
};
