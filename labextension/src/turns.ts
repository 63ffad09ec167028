/**
 * An agent's turns, live (`jupyter-agents:turns {id}`): the session's turn events
 * (`GET /api/agents/sessions/<id>/turns`, one shape for every kind) drawn as a
 * conversation: messages (the agent's rendered as Markdown through the sanitiser that
 * loads nothing from elsewhere), thoughts and tool calls folded to one line (tool,
 * what it does, status, time) and opened on click with input and output, the plan as
 * a checklist, the session's pending permission request answerable in place (the
 * CLI's own choices). A turn's time opens the terminal's replay at that moment; a
 * search marks the turns that hold a text and steps through them. It reads from the
 * last event it has each time the server says the session's conversation grew (a
 * `turns` event), so nothing is read twice; a file the CLI rewrote is drawn again
 * from its start, and what was written while the event stream was closed (no server
 * ran, or the page was reconnecting) is read when it opens again. It keeps at most `MAX_ROWS` rows: the oldest go first (the
 * conversation tab has them all), so a long conversation costs the page a bounded DOM.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { ITerminalTracker } from '@jupyterlab/terminal';
import { TranslationBundle } from '@jupyterlab/translation';
import {
  listIcon,
  refreshIcon,
  ToolbarButton
} from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { ISignal, Signal } from '@lumino/signaling';
import { Message } from '@lumino/messaging';
import { BoxLayout, Widget } from '@lumino/widgets';

import {
  displayName,
  IPendingRequest,
  ISession,
  ITurnEvent,
  turnPage
} from './api';
import { fail, PHONE_WIDTH, sessionOf, showDocument } from './commands';
import { el } from './dom';
import { kindIcon, kindLabel } from './icons';
import { renderOffline } from './offline';
import { PromptBox } from './prompt';
import { requestElement } from './requests';
import { CommandIDs, IAgentSessions } from './tokens';

/** The most characters of a tool's input or output shown before "show all". */
const SHOWN = 4000;

/** The most rows a view keeps; older ones are dropped as new ones come. */
export const MAX_ROWS = 2000;

/** Marks of a plan entry's status. */
const MARKS = { completed: '☑', in_progress: '◐', pending: '☐' };

/** Marks of a tool call's status. */
const STATUS = {
  pending: '…',
  in_progress: '…',
  completed: '✓',
  failed: '✗'
};

/** The live list of one session's turns. */
export class TurnsView extends Widget {
  constructor(
    private _options: TurnsDocument.IOptions,
    readonly session: ISession
  ) {
    super();
    this.addClass('jp-AgentsTurns');
    this.node.dataset.sessionId = session.id;
    this.node.setAttribute('role', 'log');
    this.node.setAttribute(
      'aria-label',
      _options.trans.__('Turns of %1', displayName(session))
    );
    this._dropped = el('p', 'jp-AgentsTurns-dropped');
    this._dropped.hidden = true;
    this._list = el('div', 'jp-AgentsTurns-list');
    this._asks = el('div', 'jp-AgentsTurns-asks');
    this._asks.setAttribute('aria-live', 'polite');
    this._status = el('p', 'jp-AgentsTurns-status');
    this._status.setAttribute('aria-live', 'polite');
    this._now = el('div', 'jp-AgentsTurns-now');
    this._now.hidden = true;
    this._shown = new IntersectionObserver(entries => this._onShown(entries), {
      root: this.node,
      rootMargin: '600px 0px'
    });
    this.node.append(
      this._dropped,
      this._list,
      this._asks,
      this._status,
      this._now
    );
    _options.model.turnsGrew.connect(this._onGrew, this);
    _options.model.changed.connect(this._showAsks, this);
    // what the CLI wrote while the stream was closed (no server ran, or it was
    // reconnecting) came with no `turns` event seen here
    _options.model.streamOpened.connect(this._onReopened, this);
    this._showAsks();
  }

