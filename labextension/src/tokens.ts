/**
 * What the plugins of jupyter-agents share: the sessions model token and the ids of
 * the plugins, commands and settings they refer to.
 */
import { ServerConnection } from '@jupyterlab/services';
import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import { IPendingRequest, ISession, IShare, SessionMode } from './api';

/** Counts shown in the status bar. */
export interface ICounts {
  running: number;
  interrupted: number;
  orphaned: number;
  /** Running agents waiting for input, asking permission or stopped on an error. */
  needsYou: number;
  /** Running agents at work on a turn. */
  working: number;
}

/**
 * The sessions as this browser knows them, kept up to date from the server's session
 * events (see `model.ts` for how).
 */
export interface IAgentSessions {
  /** The server settings every request of the extension uses. */
  readonly serverSettings: ServerConnection.ISettings;

  /** Emitted when the sessions (or any field, the shares, `offline`) changed. */
  readonly changed: ISignal<IAgentSessions, void>;

  /** Emitted with the server's start time when a (re)started server is first seen. */
  readonly serverStarted: ISignal<IAgentSessions, string>;

  /** Emitted with a session's id when its agent's conversation files grew (its turns). */
  readonly turnsGrew: ISignal<IAgentSessions, string>;

  /**
   * Emitted when the event stream opens (again): what the server sent while it was
   * closed (a `turns` event, say) was missed, so what follows such events reads again.
   */
  readonly streamOpened: ISignal<IAgentSessions, void>;

  /** The sessions; undefined before the first answer. */
  readonly sessions: ISession[] | undefined;

  /** The live read-only shares of the sessions (none before the first answer). */
  readonly shares: IShare[];

  /** The agents' pending permission requests, oldest first (none before the first answer). */
  readonly requests: IPendingRequest[];

  /** When the server we talk to started (ISO 8601), once known. */
  readonly started: string | undefined;

  /** The last request failed (the server is probably restarting). */
  readonly offline: boolean;

  readonly counts: ICounts;

  /** The kinds of session the server can start (a default guess until it said). */
  readonly kinds: string[];

  /** Resolves with the kinds once the server said (or did not answer). */
  readonly kindsReady: Promise<string[]>;

  /**
   * Why a kind cannot start in `mode` (default: terminal; its program, or for `acp`
   * its ACP agent, is not installed), or undefined if it can. A kind with no ACP mode
   * cannot start in it: see `modes`.
   */
  unavailable(kind: string, mode?: SessionMode): string | undefined;

  /** The modes a kind's sessions can start in (terminal until the server said). */
  modes(kind: string): SessionMode[];

  /**
   * Why this server cannot share sessions read-only (the words a grant would be
   * refused with), or null when it can; undefined until the server said.
   */
  readonly sharingRefused: string | null | undefined;

  /** Resolves after the first snapshot (or its failure). */
  readonly ready: Promise<void>;

  /** Take a snapshot now (after an action of ours) and wait for it. */
  refresh(): Promise<void>;
}

export const IAgentSessions = new Token<IAgentSessions>(
  'jupyter-agents:IAgentSessions',
  'The jupyter-agents sessions, kept current by server events.'
);

/** The translation domain of the extension's strings. */
export const DOMAIN = 'jupyter_agents';

export namespace PluginIDs {
  export const sessions = 'jupyter-agents:sessions';
  export const launcher = 'jupyter-agents:launcher';
  export const panel = 'jupyter-agents:panel';
  export const running = 'jupyter-agents:running';
  export const status = 'jupyter-agents:status';
  export const interrupted = 'jupyter-agents:interrupted';
  export const restartNotification = 'jupyter-agents:restart-notification';
  export const attention = 'jupyter-agents:attention';
  export const replay = 'jupyter-agents:replay';
  export const clipboard = 'jupyter-agents:clipboard';
  export const sizing = 'jupyter-agents:sizing';
  export const terminalLink = 'jupyter-agents:terminal-link';
  export const titles = 'jupyter-agents:titles';
  export const conversation = 'jupyter-agents:conversation';
  export const worktree = 'jupyter-agents:worktree';
  export const devices = 'jupyter-agents:devices';
}

export namespace CommandIDs {
  export const showPanel = 'jupyter-agents:show-panel';
  export const create = 'jupyter-agents:new';
  export const open = 'jupyter-agents:open';
  export const kill = 'jupyter-agents:kill';
  export const killAll = 'jupyter-agents:kill-all';
  export const adopt = 'jupyter-agents:adopt';
  export const restore = 'jupyter-agents:restore';
  export const restoreAll = 'jupyter-agents:restore-all';
  export const refresh = 'jupyter-agents:refresh';
  export const replay = 'jupyter-agents:replay';
  export const share = 'jupyter-agents:share';
  export const revokeShare = 'jupyter-agents:revoke-share';
  export const rename = 'jupyter-agents:rename';
  export const limit = 'jupyter-agents:limit';
  export const renameTerminal = 'jupyter-agents:rename-terminal';
  export const conversation = 'jupyter-agents:conversation';
  export const turns = 'jupyter-agents:turns';
  export const fresh = 'jupyter-agents:fresh';
  export const review = 'jupyter-agents:review';
  export const notifications = 'jupyter-agents:notifications';
}
