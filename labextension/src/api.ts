/**
 * The jupyter_agents REST API (`/api/agents/...`) as typed calls. Each takes the
 * application's `serviceManager.serverSettings`, like `@jupyterlab/services` does.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A session's state (docs/design.md, "Reconcile"). */
export type Status =
  'running' | 'exited' | 'interrupted' | 'orphaned' | 'killed';

/**
 * What an agent session needs from its user, as its CLI reported it (null for shells
 * and kinds that do not report). `waiting`, `permission` and `error` need the user.
 */
export type Attention =
  'ready' | 'working' | 'waiting' | 'permission' | 'error' | 'unknown';

/** The session model of `GET /api/agents/sessions`. */
export interface ISession {
  id: string;
  name: string;
  kind: string;
  status: Status;
  backend: string;
  cwd: string | null;
  argv: string[];
  pid: number | null;
  created: string;
  last_activity: string;
  exit_code: number | null;
  conversation_id: string | null;
  ambiguous: boolean;
  reason: string | null;
  /** Absent from servers older than the attention feature. */
  attention?: Attention | null;
  /** When it started needing that (ISO 8601). */
  attention_since?: string | null;
  /** Why, for `error` (e.g. `authentication_failed`). */
  attention_reason?: string | null;
  /** How we know: `hooks`, `notify` (exact) or `heuristic`. */
  attention_source?: string | null;
  /**
   * The title a person gave it, else the last one its program set (OSC 0/2), as plain
   * text; null: none. Absent from servers older than titles.
   */
  title?: string | null;
  /** Where `title` comes from: `user` (a person), `program`, or null (no title). */
  title_source?: 'user' | 'program' | null;
  /**
   * What an agent session spent: tokens by kind, the estimated cost, the part spent
   * while nobody watched, the unattended limit; null for shells. Absent from servers
   * older than cost tracking, and from the replies of POST.
   */
  usage?: IUsage | null;
  /**
   * Where a worktree session works: a git worktree of `repo` on its own `branch`, made
   * from `base`; `ended` says how it was finished (`merged <commit>`, `discarded`).
   * Null for other sessions; absent from servers older than worktrees.
   */
  worktree?: IWorktree | null;
  /**
   * `terminal`: its program's own screen, typed into; `acp`: an Agent Client Protocol
   * agent behind a proxy, which takes prompts (`sendPrompt`) and has no terminal to
   * type into. Absent from servers older than ACP sessions (terminal).
   */
  mode?: SessionMode;
}

/** A worktree session's worktree (`worktree` of the session model). */
export interface IWorktree {
  repo: string;
  path: string;
  branch: string;
  base: string;
  base_commit: string;
  folder: string;
  ended: string | null;
}

/** One file a worktree session changed (`git`'s letter in `status`). */
export interface IChangedFile {
  path: string;
  status: string;
  committed: boolean;
  old_path: string | null;
}

/** `GET /api/agents/sessions/<id>/worktree`: what a worktree session did. */
export interface IWorktreeReview {
  branch: string;
  base: string;
  path: string;
  ahead: number;
  behind: number;
  files: IChangedFile[];
  files_total: number;
}

/**
 * `GET /api/agents/sessions/<id>/worktree/file?path=`: one changed file, before and now:
 * a notebook as nbdime's `{base, diff}`, text as two texts, an image as two base64
 * pictures; a binary or large file by size only.
 */
export interface IWorktreeFile extends IChangedFile {
  kind: 'notebook' | 'text' | 'image' | 'binary' | 'large';
  before_size: number | null;
  after_size: number | null;
  base?: any;
  diff?: any[];
  before?: string | null;
  after?: string | null;
  mime?: string;
  /** Why it is not shown as its kind would be (a notebook nbdime took too long on). */
  note?: string;
}

/** Tokens by kind (disjoint: `total` is their sum). */
export interface ITokens {
  input: number;
  output: number;
  cache_creation: number;
  cache_read: number;
  total: number;
}