  /**
   * Mark the rows that hold `query` (any case; folded text too) and return how many;
   * an empty query marks none. Rows drawn later are marked as they come.
   */
  search(query: string): number {
    this._query = query.toLocaleLowerCase();
    this._current = -1;
    for (const row of this._rows()) {
      this._match(row);
    }
    return this.matches().length;
  }

  /** The rows the search marks, in order. */
  matches(): HTMLElement[] {
    return this._rows().filter(row => row.classList.contains('jp-mod-match'));
  }

  /**
   * Show the next (or, `back`, the previous) marked row: scrolled to, opened if folded.
   * Its place (1-based) among the marked rows, or 0 when none is marked.
   */
  step(back = false): number {
    const found = this.matches();
    if (!found.length) {
      return 0;
    }
    const count = found.length;
    this._current = back
      ? (this._current - 1 + count) % count
      : (this._current + 1) % count;
    this._list
      .querySelector('.jp-mod-current')
      ?.classList.remove('jp-mod-current');
    const row = found[this._current];
    row.classList.add('jp-mod-current');
    const fold = row.querySelector('details');
    if (fold) {
      fold.open = true;
    }
    row.scrollIntoView({ block: 'center' });
    return this._current + 1;
  }

  /** A turn ended (a `turn_end` drawn: on the first read, those of the history too). */
  get turnEnded(): ISignal<this, ITurnEvent> {
    return this._turnEnded;
  }

  /** Read what is new (all of it the first time); one read at a time, one queued. */
  async load(): Promise<void> {
    if (this._reading) {
      this._again = true;
      return this._reading;
    }
    this._reading = this._read();
    try {
      await this._reading;
    } finally {
      this._reading = null;
    }
    if (this._again && !this.isDisposed) {
      this._again = false;
      await this.load();
    }
  }

  dispose(): void {
    this._options.model.turnsGrew.disconnect(this._onGrew, this);
    this._options.model.changed.disconnect(this._showAsks, this);
    this._options.model.streamOpened.disconnect(this._onReopened, this);
    window.clearInterval(this._ticking);
    this._shown.disconnect();
    super.dispose();
  }

  private _onReopened(): void {
    if (!this.isDisposed) {
      void this.load();
    }
  }

  /** The pending permission requests of this session, answerable here. */
  private _showAsks(): void {
    const { model, trans } = this._options;
    const asks = model.requests.filter(
      (r: IPendingRequest) => r.session_id === this.session.id
    );
    const ids = asks.map(r => r.id).join(' ');
    if (ids === this._askIds) {
      return; // the same requests: their boxes (and a half-made answer) stay
    }
    this._askIds = ids;
    const atEnd = this._atEnd();
    this._asks.replaceChildren(
      ...asks.map(r => {
        const box = requestElement(model, r, trans);
        box.classList.add('jp-AgentsTurns-ask');
        return box;
      })
    );
    if (atEnd) {
      this.node.scrollTop = this.node.scrollHeight;
    }
  }

  private _rows(): HTMLElement[] {
    return Array.from(this._list.children) as HTMLElement[];
  }

  private _match(row: HTMLElement): void {
    const hit =
      this._query !== '' &&
      (row.textContent ?? '').toLocaleLowerCase().includes(this._query);
    row.classList.toggle('jp-mod-match', hit);
    if (!hit) {
      row.classList.remove('jp-mod-current');
    }
  }

  private _onGrew(_: IAgentSessions, id: string): void {
    if (id === this.session.id && !this.isDisposed) {
      void this.load();
    }
  }

