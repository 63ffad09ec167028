/**
 * An agent's turns, live (`jupyter-agents:turns {id}`): the session's turn events
 * (`GET /api/agents/sessions/<id>/turns`, one shape for every kind) drawn as a
 * conversation: messages (the agent's rendered as Markdown through the sanitiser that
 * loads nothing from elsewhere), thoughts and tool calls folded to one line (tool,
 * what it does, status, time) and opened on click with input and output, the plan as
 * a checklist. It reads from the last event it has each time the server says the
 * session's conversation grew (a `turns` event), so nothing is read twice; a file the
 * CLI rewrote is drawn again from its start.
 */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import { TranslationBundle } from '@jupyterlab/translation';
import { refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { displayName, ISession, ITurnEvent, turnPage } from './api';
import { fail, PHONE_WIDTH, sessionOf, showDocument } from './commands';
import { el } from './dom';
import { kindIcon, kindLabel } from './icons';
import { renderOffline } from './offline';
import { CommandIDs, IAgentSessions } from './tokens';

/** The most characters of a tool's input or output shown before "show all". */
const SHOWN = 4000;

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
    this._list = el('div', 'jp-AgentsTurns-list');
    this._status = el('p', 'jp-AgentsTurns-status');
    this._status.setAttribute('aria-live', 'polite');
    this.node.append(this._list, this._status);
    _options.model.turnsGrew.connect(this._onGrew, this);
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
    super.dispose();
  }

  private _onGrew(_: IAgentSessions, id: string): void {
    if (id === this.session.id && !this.isDisposed) {
      void this.load();
    }
  }

  private async _read(): Promise<void> {
    const { model, trans } = this._options;
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
        this._list.replaceChildren();
        this._calls.clear();
        this._plan = null;
      }
      const atEnd = this._atEnd();
      for (const event of page.events) {
        this._draw(event);
      }
      this._next = page.next;
      this._status.classList.remove('jp-mod-error');
      this._status.textContent = this._list.childElementCount
        ? ''
        : trans.__('Nothing yet: the turns show here as the agent works.');
      if (atEnd) {
        this.node.scrollTop = this.node.scrollHeight;
      }
      if (!page.more) {
        return;
      }
    }
  }

  /** Whether the view shows its end (new turns then keep it there). */
  private _atEnd(): boolean {
    const node = this.node;
    return node.scrollHeight - node.scrollTop - node.clientHeight < 40;
  }

  private _draw(event: ITurnEvent): void {
    const { trans } = this._options;
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
        fold.append(el('pre', 'jp-AgentsTurns-text', event.text ?? ''));
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
        this._mark(event, trans.__('End of turn'));
        break;
      default:
        break; // records of no turn: not drawn
    }
  }

  private _row(event: ITurnEvent, kind: string): HTMLDivElement {
    const row = el('div', `jp-AgentsTurns-row jp-mod-${kind}`);
    row.dataset.type = event.type;
    row.dataset.id = event.id;
    if (event.subagent) {
      row.classList.add('jp-mod-subagent');
    }
    this._list.append(row);
    return row;
  }

  private _time(event: ITurnEvent): HTMLTimeElement {
    const time = el('time', 'jp-AgentsTurns-time');
    if (event.at) {
      time.dateTime = event.at;
      time.textContent = new Date(event.at).toLocaleTimeString();
    }
    return time;
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
      body.append(el('pre', 'jp-AgentsTurns-text', text));
      return;
    }
    body.textContent = text; // until rendered (and if rendering fails)
    // untrusted, nothing fetched from elsewhere (offline.ts)
    void renderOffline(this._options.rendermime, text)
      .then(node => body.replaceChildren(node))
      .catch(() => undefined);
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
      this._setStatus(known, event.status);
      return; // the same call again, with a later status
    }
    const fold = this._fold(
      event,
      'tool',
      event.title ?? event.tool ?? trans.__('Tool call')
    );
    fold.dataset.toolKind = event.tool_kind ?? 'other';
    const status = el('span', 'jp-AgentsTurns-callStatus');
    fold.querySelector('summary')?.prepend(status);
    const input = el('pre', 'jp-AgentsTurns-input');
    input.textContent = shown(
      typeof event.input === 'string'
        ? event.input
        : JSON.stringify(event.input ?? null, null, 2)
    );
    fold.append(
      el('div', 'jp-AgentsTurns-label', trans.__('Input')),
      input,
      ...(event.locations ?? []).map(where =>
        el(
          'div',
          'jp-AgentsTurns-location',
          where.line ? `${where.path}:${where.line}` : where.path
        )
      )
    );
    this._setStatus(fold, event.status);
    if (event.tool_call_id) {
      this._calls.set(event.tool_call_id, fold);
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
  private _status: HTMLParagraphElement;
  private _next: string | undefined = undefined;
  private _reading: Promise<void> | null = null;
  private _again = false;
  private _calls = new Map<string, HTMLDetailsElement>();
  private _plan: {
    node: HTMLUListElement;
    entries: NonNullable<ITurnEvent['entries']>;
  } | null = null;
}

/** `text`, cut to what a view shows at once. */
function shown(text: string): string {
  return text.length > SHOWN ? `${text.slice(0, SHOWN)}…` : text;
}

/** A main-area tab showing an agent's turns live. */
export class TurnsDocument extends MainAreaWidget<TurnsView> {
  constructor(options: TurnsDocument.IOptions, session: ISession) {
    const view = new TurnsView(options, session);
    super({ content: view });
    const { trans } = options;
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
    this.ready = view.load();
  }

  /** Resolves once the first page is drawn. */
  readonly ready: Promise<void>;
}

export namespace TurnsDocument {
  export interface IOptions {
    model: IAgentSessions;
    rendermime: IRenderMimeRegistry;
    trans: TranslationBundle;
    /** The open terminal tab of a terminal name, if any (the turns dock beside it). */
    terminalOf?: (name: string) => Widget | undefined;
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