/** An unattended limit: any of tokens, cost (US dollars), seconds of work. */
export interface ILimit {
  tokens?: number;
  cost?: number;
  seconds?: number;
}

/** A session's usage (rest-api.yml `Usage`). */
export interface IUsage {
  tokens: ITokens;
  /** Estimated US dollars; null when no model of it has a price. */
  cost: number | null;
  /** Models without a price: their tokens are counted, not priced. */
  unknown_models: string[];
  models: { [model: string]: { tokens: ITokens; cost: number | null } };
  conversations: {
    conversation_id: string;
    tokens: ITokens;
    cost: number | null;
    unknown_models: string[];
  }[];
  /** Spent while no viewer that can type was connected. */
  unattended: { tokens: ITokens; cost: number | null; seconds: number };
  /** Spent unattended since the last human input (`since`). */
  allowance: {
    since: string | null;
    tokens: ITokens;
    cost: number;
    seconds: number;
  } | null;
  /** The unattended limit that applies (null: none), and where it comes from. */
  limit: ILimit | null;
  limit_source: 'session' | 'config' | null;
  /** When the limit last interrupted it in this allowance, and why. */
  limit_reached: string | null;
  limit_reason: string | null;
  watched: boolean;
  skipped_records: number;
}

/**
 * What a session is called: its title, else its terminal name. A program's title loses
 * the status glyphs TUIs put before it (Claude Code's `✳`, braille spinners), which
 * change while it works: one session keeps one name.
 */
export function displayName(
  s: Pick<ISession, 'name' | 'title' | 'title_source'>
): string {
  const title =
    s.title && s.title_source !== 'user'
      ? s.title.replace(/^[\p{So}\p{Sm}\u2800-\u28ff·•*\s]+/u, '')
      : s.title;
  return title || s.name;
}

/** One kind of session the server can start (`GET /api/agents/kinds`). */
export interface IKind {
  name: string;
  command: string[] | string;
  /** Whether its program was found (absent from older servers: assume it was). */
  available?: boolean;
  /** Why it cannot start and how to install it, when it cannot. */
  unavailable?: string;
  /** What people call it (a product name); absent: its name. */
  label?: string;
  /** Its icon: a letter on a coloured disc (absent: the generic agent icon). */
  badge?: { letter: string; color: string };
  /** The modes its sessions can start in (absent from older servers: terminal). */
  modes?: SessionMode[];
  /** Why its ACP agent cannot start and how to install it, when it cannot. */
  acp_unavailable?: string;
}

/** How a person works with a session (`mode` of the session model). */
export type SessionMode = 'terminal' | 'acp';

/** `POST /api/agents/restore`. */
export interface IRestoreAllResult {
  restored: ISession[];
  failed: { id: string; error: string }[];
}

/** An error answer of the server, with the message it gave. */
export class AgentsError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
  }
}

type Settings = ServerConnection.ISettings;

/**
 * One request to the server; the body as text. Throws `AgentsError` with the
 * server's message for error statuses.
 */
async function requestText(
  settings: Settings,
  path: string,
  init: RequestInit = {}
): Promise<string> {
  const url = URLExt.join(settings.baseUrl, path);
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  if (!response.ok) {
    let body: any = undefined;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON: the status line says it
    }
    const message =
      (body && (body.message || body.reason)) ||
      `${response.status} ${response.statusText}`;
    throw new AgentsError(String(message), response.status);
  }
  return text;
}

/**
 * One request to the server; the parsed JSON body (undefined for 204).
 * Throws `AgentsError` with the server's message for error statuses.
 */
export async function request<T>(
  settings: Settings,
  path: string,
  init: RequestInit = {}
): Promise<T> {
  const text = await requestText(settings, path, init);
  if (!text) {
    return undefined as T;
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    return text as T;
  }
}

export const listSessions = (s: Settings): Promise<ISession[]> =>
  request<ISession[]>(s, 'api/agents/sessions');