  private async _read(): Promise<void> {
    const { model, trans } = this._options;
    const atEnd = this._atEnd(); // measured once a read: each measure is a layout
    for (;;) {
      let page;
      try {
        page = await turnPage(
          model.serverSettings,
          this.session.id,
          this._next
        );
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        this._status.textContent = trans.__('No turns to show: %1', message);
        this._status.classList.add('jp-mod-error');
        return;
      }
      if (this.isDisposed) {
        return;
      }
      if (page.reset) {
        this._step = null;
        this._list.replaceChildren();
        this._calls.clear();
        this._plan = null;
        this._current = -1;
        this._dropCount = 0;
        this._dropped.hidden = true;
        this._chunk = null;
      }
      this._replayStart = page.replay_start
        ? Date.parse(page.replay_start)
        : NaN;
      for (const event of page.events) {
        this._draw(event);
      }
      this._trim();
      this._next = page.next;
      if (page.more) {
        continue; // drawn and measured once the files hold no more
      }
      this._showStep();
      this._status.classList.remove('jp-mod-error');
      this._status.textContent = this._list.childElementCount
        ? ''
        : this.session.mode === 'acp'
          ? trans.__('Nothing yet: prompt the agent below.')
          : trans.__('Nothing yet: the turns show here as the agent works.');
      if (atEnd) {
        this.node.scrollTop = this.node.scrollHeight;
      }
      return;
    }
  }

  /**
   * Pin the current step (the latest tool call not ended, while the session runs)
   * with the time since it started, counted each second while it is shown.
   */
  private _showStep(): void {
    const { model, trans } = this._options;
    const step = this._step;
    const running =
      model.sessions?.find(s => s.id === this.session.id)?.status === 'running';
    const since = step ? Date.parse(step.dataset.at ?? '') : NaN;
    if (!step || !running || !step.isConnected || !Number.isFinite(since)) {
      this._now.hidden = true;
      window.clearInterval(this._ticking);
      this._ticking = undefined;
      return;
    }
    const title = step.querySelector('.jp-AgentsTurns-title')?.textContent;
    const seconds = Math.max(0, Math.round((Date.now() - since) / 1000));
    this._now.hidden = false;
    this._now.dataset.callId = step.dataset.callId ?? '';
    this._now.textContent = trans.__('Now: %1 · %2 s', title ?? '', seconds);
    if (this._ticking === undefined) {
      this._ticking = window.setInterval(() => this._showStep(), 1000);
    }
  }

  /** Drop the oldest rows beyond `MAX_ROWS`, and say how many are not shown. */
  private _trim(): void {
    const over = this._list.childElementCount - MAX_ROWS;
    if (over <= 0) {
      return;
    }
    const gone = this._rows().slice(0, over);
    for (const row of gone) {
      const fold = row.querySelector('details');
      const id = fold?.dataset.callId;
      if (id && this._calls.get(id) === fold) {
        this._calls.delete(id);
      }
      if (this._plan && row.contains(this._plan.node)) {
        this._plan = null;
      }
      for (const body of Array.from(
        row.querySelectorAll('.jp-AgentsTurns-body')
      )) {
        this._shown.unobserve(body);
        this._unrendered.delete(body as HTMLElement);
      }
      row.remove();
    }
    this._current = -1;
    this._dropCount += over;
    this._dropped.hidden = false;
    this._dropped.textContent = this._options.trans._n(
      '%1 earlier turn is not shown here: the conversation has it.',
      '%1 earlier turns are not shown here: the conversation has them.',
      this._dropCount
    );
  }

  /** Whether the view shows its end (new turns then keep it there). */
  private _atEnd(): boolean {
    const node = this.node;
    return node.scrollHeight - node.scrollTop - node.clientHeight < 40;
  }

  private _draw(event: ITurnEvent): void {
    const { trans } = this._options;
    if (event.chunk && this._grow(event)) {
      return;
    }
    switch (event.type) {
      case 'user_message':
        this._message(event, trans.__('You'), 'user', false);
        break;
      case 'agent_message':
        this._message(
          event,
          kindLabel(this.session.kind, trans),
          'agent',
          true
        );
        break;
      case 'thought': {
        const fold = this._fold(event, 'thought', trans.__('Thinking'));
        const text = el('pre', 'jp-AgentsTurns-text', event.text ?? '');
        fold.append(text);
        this._growing(event, fold.parentElement as HTMLElement, said => {
          text.textContent = said;
        });
        break;
      }
      case 'tool_call':
        this._call(event);
        break;
      case 'tool_call_update':
        this._result(event);
        break;
      case 'plan':
        this._planned(event);
        break;
      case 'compaction':
        this._mark(event, trans.__('The conversation was compacted'));
        break;
      case 'turn_end':
        this._mark(
          event,
          event.stop_reason === 'cancelled'
            ? trans.__('Turn cancelled')
            : trans.__('End of turn')
        );
        this._turnEnded.emit(event);
        break;
      default:
        break; // records of no turn: not drawn
    }
  }

