/**
 * The sessions (and their read-only shares) as the browser sees them: pushed by the
 * server, not polled.
 *
 * How it stays current:
 * - One REST snapshot (`GET /api/agents/sessions` and `GET /api/agents/shares`, plus
 *   `GET /api/status` for the server's start time) each time the event stream opens
 *   (a reopened stream is a reconnect, after which events may have been missed and
 *   the server has often restarted), then a new snapshot after each session event
 *   (debounced 100 ms, so a burst costs one request). `activity` events only move
 *   `last_activity` here. The attention fields every event carries are applied at
 *   once (a badge should not wait for a request); the snapshot follows as for any
 *   event. A `shared` event (a share made, revoked or expired, a viewer came or went)
 *   is one of them. A `usage` event's usage is applied at once and takes no snapshot;
 *   a snapshot requested before it arrived (the server may have read the older usage
 *   for it) does not undo it. Nothing is requested while nothing happens.
 * - The stream is the extension's own connection (`events.ts`), which says when its
 *   state changes. While it is not open (after a short grace while the first socket
 *   connects) the fallback poll takes one snapshot every `pollInterval` seconds, until
 *   the stream opens again.
 */
import { Event, ServerConnection } from '@jupyterlab/services';
import { Debouncer, Poll, Throttler } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import {
  IPendingRequest,
  ISession,
  ISessionEvent,
  IShare,
  getSharing,
  listKinds,
  listRequests,
  listSessions,
  listShares,
  serverStarted,
  SESSION_EVENT,
  SessionMode
} from './api';
import { needsYou } from './attention';
import { describeKinds } from './icons';
import { IEventStream, StreamState } from './events';
import { IAgentSessions, ICounts } from './tokens';

/** Default seconds between snapshots while the event stream is down. */
export const DEFAULT_POLL_INTERVAL = 10;
/** A burst of events within this many ms costs one snapshot. */
const EVENT_DEBOUNCE = 100;
/** How long a first socket may take to connect before the fallback poll starts (ms). */
const CONNECT_GRACE = 3000;
/** Re-render for `activity` events at most this often (ms). */
const ACTIVITY_THROTTLE = 1000;

/** Until the server says which kinds it has (`GET /api/agents/kinds`). */
const DEFAULT_KINDS = ['shell'];

export class SessionsModel implements IAgentSessions {
  constructor(options: SessionsModel.IOptions) {
    this.serverSettings = options.serverSettings;
    this._events = options.events;
    this._events.received.connect(this._onEvent, this);
    this._events.stateChanged.connect(this._onState, this);
    this._snapshotSoon = new Debouncer(
      () => this._fetch(false),
      EVENT_DEBOUNCE
    );
    this._activity = new Throttler(() => this._changed.emit(), {
      limit: ACTIVITY_THROTTLE,
      edge: 'trailing'
    });
    const interval = this._interval(
      options.pollInterval ?? DEFAULT_POLL_INTERVAL
    );
    this._fallback = new Poll({
      auto: false,
      factory: () => this._fetch(false),
      frequency: { interval, backoff: false, max: interval },
      name: 'jupyter-agents:fallback',
      standby: options.standby ?? 'when-hidden'
    });
    this._ready = new Promise(resolve => (this._resolveReady = resolve));
    // the first socket may take a moment to open: poll only if it has not by then
    this._grace = window.setTimeout(() => {
      this._graceOver = true;
      if (this._events.state !== 'open') {
        this._onState(this._events, this._events.state);
      }
    }, CONNECT_GRACE);
    this._onState(this._events, this._events.state);
    this._kindsReady = listKinds(this.serverSettings).then(
      found => {
        describeKinds(found);
        this._changed.emit(); // rows drawn before now get their kind's icon and label
        this._unavailable = new Map(
          found
            .filter(k => k.available === false)
            .map(k => [k.name, k.unavailable ?? ''])
        );
        this._modes = new Map(
          found.map(k => [k.name, k.modes ?? ['terminal']])
        );
        this._acpUnavailable = new Map(
          found
            .filter(k => k.acp_unavailable)
            .map(k => [k.name, k.acp_unavailable ?? ''])
        );
        return (this._kinds = found.map(k => k.name));
      },
      () => this._kinds
    );
    void getSharing(this.serverSettings).then(
      answer => {
        this._sharingRefused = answer.available ? null : (answer.reason ?? '');
        this._changed.emit();
      },
      () => undefined // an older server, or not the owner: Share stays hidden
    );
  }

  readonly serverSettings: ServerConnection.ISettings;

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get serverStarted(): ISignal<this, string> {
    return this._serverStarted;
  }

  get turnsGrew(): ISignal<this, string> {
    return this._turnsGrew;
  }

