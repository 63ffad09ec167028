/**
 * The sessions as the browser sees them: a modest poll of the server, paused while
 * the page is hidden, emitting `changed` only when something changed.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { ISession, listSessions, serverStarted } from './api';

/** How often the sessions are fetched while the page is visible (ms). */
export const POLL_INTERVAL = 1000;

/** Counts shown in the status bar. */
export interface ICounts {
  running: number;
  interrupted: number;
  orphaned: number;
}

export class SessionsModel {
  constructor() {
    this._poll = new Poll({
      auto: true,
      factory: () => this._fetch(),
      frequency: { interval: POLL_INTERVAL, backoff: true, max: 4000 },
      name: 'jupyter-agents:sessions',
      standby: 'when-hidden'
    });
  }

  /** Emitted when the list of sessions (or any field) changed. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted with the server's start time when a (re)started server is first seen. */
  get serverStarted(): ISignal<this, string> {
    return this._serverStarted;
  }

  /** The sessions, oldest first; undefined before the first answer. */
  get sessions(): ISession[] | undefined {
    return this._sessions;
  }

  /** When the server we talk to started (ISO 8601), once known. */
  get started(): string | undefined {
    return this._started;
  }

  /** The last fetch failed (the server is probably restarting). */
  get offline(): boolean {
    return this._offline;
  }

  get counts(): ICounts {
    const counts = { running: 0, interrupted: 0, orphaned: 0 };
    for (const s of this._sessions ?? []) {
      if (s.status in counts) {
        counts[s.status as keyof ICounts]++;
      }
    }
    return counts;
  }

  /** Fetch now (after an action), instead of waiting for the next tick. */
  async refresh(): Promise<void> {
    await this._poll.refresh();
    await this._poll.tick;
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _fetch(): Promise<void> {
    let sessions: ISession[];
    try {
      if (this._started === undefined || this._offline) {
        const started = await serverStarted();
        if (started !== this._started) {
          this._started = started;
          this._startSeen = false;
        }
      }
      sessions = await listSessions();
    } catch (error) {
      if (!this._offline) {
        this._offline = true;
        this._changed.emit();
      }
      throw error;
    }
    const text = JSON.stringify(sessions);
    const wasOffline = this._offline;
    this._offline = false;
    if (text !== this._text || wasOffline) {
      this._text = text;
      this._sessions = sessions;
      this._changed.emit();
    }
    if (!this._startSeen && this._started !== undefined) {
      this._startSeen = true;
      this._serverStarted.emit(this._started);
    }
  }

  private _poll: Poll;
  private _sessions: ISession[] | undefined;
  private _text = '';
  private _started: string | undefined;
  private _startSeen = false;
  private _offline = false;
  private _changed = new Signal<this, void>(this);
  private _serverStarted = new Signal<this, string>(this);
}