  /**
   * Add a chunk to the row of the chunks before it (the last row, of its type): a
   * message streamed over ACP is one row that grows. False when it starts a row.
   */
  private _grow(event: ITurnEvent): boolean {
    const open = this._chunk;
    if (
      !open ||
      open.type !== event.type ||
      open.row !== this._list.lastElementChild
    ) {
      return false;
    }
    open.text += event.text ?? '';
    open.row.dataset.id = event.id; // where a read after it starts
    open.show(open.text);
    if (this._query) {
      const row = open.row;
      queueMicrotask(() => this._match(row));
    }
    return true;
  }

  /** Let the chunks after `event`, a chunk, grow `row` (`show` shows the text so far). */
  private _growing(
    event: ITurnEvent,
    row: HTMLElement,
    show: (text: string) => void
  ): void {
    this._chunk = event.chunk
      ? { type: event.type, row, text: event.text ?? '', show }
      : null;
  }

  private _row(event: ITurnEvent, kind: string): HTMLDivElement {
    const row = el('div', `jp-AgentsTurns-row jp-mod-${kind}`);
    row.dataset.type = event.type;
    row.dataset.id = event.id;
    if (event.subagent) {
      row.classList.add('jp-mod-subagent');
    }
    this._list.append(row);
    if (this._query) {
      // matched once its text is in (the end of this turn of the event loop)
      queueMicrotask(() => this._match(row));
    }
    return row;
  }

  /**
   * When `event` happened; a button that opens the terminal's replay at that moment
   * when the session was recorded then.
   */
  private _time(event: ITurnEvent): HTMLElement {
    const { trans, replay } = this._options;
    const time = el('time', 'jp-AgentsTurns-time');
    if (!event.at) {
      return time;
    }
    time.dateTime = event.at;
    const clock = new Date(event.at).toLocaleTimeString();
    time.textContent = clock;
    const at = (Date.parse(event.at) - this._replayStart) / 1000;
    if (!replay || !Number.isFinite(at)) {
      return time;
    }
    const jump = el('button', 'jp-AgentsTurns-jump');
    jump.dataset.action = 'replay';
    jump.title = trans.__('Replay the terminal from %1', clock);
    jump.setAttribute('aria-label', jump.title);
    jump.append(time);
    jump.onclick = clicked => {
      clicked.preventDefault(); // not a click on a fold's line
      clicked.stopPropagation();
      void replay(this.session.id, Math.max(0, at));
    };
    return jump;
  }

  private _message(
    event: ITurnEvent,
    who: string,
    kind: string,
    markdown: boolean
  ): void {
    const row = this._row(event, kind);
    const head = el('div', 'jp-AgentsTurns-head');
    head.append(el('strong', 'jp-AgentsTurns-who', who), this._time(event));
    const body = el('div', 'jp-AgentsTurns-body');
    row.append(head, body);
    const text = event.text ?? '';
    if (!markdown) {
      const pre = el('pre', 'jp-AgentsTurns-text', text);
      body.append(pre);
      this._growing(event, row, said => {
        pre.textContent = said;
      });
      return;
    }
    this._markdown(body, text);
    this._growing(event, row, said => this._markdown(body, said));
  }