  get streamOpened(): ISignal<this, void> {
    return this._streamOpened;
  }

  get sessions(): ISession[] | undefined {
    return this._sessions;
  }

  get shares(): IShare[] {
    return this._shares;
  }

  get requests(): IPendingRequest[] {
    return this._requests;
  }

  get started(): string | undefined {
    return this._started;
  }

  get offline(): boolean {
    return this._offline;
  }

  get kinds(): string[] {
    return this._kinds;
  }

  get kindsReady(): Promise<string[]> {
    return this._kindsReady;
  }

  unavailable(
    kind: string,
    mode: SessionMode = 'terminal'
  ): string | undefined {
    return mode === 'acp'
      ? this._acpUnavailable.get(kind)
      : this._unavailable.get(kind);
  }

  modes(kind: string): SessionMode[] {
    return this._modes.get(kind) ?? ['terminal'];
  }

  get sharingRefused(): string | null | undefined {
    return this._sharingRefused;
  }

  get ready(): Promise<void> {
    return this._ready;
  }

  /** Whether the fallback poll runs (the event stream is not confirmed open). */
  get polling(): boolean {
    return this._polling;
  }

  /** Seconds between snapshots while the event stream is down. */
  get pollInterval(): number {
    return this._fallback.frequency.interval / 1000;
  }

  set pollInterval(seconds: number) {
    const interval = this._interval(seconds);
    if (interval === this._fallback.frequency.interval) {
      return;
    }
    this._fallback.frequency = { interval, backoff: false, max: interval };
    if (this._polling) {
      // reschedule on the new interval
      this._fallback.stop().then(() => this._fallback.start());
    }
  }

  get counts(): ICounts {
    const counts = {
      running: 0,
      interrupted: 0,
      orphaned: 0,
      needsYou: 0,
      working: 0
    };
    for (const s of this._sessions ?? []) {
      if (s.status === 'running' || s.status === 'interrupted') {
        counts[s.status]++;
      } else if (s.status === 'orphaned') {
        counts.orphaned++;
      }
      if (needsYou(s)) {
        counts.needsYou++;
      } else if (s.status === 'running' && s.attention === 'working') {
        counts.working++;
      }
    }
    return counts;
  }

  async refresh(): Promise<void> {
    await this._fetch(false).catch(() => undefined);
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    window.clearTimeout(this._grace);
    this._events.received.disconnect(this._onEvent, this);
    this._events.stateChanged.disconnect(this._onState, this);
    this._fallback.dispose();
    this._snapshotSoon.dispose();
    this._activity.dispose();
    Signal.clearData(this);
  }

  private _interval(seconds: number): number {
    const s = Number.isFinite(seconds) && seconds > 0 ? seconds : 1;
    return Math.round(Math.min(Math.max(s, 1), 86400) * 1000);
  }

  /**
   * Follow the event stream: a snapshot each time it opens, no poll while it is
   * open; the fallback poll while it is not (except while the first socket connects,
   * within the grace).
   */
  private _onState(_: IEventStream, state: StreamState): void {
    if (this._isDisposed) {
      return;
    }
    if (state === 'open') {
      this._seenOpen = true;
      this._setPolling(false);
      void this._fetch(true).catch(() => undefined);
      this._streamOpened.emit();
      return;
    }
    const waiting =
      state === 'connecting' && !this._seenOpen && !this._graceOver;
    if (!waiting) {
      this._setPolling(true);
    }
  }

  private _setPolling(on: boolean): void {
    if (on === this._polling) {
      return;
    }
    this._polling = on;
    if (on) {
      void this._fallback.start(); // its first tick is immediate
    } else {
      void this._fallback.stop();
    }
  }

  private _onEvent(_: IEventStream, emission: Event.Emission): void {
    if (emission.schema_id !== SESSION_EVENT) {
      return;
    }
    const event = emission as unknown as ISessionEvent;
    if (event.action === 'turns') {
      // for the views of its turns, which read what is new; nothing listed changed
      this._turnsGrew.emit(event.session_id);
      return;
    }
    if (event.action === 'attention' || 'attention' in event) {
      // shown at once (the badge, the count, the notification), the snapshot follows
      const session = this._sessions?.find(s => s.id === event.session_id);
      if (
        session &&
        (session.attention !== event.attention ||
          session.attention_since !== event.attention_since ||
          session.attention_reason !== event.attention_reason)
      ) {
        session.attention = event.attention ?? null;
        session.attention_since = event.attention_since ?? null;
        session.attention_reason = event.attention_reason ?? null;
        this._text = '';
        this._changed.emit();
      }
    }
    if (event.action === 'usage' && event.usage !== undefined) {
      // what it spent, shown at once: no snapshot needed
      const session = this._sessions?.find(s => s.id === event.session_id);
      if (session) {
        session.usage = event.usage;
        this._usageSince.set(session.id, {
          usage: event.usage,
          requested: this._requested
        });
        this._text = '';
        this._changed.emit();
        return;
      }
    }
    if (event.action === 'activity') {
      const session = this._sessions?.find(s => s.id === event.session_id);
      if (session) {
        session.last_activity = new Date().toISOString();
        this._text = ''; // the next snapshot replaces this local guess
        void this._activity.invoke().catch(() => undefined);
        return;
      }
    }
    void this._snapshotSoon.invoke().catch(() => undefined);
  }

