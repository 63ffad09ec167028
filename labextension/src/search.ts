/**
 * Transcript search in the Agents panel: a search box (Enter searches at once, typing
 * after a pause) with regular-expression and match-case toggles, then one entry per
 * matching line: the session's name, when the line was written, the line with the
 * match marked, "conversation" for a line of an agent's own conversation log. "More"
 * asks for the next page; a bad expression shows the server's message in place.
 * A click (or Enter) on a hit opens the session: a running one's terminal, else its
 * replay paused at the line; a running session's hit also has "Replay from here".
 * Sessions whose title matches come first, as hits marked "title" (matched here, on
 * the titles the model holds, with the same options), and every hit is headed by
 * its session's title when it has one.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import {
  caseSensitiveIcon,
  LabIcon,
  regexIcon
} from '@jupyterlab/ui-components';
import { Debouncer } from '@lumino/polling';

import {
  AgentsError,
  displayName,
  ISearchHit,
  ISearchQuery,
  ISearchResult,
  ISession,
  searchTranscripts
} from './api';
import { el } from './dom';
import { kindIcon, replayIcon } from './icons';
import { IAgentSessions } from './tokens';

/** Typing searches after this pause (ms). */
const TYPING_DELAY = 400;

/** Characters kept before the match when a line is cut. */
const CONTEXT = 16;

/** A line cut around its match: the text before, the match, the text after. */
export function excerpt(
  line: string,
  match: [number, number],
  context = CONTEXT
): { before: string; match: string; after: string } {
  const start = Math.min(Math.max(match[0], 0), line.length);
  const end = Math.min(Math.max(match[1], start), line.length);
  const before = line.slice(0, start).trimStart();
  return {
    before: before.length > context ? '…' + before.slice(-context) : before,
    match: line.slice(start, end),
    after: line.slice(end)
  };
}

/** The longest title a regular expression is tried on (the server's bound). */
const MAX_TITLE = 256;

/**
 * The sessions whose title matches `query` (plain text, or a regular expression;
 * case ignored unless `case`), with where: [start, end). A bad expression matches
 * nothing here (the server's answer says what is wrong with it).
 */
export function titleMatches(
  sessions: ISession[],
  query: ISearchQuery
): [ISession, [number, number]][] {
  let find: (title: string) => [number, number] | null;
  if (query.regex) {
    let pattern: RegExp;
    try {
      pattern = new RegExp(query.q, query.case ? '' : 'i');
    } catch {
      return [];
    }
    find = title => {
      const m = pattern.exec(title.slice(0, MAX_TITLE));
      return m && m[0] ? [m.index, m.index + m[0].length] : null;
    };
  } else {
    const q = query.case ? query.q : query.q.toLowerCase();
    find = title => {
      const at = (query.case ? title : title.toLowerCase()).indexOf(q);
      return at < 0 ? null : [at, at + q.length];
    };
  }
  const found: [ISession, [number, number]][] = [];
  for (const session of sessions) {
    const match = session.title ? find(session.title) : null;
    if (match) {
      found.push([session, match]);
    }
  }
  return found;
}

export namespace TranscriptSearch {
  export interface IOptions {
    model: IAgentSessions;
    trans: TranslationBundle;
    /** Open a running session's terminal. */
    open(name: string): void | Promise<void>;
    /** Open a session's replay, paused at `at` seconds when given. */
    replay(id: string, at?: number): void | Promise<void>;
  }
}

type Toggle = 'regex' | 'case';

export class TranscriptSearch {
  constructor(private _options: TranscriptSearch.IOptions) {
    const { trans } = _options;
    this.node = el('div', 'jp-AgentsSearch');

    const box = el('div', 'jp-AgentsSearch-box');
    this._input = el('input', 'jp-AgentsSearch-input jp-mod-styled');
    this._input.type = 'search';
    // two fields, each saying what it does in words that fit at 250 px
    this._input.placeholder = trans.__('Search output');
    this._input.setAttribute(
      'aria-label',
      trans.__('Search the titles and transcripts of every session')
    );
    this._input.title = trans.__(
      'Find the sessions whose title, and the lines of every session’s transcript (and agent conversation), contain this text'
    );
    this._input.oninput = () => void this._typing.invoke();
    this._input.onkeydown = event => {
      if (event.key === 'Enter') {
        event.preventDefault();
        void this._typing.stop();
        void this.search();
      } else if (event.key === 'Escape' && this._input.value) {
        event.stopPropagation();
        this._input.value = '';
        void this._typing.stop();
        void this.search();
      }
    };
    box.append(
      this._input,
      this._toggle('regex', regexIcon, trans.__('Use a regular expression')),
      this._toggle('case', caseSensitiveIcon, trans.__('Match case'))
    );

    this._message = el('div', 'jp-AgentsSearch-message');
    this._message.setAttribute('aria-live', 'polite');
    this._hits = el('ul', 'jp-AgentsSearch-hits');
    this._hits.setAttribute('aria-label', trans.__('Matching lines'));
    this._more = el(
      'button',
      'jp-AgentsSearch-more jp-mod-styled',
      trans.__('More')
    );
    this._more.title = trans.__('Show the next matching lines');
    this._more.hidden = true;
    this._more.onclick = () => void this._page();

    this.node.append(box, this._message, this._hits, this._more);
    this._typing = new Debouncer(() => this.search(), TYPING_DELAY);
  }

