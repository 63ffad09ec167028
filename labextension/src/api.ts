/**
 * The jupyter_agents REST API (`/api/agents/...`) as typed calls.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** A session's state (DESIGN.md section 7). */
export type Status =
  'running' | 'exited' | 'interrupted' | 'orphaned' | 'killed';

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
}

/** One kind of session the server can start (`GET /api/agents/kinds`). */
export interface IKind {
  name: string;
  command: string[] | string;
}

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

const settings = (): ServerConnection.ISettings =>
  ServerConnection.makeSettings();

/**
 * One request to the server; the parsed JSON body (undefined for 204).
 * Throws `AgentsError` with the server's message for error statuses.
 */
export async function request<T>(
  path: string,
  init: RequestInit = {}
): Promise<T> {
  const s = settings();
  const url = URLExt.join(s.baseUrl, path);
  const response = await ServerConnection.makeRequest(url, init, s);
  const text = await response.text();
  let body: any = undefined;
  if (text) {
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
  }
  if (!response.ok) {
    const message =
      (body && (body.message || body.reason)) ||
      `${response.status} ${response.statusText}`;
    throw new AgentsError(String(message), response.status);
  }
  return body as T;
}

export const listSessions = (): Promise<ISession[]> =>
  request<ISession[]>('api/agents/sessions');

export const listKinds = (): Promise<IKind[]> =>
  request<IKind[]>('api/agents/kinds');

export const createSession = (kind: string, cwd?: string): Promise<ISession> =>
  request<ISession>('api/agents/sessions', {
    method: 'POST',
    body: JSON.stringify(cwd ? { kind, cwd } : { kind })
  });

export const killSession = (id: string): Promise<void> =>
  request<void>(`api/agents/sessions/${id}`, { method: 'DELETE' });

export const adoptSession = (id: string): Promise<ISession> =>
  request<ISession>(`api/agents/sessions/${id}/adopt`, { method: 'POST' });

export const restoreSession = (id: string): Promise<ISession> =>
  request<ISession>(`api/agents/sessions/${id}/restore`, { method: 'POST' });

export const restoreAll = (): Promise<IRestoreAllResult> =>
  request<IRestoreAllResult>('api/agents/restore', {
    method: 'POST',
    body: '{}'
  });

export const deleteTerminal = (name: string): Promise<void> =>
  request<void>(`api/terminals/${name}`, { method: 'DELETE' });

/** `GET /api/status`: when this server process started. */
export const serverStarted = async (): Promise<string> =>
  (await request<{ started: string }>('api/status')).started;

/** `POST /api/agents/reconcile`: bring the records in line with the backend now. */
export const reconcile = (): Promise<unknown> =>
  request('api/agents/reconcile', { method: 'POST', body: '{}' });

/** One reconcile decision (`GET /api/agents/reconcile`). */
export interface IReconcileAction {
  kind: 'adopt' | 'exit' | 'interrupt' | 'orphan';
  session_id: string;
  name: string;
}

/** The reconcile report; `boot` (the decisions at server start) when the server keeps it. */
export interface IReconcileReport {
  time: string | null;
  actions: IReconcileAction[];
  boot?: { time: string | null; actions: IReconcileAction[] };
}

export const reconcileReport = (): Promise<IReconcileReport> =>
  request<IReconcileReport>('api/agents/reconcile');
