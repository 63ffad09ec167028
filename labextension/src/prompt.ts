/**
 * The prompt box under an ACP session's turns (`turns.ts`): where a person works with
 * an agent that has no terminal to type into. A text area and Send (Enter sends,
 * Shift+Enter starts a new line) post `POST /api/agents/sessions/<id>/prompt`; while a
 * turn runs, Stop posts `.../cancel`. Sending waits while the session is not running
 * or a turn is in flight, and the line under the box says why. A prompt whose request
 * would be over the server's body limit (`MAX_BODY`) is not sent: the line says by
 * how many bytes, and the text stays. A prompt the server refused stays in the box,
 * with the server's words.
 *
 * A turn is in flight from a prompt sent here until the server says so itself (the
 * session's attention, which its proxy reports: `working`, `permission`) and then as
 * long as it says so, or until the view draws the turn's end.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { ISignal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import {
  cancelTurn,
  ISession,
  MAX_BODY,
  promptBody,
  sendPrompt,
  utf8Bytes
} from './api';
import { el } from './dom';
import { IAgentSessions } from './tokens';

/** The attention states in which an agent is in a turn. */
const IN_TURN = new Set(['working', 'permission']);

/** The box under an ACP session's turns that sends it prompts. */
export class PromptBox extends Widget {
  constructor(private _options: PromptBox.IOptions) {
    super({ node: el('form', 'jp-AgentsPrompt') });
    const { trans, session } = _options;
    this.node.dataset.sessionId = session.id;
    this.node.setAttribute('aria-label', trans.__('Prompt the agent'));
    this._input = el('textarea', 'jp-AgentsPrompt-input jp-mod-styled');
    this._input.rows = 2;
    this._input.placeholder = trans.__('Ask the agent…');
    this._input.setAttribute('aria-label', trans.__('Prompt'));
    this._input.onkeydown = event => this._onKey(event);
    this._input.oninput = () => {
      this._measure();
      this._update();
    };
    this._send = el(
      'button',
      'jp-AgentsPrompt-send jp-mod-styled jp-mod-accept'
    );
    this._send.type = 'submit';
    this._send.dataset.action = 'send';
    this._send.textContent = trans.__('Send');
    this._stop = el('button', 'jp-AgentsPrompt-stop jp-mod-styled jp-mod-warn');
    this._stop.type = 'button';
    this._stop.dataset.action = 'cancel';
    this._stop.textContent = trans.__('Stop');
    this._stop.title = trans.__('Cancel the turn the agent is taking');
    this._stop.onclick = () => void this.cancel();
    this._note = el('p', 'jp-AgentsPrompt-note');
    this._note.id = `jp-AgentsPrompt-note-${session.id}`;
    this._note.setAttribute('aria-live', 'polite');
    this._input.setAttribute('aria-describedby', this._note.id);
    const buttons = el('div', 'jp-AgentsPrompt-buttons');
    buttons.append(this._send, this._stop);
    const row = el('div', 'jp-AgentsPrompt-row');
    row.append(this._input, buttons);
    const inner = el('div', 'jp-AgentsPrompt-inner');
    inner.append(row, this._note);
    this.node.append(inner);
    // a box layout gives a widget of no stretch its minimum height: the box's is its
    // content's, which changes as the text area is resized or the note shows
    this._sized = new ResizeObserver(() => {
      const border = this.node.offsetHeight - this.node.clientHeight;
      const height = `${Math.ceil(inner.offsetHeight + border)}px`;
      if (this.node.style.minHeight !== height) {
        this.node.style.minHeight = height;
        this.parent?.fit();
      }
    });
    this._sized.observe(inner);
    this.node.addEventListener('submit', event => {
      event.preventDefault();
      void this.send();
    });
    _options.model.changed.connect(this._onChanged, this);
    _options.turnEnded?.connect(this._onTurnEnded, this);
    this._update();
  }

  /** The text area (focused when the tab is). */
  get input(): HTMLTextAreaElement {
    return this._input;
  }

  /** Send the box's text, unless sending waits; it leaves the box once sent. */
  async send(): Promise<void> {
    const text = this._input.value;
    if (this._why() !== null || !text.trim()) {
      return;
    }
    const { model, trans, session } = this._options;
    const before = this._attentionKey();
    this._sending = true;
    this._ended = false;
    this._error = '';
    this._update();
    try {
      await sendPrompt(model.serverSettings, session.id, text);
      // in a turn until the server's attention moves on from what it was (or the
      // turn's end is drawn: it may have come before this answer)
      this._sent =
        this._ended || this._attentionKey() !== before ? null : before;
      if (this._input.value === text) {
        this._input.value = '';
        this._measure();
      }
    } catch (error) {
      this._error = trans.__('Not sent: %1', message(error));
    } finally {
      this._sending = false;
      this._update();
      this._input.focus();
    }
  }