  readonly node: HTMLDivElement;

  dispose(): void {
    this._typing.dispose();
  }

  /** Search for what the box says (no query: clear the results). */
  async search(): Promise<void> {
    const q = this._input.value;
    this._requested++; // an answer still on its way is for an older query
    this._query = q ? { q, ...this._flags } : null;
    this._next = null;
    this._count = 0;
    this._hits.replaceChildren();
    this._more.hidden = true;
    this._showMessage('');
    if (this._query) {
      this._hits.append(
        ...titleMatches(this._options.model.sessions ?? [], this._query).map(
          ([session, match]) => this._titleHit(session, match)
        )
      );
      await this._page();
    }
  }

  /** A session whose title matches: opened as a transcript hit is, from its start. */
  private _titleHit(session: ISession, match: [number, number]): HTMLElement {
    const trans = this._options.trans;
    const title = session.title ?? '';
    const item = el('li', 'jp-AgentsSearch-hit jp-mod-title');
    item.tabIndex = 0;
    item.setAttribute('role', 'button');
    item.dataset.sessionId = session.id;
    item.dataset.source = 'title';
    const head = el('div', 'jp-AgentsSearch-hitHead');
    const icon = el('span', 'jp-AgentsSearch-kind');
    kindIcon(session.kind).element({ container: icon, tag: 'span' });
    const source = el('span', 'jp-AgentsSearch-source', trans.__('title'));
    source.title = trans.__('The session’s title matches');
    head.append(
      icon,
      el('span', 'jp-AgentsSearch-name', trans.__('terminal %1', session.name)),
      source
    );
    const line = el('div', 'jp-AgentsSearch-line');
    line.title = title;
    line.append(
      title.slice(0, match[0]),
      el('mark', '', title.slice(match[0], match[1])),
      title.slice(match[1])
    );
    item.append(head, line);
    const hit: ISearchHit = {
      session: session.id,
      name: session.name,
      kind: session.kind,
      status: session.status,
      source: 'transcript',
      offset: null,
      time: null,
      at: null,
      line: title,
      match
    };
    item.title =
      session.status === 'running'
        ? session.mode === 'acp'
          ? trans.__(
              'Open the turns and prompt box of %1',
              displayName(session)
            )
          : trans.__('Open the terminal of %1', displayName(session))
        : trans.__('Replay %1', displayName(session));
    item.onclick = () => void this._open(hit);
    item.onkeydown = event => {
      if (event.key === 'Enter' && event.target === item) {
        event.preventDefault();
        void this._open(hit);
      }
    };
    return item;
  }

  private _toggle(
    option: Toggle,
    icon: LabIcon,
    title: string
  ): HTMLButtonElement {
    const button = el('button', 'jp-AgentsSearch-toggle');
    button.dataset.option = option;
    button.title = title;
    button.setAttribute('aria-label', title);
    button.setAttribute('aria-pressed', 'false');
    icon.element({ container: button, tag: 'span' });
    button.onclick = () => {
      this._flags[option] = !this._flags[option];
      button.setAttribute('aria-pressed', String(this._flags[option]));
      button.classList.toggle('jp-mod-toggled', this._flags[option]);
      if (this._input.value) {
        void this.search();
      }
    };
    return button;
  }