  /**
   * Show `text` in `body` as Markdown, rendered once near the screen (most rows never
   * are); until then (and if rendering fails) as it is. A body shown before keeps its
   * rendering until the new one is ready.
   */
  private _markdown(body: HTMLElement, text: string): void {
    if (!body.firstElementChild) {
      body.textContent = text;
    }
    this._unrendered.set(body, text);
    this._latest.set(body, text);
    this._shown.unobserve(body); // (observed again: a body on screen is rendered again)
    this._shown.observe(body);
  }

  /** Render the Markdown of the message bodies that came near the screen. */
  private _onShown(entries: IntersectionObserverEntry[]): void {
    for (const entry of entries) {
      const body = entry.target as HTMLElement;
      const text = this._unrendered.get(body);
      if (!entry.isIntersecting || text === undefined) {
        continue;
      }
      this._shown.unobserve(body);
      this._unrendered.delete(body);
      // untrusted, nothing fetched from elsewhere (offline.ts)
      void renderOffline(this._options.rendermime, text)
        .then(node => {
          if (this._latest.get(body) === text) {
            body.replaceChildren(node); // (not a rendering of less than it has now)
          }
        })
        .catch(() => undefined);
    }
  }

  /** A folded row: its one line, and what opens under it. */
  private _fold(
    event: ITurnEvent,
    kind: string,
    line: string
  ): HTMLDetailsElement {
    const row = this._row(event, kind);
    const fold = el('details', 'jp-AgentsTurns-fold');
    const summary = el('summary', 'jp-AgentsTurns-line');
    summary.append(el('span', 'jp-AgentsTurns-title', line), this._time(event));
    fold.append(summary);
    row.append(fold);
    return fold;
  }

  private _call(event: ITurnEvent): void {
    const { trans } = this._options;
    const known = event.tool_call_id && this._calls.get(event.tool_call_id);
    if (known) {
      // the same call again, with a later status; an ACP agent may name it only now
      // (Claude's adapter: "Terminal" with no input first, then the command)
      if (event.title !== undefined || event.input !== undefined) {
        this._describe(known, event);
      }
      this._setStatus(known, event.status);
      return;
    }
    const fold = this._fold(
      event,
      'tool',
      event.title ?? event.tool ?? trans.__('Tool call')
    );
    if (event.tool_call_id) {
      fold.dataset.callId = event.tool_call_id;
    }
    if (event.at) {
      fold.dataset.at = event.at;
    }
    const status = el('span', 'jp-AgentsTurns-callStatus');
    fold.querySelector('summary')?.prepend(status);
    this._describe(fold, event);
    this._setStatus(fold, event.status);
    if (event.tool_call_id) {
      this._calls.set(event.tool_call_id, fold);
    }
  }

  /**
   * What a call's fold says of it: its title, kind, input (an edit's change line by
   * line) and locations; again from a later event of the same call, whose fields
   * replace those it has (one it leaves out keeps its value).
   */
  private _describe(fold: HTMLElement, event: ITurnEvent): void {
    const { trans } = this._options;
    const title = event.title ?? event.tool;
    if (title) {
      const line = fold.querySelector('.jp-AgentsTurns-title');
      if (line) {
        line.textContent = title;
      }
    }
    if (event.tool_kind || !fold.dataset.toolKind) {
      fold.dataset.toolKind = event.tool_kind ?? 'other';
    }
    const had = fold.querySelector('.jp-AgentsTurns-input');
    if (had && event.input === undefined) {
      return; // (no input in this one: the fold keeps what it shows)
    }
    for (const old of Array.from(
      fold.querySelectorAll(
        ':scope > .jp-AgentsTurns-label, :scope > .jp-AgentsTurns-input, :scope > .jp-AgentsTurns-location'
      )
    )) {
      old.remove();
    }
    const change = edit(event.input);
    const input = el(
      'pre',
      change
        ? 'jp-AgentsTurns-input jp-AgentsTurns-diff'
        : 'jp-AgentsTurns-input'
    );
    if (change) {
      // an edit: what it takes out and puts in, line by line
      input.append(
        ...change.map(([sign, line]) =>
          el(
            'span',
            sign === '-' ? 'jp-mod-removed' : 'jp-mod-added',
            `${sign} ${line}\n`
          )
        )
      );
    } else {
      input.textContent = shown(
        typeof event.input === 'string'
          ? event.input
          : JSON.stringify(event.input ?? null, null, 2)
      );
    }
    const summary = fold.querySelector(':scope > summary');
    const parts = [
      el(
        'div',
        'jp-AgentsTurns-label',
        change ? trans.__('Change') : trans.__('Input')
      ),
      input,
      ...(event.locations ?? []).map(where =>
        el(
          'div',
          'jp-AgentsTurns-location',
          where.line ? `${where.path}:${where.line}` : where.path
        )
      )
    ];
    if (summary) {
      summary.after(...parts); // before its output, which comes after the input
    } else {
      fold.append(...parts);
    }
  }