export const listKinds = (s: Settings): Promise<IKind[]> =>
  request<IKind[]>(s, 'api/agents/kinds');

/** `GET /api/agents/sharing`: whether this server can share read-only, and why not. */
export interface ISharing {
  available: boolean;
  reason: string | null;
}

export const getSharing = (s: Settings): Promise<ISharing> =>
  request<ISharing>(s, 'api/agents/sharing');

/**
 * `POST /api/agents/sessions`: start a session of `kind` in `cwd` (the server's root
 * when not given); with `worktree`, in a new git worktree of `cwd`'s repository (a
 * folder outside one is an `AgentsError`, 409, saying so); in `mode` (`acp`: the
 * kind's ACP agent; a kind without one is a 400 saying so).
 */
export const createSession = (
  s: Settings,
  kind: string,
  cwd?: string,
  worktree?: boolean,
  mode: SessionMode = 'terminal'
): Promise<ISession> =>
  request<ISession>(s, 'api/agents/sessions', {
    method: 'POST',
    body: JSON.stringify({
      kind,
      ...(cwd ? { cwd } : {}),
      ...(worktree ? { worktree: true } : {}),
      ...(mode !== 'terminal' ? { mode } : {})
    })
  });

export const reviewWorktree = (
  s: Settings,
  id: string
): Promise<IWorktreeReview> =>
  request<IWorktreeReview>(s, `api/agents/sessions/${id}/worktree`);

export const worktreeFile = (
  s: Settings,
  id: string,
  path: string
): Promise<IWorktreeFile> =>
  request<IWorktreeFile>(
    s,
    `api/agents/sessions/${id}/worktree/file?path=${encodeURIComponent(path)}`
  );

/**
 * `POST /api/agents/sessions/<id>/worktree {action, confirm}`: merge the branch into its
 * base, or discard it; 409 (an `AgentsError` with the server's words) while it runs or
 * has uncommitted changes unless `confirm`, or when the merge would conflict.
 */
export const finishWorktree = (
  s: Settings,
  id: string,
  action: 'merge' | 'discard',
  confirm: boolean
): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}/worktree`, {
    method: 'POST',
    body: JSON.stringify({ action, confirm })
  });

/**
 * `DELETE /api/agents/sessions/<id>`: end a session that has no terminal (an orphan);
 * a running one is a terminal, ended through `serviceManager.terminals.shutdown`.
 */
export const killSession = (s: Settings, id: string): Promise<void> =>
  request<void>(s, `api/agents/sessions/${id}`, { method: 'DELETE' });

/**
 * `PATCH /api/agents/sessions/<id>` `{title}`: give a session a person's title (null
 * or empty: clear it, so the program's shows again). A title with control characters
 * or over 256 characters is an `AgentsError` (400) with the server's message.
 */
export const renameSession = (
  s: Settings,
  id: string,
  title: string | null
): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}`, {
    method: 'PATCH',
    body: JSON.stringify({ title })
  });

/**
 * `PATCH /api/agents/sessions/<id>` `{unattended_limit}`: a session's own unattended
 * limit (`{}`: none for it; null: the server's `AgentsApp.unattended_limit`). A bad one
 * is an `AgentsError` (400) with the server's message.
 */
export const setUnattendedLimit = (
  s: Settings,
  id: string,
  limit: ILimit | null
): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}`, {
    method: 'PATCH',
    body: JSON.stringify({ unattended_limit: limit })
  });

export const adoptSession = (s: Settings, id: string): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}/adopt`, { method: 'POST' });