  /** Fetch the next page of the current query and show it. */
  private async _page(): Promise<void> {
    const query = this._query;
    if (!query) {
      return;
    }
    const trans = this._options.trans;
    const seq = ++this._requested;
    this._more.disabled = true;
    if (this._count === 0) {
      this._showMessage(trans.__('Searching…'));
    }
    let result: ISearchResult;
    try {
      result = await searchTranscripts(this._options.model.serverSettings, {
        ...query,
        cursor: this._next ?? undefined
      });
    } catch (error) {
      if (seq === this._requested) {
        const message =
          error instanceof AgentsError && error.status === 400
            ? error.message
            : trans.__(
                'The search failed: %1',
                error instanceof Error ? error.message : String(error)
              );
        this._showMessage(message, true);
        this._more.disabled = false;
      }
      return;
    }
    if (seq !== this._requested) {
      return; // a newer search (or page) was asked for
    }
    this._next = result.next;
    this._count += result.hits.length;
    this._hits.append(...result.hits.map(hit => this._hit(hit)));
    this._more.hidden = !result.next;
    this._more.disabled = false;
    this._showMessage(
      this._count === 0
        ? trans.__('No line matches.')
        : result.next
          ? trans._n(
              '%1 matching line so far',
              '%1 matching lines so far',
              this._count
            )
          : trans._n('%1 matching line', '%1 matching lines', this._count)
    );
  }

  private _showMessage(text: string, error = false): void {
    this._message.textContent = text;
    this._message.hidden = !text;
    this._message.classList.toggle('jp-mod-error', error);
  }

  private _hit(hit: ISearchHit): HTMLElement {
    const trans = this._options.trans;
    const item = el('li', 'jp-AgentsSearch-hit');
    item.tabIndex = 0;
    item.setAttribute('role', 'button');
    item.dataset.sessionId = hit.session;
    item.dataset.source = hit.source;
    if (hit.at !== null) {
      item.dataset.at = String(hit.at);
    }

    const head = el('div', 'jp-AgentsSearch-hitHead');
    const icon = el('span', 'jp-AgentsSearch-kind');
    kindIcon(hit.kind).element({ container: icon, tag: 'span' });
    const session = this._options.model.sessions?.find(
      s => s.id === hit.session
    );
    const shown = session ? displayName(session) : hit.name;
    head.append(icon, el('span', 'jp-AgentsSearch-name', shown));
    if (hit.source === 'conversation') {
      const label = el(
        'span',
        'jp-AgentsSearch-source',
        trans.__('conversation')
      );
      label.title = trans.__(
        'A line of the agent’s own conversation log, not of the terminal'
      );
      head.append(label);
    }
    if (hit.time) {
      const when = new Date(hit.time);
      const thisYear = when.getFullYear() === new Date().getFullYear();
      const time = el(
        'span',
        'jp-AgentsSearch-time',
        when.toLocaleString(undefined, {
          // the year when it is not this one
          ...(thisYear ? {} : { year: 'numeric' }),
          month: 'short',
          day: 'numeric',
          hour: '2-digit',
          minute: '2-digit',
          second: '2-digit'
        })
      );
      time.title = hit.time;
      head.append(time);
    }
    const running = this._status(hit) === 'running';
    if (running && hit.at !== null) {
      const replay = el('button', 'jp-AgentsPanel-iconButton');
      replay.dataset.action = 'replay';
      replay.title = trans.__('Replay from here');
      replay.setAttribute('aria-label', replay.title);
      replayIcon.element({ container: replay, tag: 'span' });
      replay.onclick = event => {
        event.stopPropagation();
        void this._options.replay(hit.session, hit.at ?? undefined);
      };
      head.append(replay);
    }

    const { before, match, after } = excerpt(hit.line, hit.match);
    const line = el('div', 'jp-AgentsSearch-line');
    line.title = hit.line;
    line.append(before, el('mark', '', match), after);
    item.append(head, line);
    item.title = running
      ? session?.mode === 'acp'
        ? trans.__('Open the turns and prompt box of %1', shown)
        : trans.__('Open the terminal of %1', shown)
      : trans.__('Replay %1 from this line', shown);

    item.onclick = () => void this._open(hit);
    item.onkeydown = event => {
      if (event.key === 'Enter' && event.target === item) {
        event.preventDefault();
        void this._open(hit);
      }
    };
    return item;
  }

  /** The session's status now (the model follows it), else as the search saw it. */
  private _status(hit: ISearchHit): string {
    const session = this._options.model.sessions?.find(
      s => s.id === hit.session
    );
    return session?.status ?? hit.status;
  }

  private _open(hit: ISearchHit): void | Promise<void> {
    if (this._status(hit) === 'running') {
      return this._options.open(hit.name);
    }
    return this._options.replay(hit.session, hit.at ?? undefined);
  }

  private _input: HTMLInputElement;
  private _message: HTMLDivElement;
  private _hits: HTMLUListElement;
  private _more: HTMLButtonElement;
  private _typing: Debouncer;
  private _flags: Record<Toggle, boolean> = { regex: false, case: false };
  private _query: ISearchQuery | null = null;
  private _next: string | null = null;
  private _count = 0;
  private _requested = 0;
}