  /**
   * One snapshot. Answers are applied in the order the requests were made, so an
   * older answer arriving late never overwrites a newer one.
   */
  private async _fetch(checkStart: boolean): Promise<void> {
    const seq = ++this._requested;
    let started = this._started;
    let sessions: ISession[];
    let shares: IShare[];
    let requests: IPendingRequest[];
    try {
      if (checkStart || started === undefined || this._offline) {
        started = await serverStarted(this.serverSettings);
      }
      [sessions, shares, requests] = await Promise.all([
        listSessions(this.serverSettings),
        // a server that does not list shares to this user shares nothing of theirs
        listShares(this.serverSettings).catch((): IShare[] => []),
        // nor does one that does not show this user requests (or an older server)
        listRequests(this.serverSettings).catch((): IPendingRequest[] => [])
      ]);
    } catch (error) {
      if (seq > this._applied) {
        this._applied = seq;
        if (!this._offline) {
          this._offline = true;
          this._changed.emit();
        }
      }
      this._resolveReady();
      throw error;
    }
    if (seq < this._applied || this._isDisposed) {
      return;
    }
    this._applied = seq;
    this._keepNewerUsage(sessions, seq);
    if (started !== this._started) {
      this._started = started;
      this._startSeen = false;
    }
    const text = JSON.stringify([sessions, shares, requests]);
    const wasOffline = this._offline;
    this._offline = false;
    if (text !== this._text || wasOffline) {
      this._text = text;
      this._sessions = sessions;
      this._shares = shares;
      this._requests = requests;
      this._changed.emit();
    }
    this._resolveReady();
    if (!this._startSeen && this._started !== undefined) {
      this._startSeen = true;
      this._serverStarted.emit(this._started);
    }
  }

  /**
   * Give the sessions of snapshot `seq` the usage of each `usage` event that arrived
   * after that snapshot was requested: the server may have read its usage before the
   * event's. An event every later request has seen is forgotten.
   */
  private _keepNewerUsage(sessions: ISession[], seq: number): void {
    for (const session of sessions) {
      const newer = this._usageSince.get(session.id);
      if (newer !== undefined && seq <= newer.requested) {
        session.usage = newer.usage;
      }
    }
    for (const [id, newer] of this._usageSince) {
      if (seq > newer.requested) {
        this._usageSince.delete(id);
      }
    }
  }

  private _events: IEventStream;
  private _fallback: Poll;
  private _snapshotSoon: Debouncer;
  private _activity: Throttler;
  private _grace: number;
  private _graceOver = false;
  private _seenOpen = false;
  private _polling = false;
  private _requested = 0;
  private _applied = 0;
  /** Each `usage` event's usage, and the last snapshot requested before it came. */
  private _usageSince = new Map<
    string,
    { usage: ISession['usage']; requested: number }
  >();
  private _sessions: ISession[] | undefined;
  private _shares: IShare[] = [];
  private _requests: IPendingRequest[] = [];
  private _text = '';
  private _started: string | undefined;
  private _startSeen = false;
  private _offline = false;
  private _kinds: string[] = DEFAULT_KINDS;
  private _unavailable = new Map<string, string>();
  private _acpUnavailable = new Map<string, string>();
  private _modes = new Map<string, SessionMode[]>();
  private _sharingRefused: string | null | undefined = undefined;
  private _kindsReady: Promise<string[]>;
  private _ready: Promise<void>;
  private _resolveReady: () => void = () => undefined;
  private _isDisposed = false;
  private _changed = new Signal<this, void>(this);
  private _serverStarted = new Signal<this, string>(this);
  private _turnsGrew = new Signal<this, string>(this);
  private _streamOpened = new Signal<this, void>(this);
}

export namespace SessionsModel {
  export interface IOptions {
    /** The application's `serviceManager.serverSettings`. */
    serverSettings: ServerConnection.ISettings;
    /** The server's event stream (an `EventConnection`). */
    events: IEventStream;
    /** Seconds between snapshots while the event stream is down. */
    pollInterval?: number;
    /** When the fallback poll stands by (as JupyterLab's own managers do). */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }
}