export const restoreSession = (s: Settings, id: string): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}/restore`, {
    method: 'POST'
  });

export const restoreAll = (s: Settings): Promise<IRestoreAllResult> =>
  request<IRestoreAllResult>(s, 'api/agents/restore', {
    method: 'POST',
    body: '{}'
  });

/** One line of a transcript (or an agent's conversation) that matches a search. */
export interface ISearchHit {
  /** The session's id. */
  session: string;
  name: string;
  kind: string;
  status: Status;
  /** `conversation`: the agent's own conversation log, not the terminal transcript. */
  source: 'transcript' | 'conversation';
  /** Byte offset of the line in the transcript. */
  offset: number | null;
  /** When it was written (ISO 8601). */
  time: string | null;
  /** Seconds from the start of the session's replay to the line (transcript hits). */
  at: number | null;
  /** The line as plain text (escape sequences removed). */
  line: string;
  /** Where the match is in `line`: [start, end) in characters. */
  match: [number, number];
}

/** A page of search results; `next` is the cursor of the next page. */
export interface ISearchResult {
  hits: ISearchHit[];
  next: string | null;
  /** Transcript bytes read. */
  scanned: number;
}

export interface ISearchQuery {
  q: string;
  /** `q` is a regular expression (RE2 syntax: no backreferences or lookaround), not plain text. */
  regex?: boolean;
  /** Match case (the default ignores it). */
  case?: boolean;
  /** The `next` of the previous page. */
  cursor?: string;
}

/**
 * `GET /api/agents/search`: the lines of every session's transcript and agent
 * conversation that match. A bad regular expression is an `AgentsError` (400) with
 * the server's message.
 */
export const searchTranscripts = (
  s: Settings,
  query: ISearchQuery
): Promise<ISearchResult> => {
  const params: Record<string, string> = { q: query.q };
  if (query.regex) {
    params.regex = 'true';
  }
  if (query.case) {
    params.case = 'true';
  }
  if (query.cursor) {
    params.cursor = query.cursor;
  }
  return request<ISearchResult>(
    s,
    'api/agents/search' + URLExt.objectToQueryString(params)
  );
};

/**
 * `GET /api/agents/sessions/<id>/export?format=cast`: the session's transcript with
 * its timing, as asciicast v2 text (a header line, then `[t, "o", data]` lines).
 */
export const exportCast = (s: Settings, id: string): Promise<string> =>
  requestText(s, `api/agents/sessions/${id}/export?format=cast`);

/**
 * A read-only share of a session (`/api/agents/shares`): `viewer` (a user name; null:
 * anyone the server lets in) may watch it until `expires`, unless revoked first.
 */
export interface IShare {
  id: string;
  session_id: string;
  viewer: string | null;
  created: string;
  expires: string;
  revoked: string | null;
  /** The users watching through it now (`GET` only). */
  watchers?: string[];
}

/** A new share (`POST /api/agents/shares`), with its links. */
export interface INewShare extends IShare {
  /** The watch page (a path on this server). */
  url: string;
  /** On JupyterHub: a share-code link that gives access to the server, then the page. */
  accept_url?: string;
  /** On JupyterHub: why there is no `accept_url`. */
  hub_error?: string;
}

/** A pending permission request of an agent session (`GET /api/agents/requests`). */
export interface IPendingRequest {
  id: string;
  session_id: string;
  name: string;
  kind: string;
  title: string | null;
  /** The tool the agent asks to use, e.g. `Bash`. */
  tool: string;
  /** What it will run (shell tools), else null. */
  command: string | null;
  /** Why, in the agent's words, else null. */
  description: string | null;
  /** What else the request shows: `file_path`, `old_string`, `new_string`, `url`... */
  input: Record<string, string>;
  /** The CLI's own "allow from now on" choices. */
  suggestions: { index: number; label: string }[];
  asked: string;
  until: string;
  /** The CLI shows no dialog while it waits here (Codex): it does at `until`. */
  falls_back_to_dialog: boolean;
}

/** `GET /api/agents/requests`: the pending permission requests, oldest first. */
export const listRequests = (s: Settings): Promise<IPendingRequest[]> =>
  request<IPendingRequest[]>(s, 'api/agents/requests');

/** How a person answers a permission request. */
export interface IAnswer {
  decision: 'allow' | 'deny';
  /** For deny: what the agent is told. */
  message?: string;
  /** For allow: the index of one of its `suggestions`. */
  suggestion?: number;
}

/**
 * `POST /api/agents/requests/<id>`: answer a pending request, once (an `AgentsError`
 * with the server's words when it ended meanwhile, 404, or was answered, 409).
 */
export const answerRequest = (
  s: Settings,
  id: string,
  answer: IAnswer
): Promise<{ decision: string }> =>
  request<{ decision: string }>(s, `api/agents/requests/${id}`, {
    method: 'POST',
    body: JSON.stringify(answer)
  });

/** `GET /api/agents/shares`: the live shares (neither revoked nor expired). */
export const listShares = (s: Settings): Promise<IShare[]> =>
  request<IShare[]>(s, 'api/agents/shares');

/**
 * `POST /api/agents/shares`: let `viewer` (omitted: anyone the server lets in) watch a
 * running session read-only for `expiresIn` seconds. A server that cannot share answers
 * 409 (an `AgentsError` with the server's message: what it needs).
 */
export const createShare = (
  s: Settings,
  session: string,
  expiresIn: number,
  viewer?: string
): Promise<INewShare> =>
  request<INewShare>(s, 'api/agents/shares', {
    method: 'POST',
    body: JSON.stringify(
      viewer
        ? { session, viewer, expires_in: expiresIn }
        : { session, expires_in: expiresIn }
    )
  });

/** `DELETE /api/agents/shares/<id>`: revoke; its viewers are disconnected at once. */
export const revokeShare = (s: Settings, id: string): Promise<void> =>
  request<void>(s, `api/agents/shares/${id}`, { method: 'DELETE' });

/** `GET /api/status`: when this server process started. */
export const serverStarted = async (s: Settings): Promise<string> =>
  (await request<{ started: string }>(s, 'api/status')).started;

/** `POST /api/agents/reconcile`: bring the records in line with the backend now. */
export const reconcile = (s: Settings): Promise<unknown> =>
  request(s, 'api/agents/reconcile', { method: 'POST', body: '{}' });

/** One reconcile decision (`GET /api/agents/reconcile`). */
export interface IReconcileAction {
  kind: 'reattach' | 'exit' | 'interrupt' | 'orphan' | 'release';
  session_id: string;
  name: string;
}

/** The reconcile report; `boot` (the decisions at server start) when the server keeps it. */
export interface IReconcileReport {
  time: string | null;
  actions: IReconcileAction[];
  boot?: { time: string | null; actions: IReconcileAction[] };
  /** The sessions this server run restored in place when a tab opened on their name. */
  restored_on_open?: string[];
}

export const reconcileReport = (s: Settings): Promise<IReconcileReport> =>
  request<IReconcileReport>(s, 'api/agents/reconcile');

/** The `schema_id` of the session lifecycle events on `/api/events/subscribe`. */
export const SESSION_EVENT =
  'https://events.jupyter.org/jupyter_agents/session/v1';

/** One session event as the events websocket delivers it. */
export interface ISessionEvent {
  schema_id: typeof SESSION_EVENT;
  action:
    | 'created'
    | 'status'
    | 'conversation'
    | 'attention'
    | 'activity'
    | 'updated'
    | 'shared'
    | 'title'
    | 'usage'
    | 'request'
    | 'turns';
  session_id: string;
  name: string;
  kind: string;
  status: Status;
  previous_status: string | null;
  conversation_id: string | null;
  reason: string | null;
  attention?: Attention | null;
  attention_since?: string | null;
  attention_reason?: string | null;
  /** For `usage`: the session's usage, as in its REST model. */
  usage?: IUsage | null;
}

/**
 * `GET /api/agents/sessions/<id>/conversation?format=md`: an agent session's
 * conversations as Markdown (turns, tool calls summarised, timestamps). A session
 * without a conversation file is an `AgentsError` (404) with the server's message.
 */
export const conversationMarkdown = (
  s: Settings,
  id: string
): Promise<string> =>
  requestText(s, `api/agents/sessions/${id}/conversation?format=md`);

/**
 * `POST /api/agents/sessions/<id>/fresh`: a new session of an ended one's kind in its
 * folder, its terminal showing the end of the old transcript first; the new model.
 */
export const startFresh = (s: Settings, id: string): Promise<ISession> =>
  request<ISession>(s, `api/agents/sessions/${id}/fresh`, { method: 'POST' });

/** One turn event (`jupyter_agents/event_schemas/turn/v1.yaml`). */
export interface ITurnEvent {
  id: string;
  type:
    | 'user_message'
    | 'agent_message'
    | 'thought'
    | 'tool_call'
    | 'tool_call_update'
    | 'plan'
    | 'compaction'
    | 'turn_end'
    | 'other';
  at: string | null;
  text?: string;
  tool_call_id?: string;
  tool?: string;
  tool_kind?: string;
  title?: string;
  status?: 'pending' | 'in_progress' | 'completed' | 'failed';
  input?: unknown;
  output?: string;
  locations?: { path: string; line?: number }[];
  entries?: {
    id?: string;
    content?: string;
    status: 'pending' | 'in_progress' | 'completed';
  }[];
  partial?: boolean;
  subagent?: boolean;
  raw_type?: string;
  cut?: boolean;
  /** A piece of a message or thought streamed over ACP: consecutive ones make one. */
  chunk?: boolean;
  /** Why an ACP session's turn ended (`turn_end`): end_turn, cancelled, refusal... */
  stop_reason?: string;
}

/** A page of turn events (`GET /api/agents/sessions/<id>/turns`). */
export interface ITurnPage {
  events: ITurnEvent[];
  /** Where the next page starts: pass it as `after`. */
  next: string;
  /** The files hold more than this page now. */
  more: boolean;
  /** `after` was stale (the CLI rewrote its file): these events start over. */
  reset: boolean;
  /**
   * When the session's terminal recording starts (ISO 8601), the 0 s of its replay:
   * an event's place in the replay is its `at` minus this; null with no recording.
   */
  replay_start: string | null;
}

/**
 * The most bytes of a request body the server reads (`MAX_BODY` of
 * `jupyter_agents/server/params.py`): a longer one is refused with a 400.
 */
export const MAX_BODY = 64 * 1024;

/** The body `sendPrompt` sends for `text` (the server counts its UTF-8 bytes). */
export const promptBody = (text: string): string => JSON.stringify({ text });

/** How many bytes `text` takes in UTF-8 (what a request body is counted in). */
export const utf8Bytes = (text: string): number =>
  new TextEncoder().encode(text).length;

/**
 * `POST /api/agents/sessions/<id>/prompt {text}`: send an ACP session's agent a prompt;
 * what it does shows in the session's turns. An `AgentsError` with the server's words
 * for a terminal session, one not running or not ready (409), or no text or a body
 * over `MAX_BODY` bytes (400).
 */
export const sendPrompt = (
  s: Settings,
  id: string,
  text: string
): Promise<void> =>
  request<void>(s, `api/agents/sessions/${id}/prompt`, {
    method: 'POST',
    body: promptBody(text)
  });

/** `POST /api/agents/sessions/<id>/cancel`: cancel an ACP session's turn. */
export const cancelTurn = (s: Settings, id: string): Promise<void> =>
  request<void>(s, `api/agents/sessions/${id}/cancel`, { method: 'POST' });

/** `GET /api/agents/sessions/<id>/turns?after=`: the turn events after a position. */
export const turnPage = (
  s: Settings,
  id: string,
  after?: string
): Promise<ITurnPage> =>
  request<ITurnPage>(
    s,
    `api/agents/sessions/${id}/turns?limit=500${
      after ? `&after=${encodeURIComponent(after)}` : ''
    }`
  );
