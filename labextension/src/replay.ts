/**
 * Replay: a main-area tab that plays a session's transcript with its timing in the
 * asciinema player (npm `asciinema-player`, loaded on first use), from the session's
 * cast export fetched with the server's auth. The player brings play/pause, the time
 * and a seek bar; the tab's toolbar adds the speed. Pauses longer than `IDLE_LIMIT`
 * are shortened to it, so hours of idle do not stand between two outputs.
 * Opened at a search hit (`at`), it waits paused at that line; otherwise it plays
 * from the start. One tab per session, restored with the workspace.
 */
import { ILayoutRestorer, JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';
import type { Player } from 'asciinema-player';

import { exportCast } from './api';
import { fail } from './commands';
import { el } from './dom';
import { kindLabel, replayIcon } from './icons';
import { CommandIDs, IAgentSessions } from './tokens';

/** Pauses longer than this many seconds are replayed this long. */
const IDLE_LIMIT = 2;

/** The speeds offered in the toolbar. */
const SPEEDS = [0.5, 1, 2, 4, 8, 16, 64];

/** Where to put the player when it is (re)made. */
interface IPosition {
  /** Seconds from the start of the recording as recorded (a search hit's `at`). */
  startAt?: number;
  /** Seconds on the player's own (idle-shortened) timeline. */
  seek?: number;
  play: boolean;
}

/** What the player is doing, also on the node as `data-state` (for tests). */
type PlayerState = 'loading' | 'playing' | 'paused' | 'ended' | 'failed';

export class ReplayView extends Widget {
  constructor(options: ReplayView.IOptions) {
    super();
    this.sessionId = options.id;
    this._serverSettings = options.serverSettings;
    this._trans = options.trans;
    this.addClass('jp-AgentsReplay');
    this.node.dataset.sessionId = options.id;
    this._message = el(
      'div',
      'jp-AgentsReplay-message',
      this._trans.__('Loading the transcript…')
    );
    this._screen = el('div', 'jp-AgentsReplay-screen');
    this.node.append(this._message, this._screen);
    this._setState('loading');
    void this.start(options.at);
  }

  readonly sessionId: string;

  /** The playback speed (1 = as recorded); a change keeps the position. */
  get speed(): number {
    return this._speed;
  }

  set speed(speed: number) {
    if (speed === this._speed) {
      return;
    }
    this._speed = speed;
    const player = this._player;
    if (player) {
      void this._mount({
        seek: player.getCurrentTime(),
        play: this.node.dataset.state === 'playing'
      });
    }
  }

  /**
   * Fetch the recording (a running session's grows) and show it paused at `at`
   * seconds, or play it from the start.
   */
  start(at?: number): Promise<void> {
    this._cast = exportCast(this._serverSettings, this.sessionId);
    return this._mount(
      at === undefined ? { play: true } : { startAt: at, play: false }
    );
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._generation++;
    this._player?.dispose();
    this._player = null;
    super.dispose();
  }

  /** (Re)make the player at a position, from the recording `start` fetched. */
  private async _mount(position: IPosition): Promise<void> {
    const generation = ++this._generation;
    let cast: string;
    let create: typeof import('asciinema-player').create;
    try {
      [cast, { create }] = await Promise.all([
        this._cast,
        import('asciinema-player')
      ]);
    } catch (error) {
      if (generation === this._generation) {
        const message = error instanceof Error ? error.message : String(error);
        this._message.textContent = this._trans.__(
          'Could not load the transcript: %1',
          message
        );
        this._message.classList.add('jp-mod-error');
        this._message.hidden = false;
        this._setState('failed');
      }
      return;
    }
    if (generation !== this._generation) {
      return; // disposed, or made again meanwhile
    }
    this._message.hidden = true;
    this._player?.dispose();
    this._screen.replaceChildren();
    const player = create({ data: cast }, this._screen, {
      autoPlay: position.play && position.seek === undefined,
      preload: true,
      startAt: position.startAt,
      speed: this._speed,
      idleTimeLimit: IDLE_LIMIT,
      fit: 'both',
      controls: true
    });
    this._player = player;
    this._setState('loading');
    player.addEventListener('playing', () => this._setState('playing'));
    player.addEventListener('pause', () => this._setState('paused'));
    player.addEventListener('ended', () => this._setState('ended'));
    if (position.seek !== undefined) {
      await player.seek(position.seek);
      if (player !== this._player) {
        return;
      }
      if (position.play) {
        await player.play();
      } else {
        this._setState('paused');
      }
    } else if (position.startAt !== undefined && !position.play) {
      // The player draws the screen at `startAt` only once it plays. A hit on the last
      // thing a session printed is at the recording's end: the player may end before
      // the pause lands (sooner on a loaded machine). It is put back where it started.
      let started: number | undefined;
      const onPlaying = () => {
        started ??= player.getCurrentTime();
      };
      player.addEventListener('playing', onPlaying);
      await player.play();
      await player.pause();
      if (player !== this._player) {
        return;
      }
      if (this.node.dataset.state !== 'paused' && started !== undefined) {
        await player.seek(started);
        if (player !== this._player) {
          return;
        }
        this._setState('paused');
      }
    }
  }

  private _setState(state: PlayerState): void {
    this.node.dataset.state = state;
  }

  private _serverSettings: ServerConnection.ISettings;
  private _trans: TranslationBundle;
  private _message: HTMLDivElement;
  private _screen: HTMLDivElement;
  private _cast!: Promise<string>; // set by start()
  private _player: Player | null = null;
  private _speed = 1;
  private _generation = 0;
}

export namespace ReplayView {
  export interface IOptions {
    /** The session's id. */
    id: string;
    /** Seconds into the recording to start at, paused (a search hit's `at`). */
    at?: number;
    serverSettings: ServerConnection.ISettings;
    trans: TranslationBundle;
  }
}

/** The toolbar's speed select of a replay. */
function speedSelect(view: ReplayView, trans: TranslationBundle): Widget {
  const label = el('label', 'jp-AgentsReplay-speed', trans.__('Speed'));
  const select = el('select', 'jp-mod-styled');
  select.dataset.option = 'speed';
  select.title = trans.__('Playback speed (1× = as recorded)');
  for (const speed of SPEEDS) {
    const option = el('option', '', `${speed}×`);
    option.value = String(speed);
    option.selected = speed === view.speed;
    select.append(option);
  }
  select.onchange = () => {
    view.speed = Number(select.value);
  };
  label.append(select);
  return new Widget({ node: label });
}

export namespace Replay {
  export interface IOptions {
    app: JupyterFrontEnd;
    model: IAgentSessions;
    trans: TranslationBundle;
    restorer: ILayoutRestorer | null;
  }
}

/**
 * Register `jupyter-agents:replay` `{id, at?}`: open (or show) the session's replay
 * tab; with `at`, paused at that many seconds into the recording.
 */
export function addReplayCommand(options: Replay.IOptions): void {
  const { app, model, trans, restorer } = options;
  const tracker = new WidgetTracker<MainAreaWidget<ReplayView>>({
    namespace: 'jupyter-agents-replay'
  });
  restorer?.restore(tracker, {
    command: CommandIDs.replay,
    args: widget => ({ id: widget.content.sessionId }),
    name: widget => widget.content.sessionId
  });

  app.commands.addCommand(CommandIDs.replay, {
    label: trans.__('Replay Agent Session'),
    caption: trans.__('Play the session’s transcript with its timing'),
    icon: replayIcon,
    execute: async args => {
      const id = String(args.id ?? '');
      const at = typeof args.at === 'number' ? args.at : undefined;
      const shown = tracker.find(w => w.content.sessionId === id);
      if (shown) {
        if (at !== undefined) {
          await shown.content.start(at);
        }
        app.shell.activateById(shown.id);
        return;
      }
      const find = () => model.sessions?.find(s => s.id === id);
      await model.ready;
      if (!find()) {
        await model.refresh();
      }
      const session = find();
      if (!session) {
        fail(trans.__('Could not replay %1', id), trans.__('no such session'));
        return;
      }
      const content = new ReplayView({
        id,
        at,
        serverSettings: model.serverSettings,
        trans
      });
      const widget = new MainAreaWidget({ content });
      widget.id = `jupyter-agents-replay-${id}`;
      widget.title.label = trans.__('Replay %1', session.name);
      widget.title.caption = trans.__(
        'Replay of %1 session %2 (%3)',
        kindLabel(session.kind, trans),
        session.name,
        id
      );
      widget.title.icon = replayIcon;
      widget.toolbar.addItem('speed', speedSelect(content, trans));
      await tracker.add(widget);
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    }
  });
}