  private _result(event: ITurnEvent): void {
    const { trans } = this._options;
    const fold = event.tool_call_id
      ? this._calls.get(event.tool_call_id)
      : undefined;
    if (!fold) {
      return; // its call came before what this view read (or is not known)
    }
    this._setStatus(fold, event.status);
    fold.querySelector('.jp-AgentsTurns-output')?.remove();
    const output = el('pre', 'jp-AgentsTurns-output');
    output.textContent = shown(event.output ?? '') || trans.__('(no output)');
    fold.append(
      el(
        'div',
        'jp-AgentsTurns-label',
        event.status === 'failed' ? trans.__('Failed') : trans.__('Output')
      ),
      output
    );
  }

  private _setStatus(fold: HTMLElement, status: ITurnEvent['status']): void {
    const value = status ?? 'pending';
    fold.dataset.status = value;
    if (value === 'pending' || value === 'in_progress') {
      this._step = fold; // the latest call not ended: the current step
    } else if (this._step === fold) {
      this._step = null;
    }
    const mark = fold.querySelector('.jp-AgentsTurns-callStatus');
    if (mark) {
      mark.textContent = STATUS[value];
      mark.setAttribute(
        'aria-label',
        this._options.trans.__(
          {
            pending: 'waiting',
            in_progress: 'running',
            completed: 'done',
            failed: 'failed'
          }[value]
        )
      );
    }
  }

  private _planned(event: ITurnEvent): void {
    const { trans } = this._options;
    const entries = event.entries ?? [];
    if (!event.partial || !this._plan) {
      this._plan = { node: el('ul', 'jp-AgentsTurns-plan'), entries: [] };
      const row = this._row(event, 'plan');
      row.append(
        el('div', 'jp-AgentsTurns-head', trans.__('Plan')),
        this._plan.node
      );
    }
    const plan = this._plan;
    if (event.partial) {
      for (const entry of entries) {
        const known = plan.entries.find(e => e.id === entry.id);
        if (known) {
          known.status = entry.status;
          known.content = entry.content ?? known.content;
        } else {
          plan.entries.push({ ...entry });
        }
      }
    } else {
      plan.entries = entries.map(e => ({ ...e }));
    }
    plan.node.replaceChildren(
      ...plan.entries.map(entry => {
        const item = el(
          'li',
          `jp-AgentsTurns-entry jp-mod-${entry.status}`,
          `${MARKS[entry.status]} ${entry.content ?? ''}`
        );
        item.dataset.status = entry.status;
        return item;
      })
    );
  }

  private _mark(event: ITurnEvent, text: string): void {
    const row = this._row(event, 'mark');
    row.append(el('span', 'jp-AgentsTurns-markText', text), this._time(event));
  }