  /** Cancel the turn in flight. */
  async cancel(): Promise<void> {
    const { model, trans, session } = this._options;
    this._cancelling = true;
    this._update();
    try {
      await cancelTurn(model.serverSettings, session.id);
    } catch (error) {
      this._error = trans.__('Could not stop the turn: %1', message(error));
    } finally {
      this._cancelling = false;
      this._update();
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._options.model.changed.disconnect(this._onChanged, this);
    this._options.turnEnded?.disconnect(this._onTurnEnded, this);
    this._sized.disconnect();
    super.dispose();
  }

  private _onKey(event: KeyboardEvent): void {
    if (event.key !== 'Enter' || event.shiftKey || event.isComposing) {
      return; // Shift+Enter: a new line; an input method's Enter: its own
    }
    event.preventDefault();
    void this.send();
  }

  private _onChanged(): void {
    if (this._sent !== null && this._attentionKey() !== this._sent) {
      this._sent = null; // the server knows of the prompt: its attention says the rest
    }
    this._update();
  }

  private _onTurnEnded(): void {
    this._sent = null;
    this._ended = this._sending;
    this._update();
  }

  /** The session as the model has it now. */
  private _session(): ISession {
    const { model, session } = this._options;
    return model.sessions?.find(s => s.id === session.id) ?? session;
  }

  /** What the session's attention is, and since when: a change of it is news. */
  private _attentionKey(): string {
    const s = this._session();
    return `${s.attention ?? ''} ${s.attention_since ?? ''}`;
  }

  /** Whether the agent is in a turn. */
  private _inTurn(): boolean {
    const s = this._session();
    return (
      s.status === 'running' &&
      (this._sent !== null || IN_TURN.has(s.attention ?? ''))
    );
  }

  /**
   * Count how many bytes the text's request would be over `MAX_BODY` (0: none): its
   * JSON body in UTF-8, as the server counts it. A text too short to reach the limit
   * whatever its characters (at most 6 bytes each, escaped) is not encoded.
   */
  private _measure(): void {
    const text = this._input.value;
    const wrapping = promptBody('').length;
    this._over =
      text.length * 6 + wrapping <= MAX_BODY
        ? 0
        : Math.max(0, utf8Bytes(promptBody(text)) - MAX_BODY);
  }

  /** Why a prompt cannot be sent now; null when it can. */
  private _why(): string | null {
    const { trans } = this._options;
    const s = this._session();
    if (s.status !== 'running') {
      return trans.__('The session is %1: it takes no prompts.', s.status);
    }
    if (this._over > 0) {
      return trans._n(
        'Too long to send: %1 byte over the %2 bytes (64 KiB) the server takes. Shorten it to send it.',
        'Too long to send: %1 bytes over the %2 bytes (64 KiB) the server takes. Shorten it to send it.',
        this._over,
        MAX_BODY
      );
    }
    if (this._sending) {
      return trans.__('Sending…');
    }
    if (this._inTurn()) {
      return s.attention === 'permission'
        ? trans.__('The agent waits for your answer above.')
        : trans.__('The agent is working: Stop ends its turn.');
    }
    return null;
  }

  /** Draw the box's state: what is enabled, and the line under it. */
  private _update(): void {
    if (this.isDisposed) {
      return;
    }
    const s = this._session();
    const why = this._why();
    const turn = this._inTurn() && !this._sending;
    this._input.disabled = s.status !== 'running';
    this._input.readOnly = this._sending; // what is being sent stays as it is
    this._send.disabled = why !== null || !this._input.value.trim();
    this._send.title = why ?? this._options.trans.__('Send (Enter)');
    this._stop.hidden = !turn;
    this._stop.disabled = this._cancelling;
    this.node.dataset.state =
      s.status !== 'running'
        ? 'ended'
        : this._sending
          ? 'sending'
          : turn
            ? 'turn'
            : 'ready';
    // a text too long to send says so over an earlier refusal: it is what to fix now
    const tooLong = s.status === 'running' && this._over > 0;
    this._note.textContent =
      (tooLong ? why : this._error || why) ||
      this._options.trans.__('Enter sends; Shift+Enter: a new line');
    this._note.classList.toggle('jp-mod-error', !!this._error || tooLong);
  }

  private _input: HTMLTextAreaElement;
  private _send: HTMLButtonElement;
  private _stop: HTMLButtonElement;
  private _note: HTMLParagraphElement;
  private _sized: ResizeObserver;
  private _sending = false;
  private _cancelling = false;
  /** The attention when a prompt was sent, until the server tells of it; else null. */
  private _sent: string | null = null;
  private _error = '';
  /** How many bytes the text's request would be over `MAX_BODY` (`_measure`). */
  private _over = 0;
  /** A turn's end was drawn while a prompt was being sent. */
  private _ended = false;
}

/** An error's message, as a person reads it. */
function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

export namespace PromptBox {
  export interface IOptions {
    model: IAgentSessions;
    session: ISession;
    trans: TranslationBundle;
    /** Fires when the view draws a turn's end. */
    turnEnded?: ISignal<unknown, unknown>;
  }
}
