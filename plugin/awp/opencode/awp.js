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

// New messages, as text to add to a tool's output ("" when there are none).
async function inbox() {
  const { out } = await awp(["hook", "inbox", "--format", "text"]);
  return out.trim();
}

function joined(before, text) {
  return before ? `${before}\n\n${text}` : text;
}

// opencode 1.x: a plugin function returning its hooks (also default.server).
export const AwpPlugin = async () => {
  let reported = "";
  return {
    "tool.execute.after": async (input, output) => {
      const text = await inbox();
      if (!text || !output) return;
      output.output = joined(output.output, text);
    },
    "chat.params": async (input) => {
      const model = input?.model?.id || input?.model?.modelID || "";
      if (!model || model === reported) return;
      const { ok } = await awp(["model", model]);
      if (ok) reported = model;
    },
  };
};

// opencode 2.x only loads a default export with an id and a setup function,
// and takes tool hooks through ctx.tool.hook. Where 2.x keeps a finished
// tool's text is read defensively: result.output when it is a string, else
// result.content (a string, or a list of text parts). Model reporting has no
// 2.x hook here yet: agents there run `awp model ID` as the skill says.
async function setup(ctx) {
  if (!ctx?.tool || typeof ctx.tool.hook !== "function") return;
  await ctx.tool.hook("execute.after", async (event) => {
    if (!event || event.status === "error" || !event.result) return;
    const text = await inbox();
    if (!text) return;
    const result = event.result;
    if (typeof result.output === "string") {
      result.output = joined(result.output, text);
    } else if (typeof result.content === "string") {
      result.content = joined(result.content, text);
    } else if (Array.isArray(result.content)) {
      result.content.push({ type: "text", text });
    } else {
      result.output = text;
    }
  });
}

export default { id: "awp", server: AwpPlugin, setup };