  private _list: HTMLDivElement;
  private _asks: HTMLDivElement;
  private _askIds = '';
  private _dropped: HTMLParagraphElement;
  /** Says when a message body comes near the screen (then its Markdown is rendered). */
  private _shown: IntersectionObserver;
  private _unrendered = new WeakMap<HTMLElement, string>();
  /** The latest text of each Markdown body. */
  private _latest = new WeakMap<HTMLElement, string>();
  /** The row the next chunk of its type grows, while it is the last row. */
  private _chunk: {
    type: string;
    row: HTMLElement;
    text: string;
    show: (text: string) => void;
  } | null = null;
  private _turnEnded = new Signal<this, ITurnEvent>(this);
  private _dropCount = 0;
  private _status: HTMLParagraphElement;
  /** The current step, pinned at the bottom. */
  private _now: HTMLDivElement;
  private _step: HTMLElement | null = null;
  private _ticking: number | undefined = undefined;
  private _query = '';
  private _current = -1;
  /** The replay's 0 s (ms since the epoch), NaN when unknown. */
  private _replayStart = NaN;
  private _next: string | undefined = undefined;
  private _reading: Promise<void> | null = null;
  private _again = false;
  private _calls = new Map<string, HTMLDetailsElement>();
  private _plan: {
    node: HTMLUListElement;
    entries: NonNullable<ITurnEvent['entries']>;
  } | null = null;
}

/**
 * The lines an edit takes out (`-`) and puts in (`+`), when `input` is an edit's (a
 * string `old_string` or `new_string`, as Claude's and Qwen's edit tools send);
 * null otherwise. At most what a view shows at once.
 */
function edit(input: unknown): [string, string][] | null {
  if (!input || typeof input !== 'object') {
    return null;
  }
  const { old_string: before, new_string: after } = input as Record<
    string,
    unknown
  >;
  if (typeof before !== 'string' && typeof after !== 'string') {
    return null;
  }
  const lines = (text: unknown, sign: string): [string, string][] =>
    typeof text === 'string' && text !== ''
      ? shown(text)
          .split('\n')
          .map(line => [sign, line])
      : [];
  return [...lines(before, '-'), ...lines(after, '+')];
}

/** `text`, cut to what a view shows at once. */
function shown(text: string): string {
  return text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text;
}

/**
 * A main-area tab showing an agent's turns live; for an ACP session, with the box
 * that prompts it under them (`prompt.ts`): there the person works with the agent.
 */
export class TurnsDocument extends MainAreaWidget<TurnsView> {
  constructor(options: TurnsDocument.IOptions, session: ISession) {
    const view = new TurnsView(options, session);
    super({ content: view });
    const { trans } = options;
    if (session.mode === 'acp') {
      this.prompt = new PromptBox({
        model: options.model,
        session,
        trans,
        turnEnded: view.turnEnded
      });
      BoxLayout.setStretch(this.prompt, 0);
      (this.layout as BoxLayout).addWidget(this.prompt);
      this.addClass('jp-mod-prompted');
    }
    this.id = `jupyter-agents-turns-${session.id}`;
    this.addClass('jp-AgentsTurnsDocument');
    this.title.label = trans.__('Turns: %1', displayName(session));
    this.title.caption = trans.__(
      '%1 session %2: its turns as they happen',
      kindLabel(session.kind, trans),
      session.id
    );
    this.title.icon = kindIcon(session.kind);
    this.title.closable = true;
    this.toolbar.addItem(
      'refresh',
      new ToolbarButton({
        icon: refreshIcon,
        tooltip: trans.__('Read what is new'),
        onClick: () => void view.load()
      })
    );
    this.toolbar.addItem('search', searchBox(view, trans));
    this.ready = view.load();
  }

  /** Resolves once the first page is drawn. */
  readonly ready: Promise<void>;

  /** The box that prompts an ACP session's agent; null for a terminal session. */
  readonly prompt: PromptBox | null = null;

  protected onActivateRequest(msg: Message): void {
    super.onActivateRequest(msg);
    // where the person types next; not on a phone, whose keyboard would cover the turns
    if (this.prompt && window.innerWidth >= PHONE_WIDTH) {
      this.prompt.input.focus();
    }
  }
}

