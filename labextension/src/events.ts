/**
 * Our own connection to the server's event bus (`/api/events/subscribe`), with its
 * state in the open.
 *
 * JupyterLab's `EventManager` (`serviceManager.events`) reconnects by itself but
 * says nothing about its socket, and the server replays nothing that was missed: a
 * client that must take a snapshot after every reconnect (and poll while there is no
 * stream) needs to know when the stream is up. So the extension holds one websocket
 * of its own, made as `EventManager` makes it (the server settings' `wsUrl`, token
 * and `WebSocket`), and says when its state changes.
 *
 * Reconnecting: a lumino `Poll` opens the socket; the tick lasts as long as the
 * socket does. A socket that was open and closed reconnects after
 * `RECONNECT_INTERVAL`; one that never opened backs off (x3 per failure, up to
 * `RECONNECT_MAX`). It stands by as the poll's `standby` says (default: while the
 * page is hidden, as JupyterLab's own managers do).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { Event, ServerConnection } from '@jupyterlab/services';
import type { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

/** The path of the server's event bus websocket. */
const SUBSCRIBE_PATH = 'api/events/subscribe';

/** Wait before reopening a socket that was open (ms). */
const RECONNECT_INTERVAL = 1000;

/** The longest wait between attempts that failed (ms; lumino's floor for `max`). */
const RECONNECT_MAX = 30000;

/**
 * `connecting`: a socket is being opened (none was open yet, or the last one
 * closed and a new attempt runs); `open`: events flow; `closed`: no socket, the next
 * attempt is scheduled (or the connection is disposed).
 */
export type StreamState = 'connecting' | 'open' | 'closed';

/** The event stream as the sessions model needs it. */
export interface IEventStream extends IDisposable {
  /** The socket's state now. */
  readonly state: StreamState;

  /** Emitted with the new state each time it changes. */
  readonly stateChanged: ISignal<IEventStream, StreamState>;

  /** Emitted with each event the server sends (`{schema_id, ...data}`). */
  readonly received: ISignal<IEventStream, Event.Emission>;
}

/** A websocket to `/api/events/subscribe` that reconnects and says its state. */
export class EventConnection implements IEventStream {
  constructor(options: EventConnection.IOptions) {
    this.serverSettings = options.serverSettings;
    this._poll = new Poll({
      factory: () => this._connect(),
      frequency: {
        interval: RECONNECT_INTERVAL,
        backoff: true,
        max: RECONNECT_MAX
      },
      name: 'jupyter-agents:events',
      standby: options.standby ?? 'when-hidden'
    });
  }

  readonly serverSettings: ServerConnection.ISettings;

  get state(): StreamState {
    return this._state;
  }

  get stateChanged(): ISignal<this, StreamState> {
    return this._stateChanged;
  }

  get received(): ISignal<this, Event.Emission> {
    return this._received;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._poll.dispose();
    const socket = this._socket;
    this._socket = null;
    if (socket) {
      socket.onopen = socket.onclose = socket.onmessage = null;
      socket.close();
    }
    this._setState('closed');
    Signal.clearData(this);
  }

  /**
   * One socket's life: resolves when a socket that was open closes (reconnect
   * soon), rejects when it closes without having opened (back off).
   */
  private _connect(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.isDisposed) {
        resolve();
        return;
      }
      const { appendToken, token, WebSocket, wsUrl } = this.serverSettings;
      let url = URLExt.join(wsUrl, SUBSCRIBE_PATH);
      if (appendToken && token !== '') {
        url += `?token=${encodeURIComponent(token)}`;
      }
      let opened = false;
      const socket = new WebSocket(url);
      this._socket = socket;
      this._setState('connecting');
      socket.onopen = () => {
        opened = true;
        this._setState('open');
      };
      socket.onmessage = (message: MessageEvent) => {
        const emission = parse(message.data);
        if (emission) {
          this._received.emit(emission);
        }
      };
      socket.onclose = () => {
        if (this._socket === socket) {
          this._socket = null;
          this._setState('closed');
        }
        if (opened) {
          resolve();
        } else {
          reject(new Error('jupyter-agents: the event stream did not open'));
        }
      };
    });
  }

  private _setState(state: StreamState): void {
    if (state !== this._state) {
      this._state = state;
      this._stateChanged.emit(state);
    }
  }

  private _poll: Poll;
  private _socket: WebSocket | null = null;
  private _state: StreamState = 'connecting';
  private _stateChanged = new Signal<this, StreamState>(this);
  private _received = new Signal<this, Event.Emission>(this);
}

/** An event frame as the server sends it; null for anything else. */
function parse(data: unknown): Event.Emission | null {
  if (typeof data !== 'string' || !data) {
    return null;
  }
  try {
    const value = JSON.parse(data);
    return value && typeof value.schema_id === 'string' ? value : null;
  } catch {
    return null;
  }
}

export namespace EventConnection {
  export interface IOptions {
    /** The application's `serviceManager.serverSettings`. */
    serverSettings: ServerConnection.ISettings;
    /** When reconnecting stands by (as JupyterLab's own managers do). */
    standby?: Poll.Standby | (() => boolean | Poll.Standby);
  }
}
