// jupyter_agents' OpenCode plugin (jupyter_agents/agents/opencode.py).
//
// Loaded only by the OpenCode processes jupyter_agents starts: their environment's
// OPENCODE_CONFIG_CONTENT names this file with its options; the user's own config files
// are never edited. Options:
//   hook     argv of `python -m jupyter_agents.hook SPOOL` (a payload on its stdin)
//   ask      argv of the hook that makes a permission request answerable elsewhere and
//            prints the decision (null: none)
//   records  folder of this session's conversation records, one JSONL file per
//            conversation (OpenCode keeps its own in SQLite)
//
// What it does, from OpenCode's bus events (plugin `event` hook):
// - reports attention to the hook, one event at a time, in order: its own start ->
//   SessionStart without a conversation (OpenCode has none yet); `session.created` of
//   a top-level session -> SessionStart (its `ses_...` id is the conversation id);
//   `session.status` busy -> UserPromptSubmit; `permission.asked` -> PermissionRequest;
//   `permission.replied` -> PostToolUse; `session.error` -> StopFailure (not for an
//   interrupt); `session.idle` -> Stop (not after an error);
// - appends a record of each finished message (`message.updated` with its tokens and
//   cost) and each finished part (text, reasoning, tool) to the JSONL of the top-level
//   conversation it belongs to (a subagent's messages go to its parent's file); a
//   message's parts in the order they began (a quick tool call ends before the text
//   before it does), those still unfinished when the message ends left out;
// - answers a permission request through OpenCode's own API when the asking hook prints
//   a decision (the dialog stays on screen meanwhile; the first answer wins).
// - empties OPENCODE_CONFIG_CONTENT for the commands it runs (shell.env hook).
// Never throws into OpenCode: a failed hook or write is dropped.
import { spawn } from "node:child_process";
import { appendFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";

const ID = /^ses_[A-Za-z0-9]{8,64}$/;
const ROLES_KEPT = 4096; // message roles remembered (for the parts that follow)
const TOOLS = { bash: "Bash", edit: "Edit", write: "Write", read: "Read", webfetch: "WebFetch" };

export const JupyterAgents = async (ctx, options) => {
  const opts = options || {};
  const parents = new Map(); // session id -> its parent's id (subagents)
  const roles = new Map(); // message id -> role
  const began = new Map(); // message id -> its parts not yet recorded, in the order they began
  const recorded = new Set(); // ids of the parts recorded (the newest ROLES_KEPT)
  let current = null; // the top-level conversation this process works on
  let last = null; // the last attention event reported
  let failed = false; // an error was reported since the turn began
  let queue = Promise.resolve();

  const root = (id) => {
    let seen = 0;
    while (parents.has(id) && seen++ < 32) id = parents.get(id);
    return id;
  };

  const run = (argv, payload) =>
    new Promise((resolve) => {
      let out = "";
      try {
        const child = spawn(argv[0], argv.slice(1), {
          stdio: ["pipe", "pipe", "ignore"],
          env: process.env,
        });
        child.stdout.on("data", (data) => (out += data));
        child.on("error", () => resolve(""));
        child.on("close", () => resolve(out));
        child.stdin.on("error", () => {});
        child.stdin.end(JSON.stringify(payload));
      } catch {
        resolve("");
      }
    });

  // hooks run one at a time, in the order of the events (the spool takes their times)
  const report = (event, sessionID, extra = {}) => {
    if (!Array.isArray(opts.hook) || !opts.hook.length) return;
    const payload = { hook_event_name: event, session_id: sessionID, ...extra };
    queue = queue.then(() => run(opts.hook, payload));
  };

  const record = (sessionID, entry) => {
    if (!opts.records || !sessionID) return;
    const conversation = root(sessionID);
    if (!ID.test(conversation)) return;
    try {
      mkdirSync(opts.records, { recursive: true, mode: 0o700 });
      const line = JSON.stringify({ t: Date.now(), session: sessionID, ...entry }) + "\n";
      appendFileSync(join(opts.records, conversation + ".jsonl"), line, { mode: 0o600 });
    } catch {}
  };

  // a message's parts, in the order they began: those finished up to the first that is
  // not (all finished ones when the message ended)
  const flush = (messageID, ended = false) => {
    const parts = began.get(messageID) || [];
    while (parts.length && (parts[0].entry || ended)) {
      const { id, sessionID, entry } = parts.shift();
      if (!entry) continue;
      record(sessionID, entry);
      recorded.add(id);
      if (recorded.size > ROLES_KEPT) recorded.delete(recorded.values().next().value);
    }
    if (!parts.length) began.delete(messageID);
  };

  // the conversation a person works on now: a new top-level one, or one switched to
  const follow = (sessionID, source) => {
    if (!sessionID || parents.has(sessionID) || sessionID === current) return;
    current = sessionID;
    last = "SessionStart";
    report("SessionStart", sessionID, { source });
  };

  const attention = (event, sessionID, extra) => {
    if (event === last && event !== "PermissionRequest") return;
    last = event;
    report(event, sessionID, extra);
  };

  const ask = async (request) => {
    const tool = TOOLS[request.permission] || String(request.permission || "tool");
    const meta = request.metadata || {};
    const input =
      tool === "Bash"
        ? { command: meta.command || (request.patterns || []).join(" ") }
        : { file_path: meta.filepath || meta.filePath, ...meta };
    const payload = {
      hook_event_name: "PermissionRequest",
      session_id: root(request.sessionID),
      tool_name: tool,
      tool_input: input,
    };
    last = "PermissionRequest";
    if (!Array.isArray(opts.ask) || !opts.ask.length) {
      report("PermissionRequest", payload.session_id, { tool_name: tool, tool_input: input });
      return;
    }
    await queue; // what came before it is spooled first
    const printed = await run(opts.ask, payload);
    let decision = null;
    try {
      decision = JSON.parse(printed).hookSpecificOutput.decision;
    } catch {
      return; // no decision: the dialog decides
    }
    const reply = decision.behavior === "allow" ? "once" : "reject";
    const body = { reply, ...(reply === "reject" && decision.message ? { message: decision.message } : {}) };
    // OpenCode 1.18 gives plugins its v1 SDK client, whose reply carries no message (a
    // denial's reason does not reach the model); the v2 client's does
    try {
      if (ctx.client?.permission?.reply) {
        await ctx.client.permission.reply({ requestID: request.id, ...body });
      } else {
        await ctx.client.postSessionIdPermissionsPermissionId({
          path: { id: request.sessionID, permissionID: request.id },
          body: { response: reply },
        });
      }
    } catch {}
  };

  // started (or resumed), asked nothing yet: ready; the id comes with the first prompt
  last = "SessionStart";
  report("SessionStart", null, { source: "startup" });

  return {
    // the commands OpenCode runs do not load this plugin again (an `opencode` run in
    // its shell would report to this session): the config naming it is emptied there
    "shell.env": async (input, output) => {
      if ((process.env.OPENCODE_CONFIG_CONTENT || "").includes("opencode_plugin.js")) {
        output.env.OPENCODE_CONFIG_CONTENT = "";
      }
    },
    event: async ({ event }) => {
      const p = event.properties || {};
      switch (event.type) {
        case "session.created":
        case "session.updated": {
          const info = p.info || {};
          if (info.parentID) parents.set(info.id, info.parentID);
          if (event.type === "session.created" && !info.parentID) {
            record(info.id, { type: "session", info: { id: info.id, directory: info.directory, time: info.time } });
            follow(info.id, "startup");
          }
          break;
        }
        case "session.status": {
          const sessionID = p.sessionID;
          if (parents.has(sessionID) || p.status?.type !== "busy") break;
          follow(sessionID, "resume");
          if (last !== "PermissionRequest") {
            if (last !== "UserPromptSubmit" && last !== "PostToolUse") failed = false;
            attention("UserPromptSubmit", sessionID);
          }
          break;
        }
        case "permission.asked":
          ask(p);
          break;
        case "permission.replied":
          if (last === "PermissionRequest") {
            last = "PostToolUse";
            report("PostToolUse", root(p.sessionID));
          }
          break;
        case "session.error": {
          const name = p.error?.name || "unknown error";
          if (p.sessionID && parents.has(p.sessionID)) break;
          if (name === "MessageAbortedError") break;
          failed = true;
          attention("StopFailure", p.sessionID || current, { error: name });
          break;
        }
        case "session.idle":
          if (parents.has(p.sessionID)) break;
          if (!failed) attention("Stop", p.sessionID);
          failed = false;
          break;
        case "message.updated": {
          const info = p.info || {};
          roles.set(info.id, info.role);
          // only recent messages still get parts: a long session keeps the newest
          if (roles.size > ROLES_KEPT) roles.delete(roles.keys().next().value);
          if (info.role === "assistant" && info.time?.completed) {
            flush(info.id, true);
            record(info.sessionID, { type: "message", info: { ...info, summary: undefined } });
          }
          break;
        }
        case "message.part.updated": {
          const part = p.part || {};
          const role = roles.get(part.messageID);
          if (parents.has(part.sessionID)) break; // a subagent's words stay in OpenCode
          if (part.synthetic || !["text", "reasoning", "tool"].includes(part.type)) break;
          if (recorded.has(part.id)) break; // recorded once, when it finished
          const done =
            part.type === "tool"
              ? ["completed", "error"].includes(part.state?.status)
              : role === "user" || part.time?.end;
          if (!began.has(part.messageID)) began.set(part.messageID, []);
          const parts = began.get(part.messageID);
          let here = parts.find((x) => x.id === part.id);
          if (!here) parts.push((here = { id: part.id, sessionID: part.sessionID, entry: null }));
          if (done) here.entry = { type: "part", role, part };
          flush(part.messageID);
          break;
        }
      }
    },
  };
};