/** The view's search: a box, the place of the shown match, Enter for the next one. */
function searchBox(view: TurnsView, trans: TranslationBundle): Widget {
  const node = el('div', 'jp-AgentsTurns-search');
  const input = el('input', 'jp-AgentsTurns-searchInput');
  input.type = 'search';
  input.placeholder = trans.__('Search turns');
  input.setAttribute('aria-label', trans.__('Search these turns'));
  const count = el('span', 'jp-AgentsTurns-searchCount');
  count.setAttribute('aria-live', 'polite');
  const say = (at: number) => {
    const found = view.matches().length;
    count.textContent = !input.value
      ? ''
      : !found
        ? trans.__('none')
        : at
          ? trans.__('%1 of %2', at, found)
          : trans._n('%1 found', '%1 found', found);
  };
  input.oninput = () => {
    view.search(input.value);
    say(0);
  };
  input.onkeydown = event => {
    if (event.key === 'Enter') {
      event.preventDefault();
      say(view.step(event.shiftKey));
      input.focus();
    } else if (event.key === 'Escape' && input.value) {
      event.preventDefault();
      input.value = '';
      view.search('');
      say(0);
    }
  };
  node.append(input, count);
  return new Widget({ node });
}

export namespace TurnsDocument {
  export interface IOptions {
    model: IAgentSessions;
    rendermime: IRenderMimeRegistry;
    trans: TranslationBundle;
    /** The open terminal tab of a terminal name, if any (the turns dock beside it). */
    terminalOf?: (name: string) => Widget | undefined;
    /** Open session `id`'s terminal replay, `at` seconds in. */
    replay?: (id: string, at: number) => void | Promise<void>;
  }
}

/** Register `jupyter-agents:turns {id}`: the turns tab, beside the session's terminal. */
export function addTurnsCommand(
  app: JupyterFrontEnd,
  options: TurnsDocument.IOptions
): void {
  const { model, trans } = options;
  app.commands.addCommand(CommandIDs.turns, {
    label: trans.__('Watch Agent Turns'),
    caption: trans.__(
      'The agent’s turns as they happen: messages, tool calls and what they returned, its plan'
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session) {
        return;
      }
      const id = `jupyter-agents-turns-${session.id}`;
      const terminal = options.terminalOf?.(session.name);
      const open = Array.from(app.shell.widgets('main')).some(w => w.id === id);
      try {
        if (terminal && !open && window.innerWidth >= PHONE_WIDTH) {
          // beside the session's terminal: what it does, and what it says it does
          const doc = new TurnsDocument(options, session);
          app.shell.add(doc, 'main', { ref: terminal.id, mode: 'split-right' });
          app.shell.activateById(doc.id);
          await doc.ready;
          return;
        }
        await showDocument(app, id, () => new TurnsDocument(options, session));
      } catch (error) {
        fail(trans.__('Could not show the turns'), error);
      }
    }
  });
}

/**
 * A "Watch turns" button on the toolbar of every terminal tab whose terminal is a
 * running agent session that keeps a conversation (shown once the model knows it is;
 * hidden for shells and other terminals).
 */
export function addTurnsToTerminals(
  terminals: ITerminalTracker,
  model: IAgentSessions,
  commands: CommandRegistry,
  trans: TranslationBundle
): void {
  const watched = (name: string) =>
    model.sessions?.find(
      s => s.name === name && s.status === 'running' && s.kind !== 'shell'
    );
  terminals.widgetAdded.connect((_, tab) => {
    const name = tab.content.session.name;
    const button = new ToolbarButton({
      icon: listIcon,
      label: trans.__('Turns'),
      tooltip: trans.__(
        'Watch the agent’s turns beside its terminal: messages, tool calls, its plan'
      ),
      onClick: () => {
        const session = watched(name);
        if (session) {
          void commands.execute(CommandIDs.turns, { id: session.id });
        }
      }
    });
    button.addClass('jp-AgentsTurns-terminalButton');
    const show = () => button.setHidden(!watched(name));
    show();
    tab.toolbar.addItem('jupyter-agents-turns', button);
    model.changed.connect(show);
    tab.disposed.connect(() => model.changed.disconnect(show));
  });
}
