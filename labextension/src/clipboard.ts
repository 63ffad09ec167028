/**
 * OSC 52 in JupyterLab's terminal tabs: a program copies to the browser's clipboard.
 *
 * A program (an agent CLI, vim, tmux inside the terminal) copies by writing
 * `ESC ] 52 ; Pc ; Pd` ended by BEL or ST (`ESC \`), where `Pd` is the text in base64;
 * JupyterLab's terminal (xterm.js without its clipboard addon) ignores it. Here every
 * terminal tab's stdout frames are read as they arrive, from the public
 * `messageReceived` signal of its `TerminalConnection`, by an `Osc52Parser`
 * (`osc52.ts`: a sequence may be split across frames; one longer than `MAX_OSC52`
 * base64 characters is dropped), and each write goes to
 * `navigator.clipboard.writeText`.
 *
 * - Reads (`Pd` = `?`) are never answered: nothing here writes to the program.
 * - Every selection (`Pc`: empty, `c`, `p`, `s`, `0`-`7`) is the one clipboard a
 *   browser has; an empty `Pd` (clear) writes nothing.
 * - The setting `clipboardFromPrograms` (default on) turns it off.
 * - A write is honoured only while its terminal's tab has the focus on a visible page:
 *   output that arrives while a person works elsewhere (another tab, another window)
 *   does not replace what they copied. Replays never carry writes (the server strips
 *   them), so a reload or a reconnect copies nothing again.
 * - Each copy says so in a small notice: "Terminal 1 copied 43 characters".
 * - The browser decides too: in some browsers it writes only after a click; a refused
 *   write is logged, not shown.
 */
import { Notification } from '@jupyterlab/apputils';
import { ITerminalTracker } from '@jupyterlab/terminal';
import { Terminal as TerminalNS } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';

import { TerminalWidget } from './interrupted';
import { Osc52Parser } from './osc52';

/**
 * Copies what the programs in terminal tabs write with OSC 52 to the clipboard, for
 * every terminal tab (open now or later), while `enabled`.
 */
export class ClipboardBridge {
  constructor(
    terminals: ITerminalTracker,
    private _trans: TranslationBundle
  ) {
    terminals.forEach(widget => this._follow(widget));
    terminals.widgetAdded.connect((_, widget) => this._follow(widget));
  }

  /** Whether writes reach the clipboard (the `clipboardFromPrograms` setting). */
  enabled = true;

  private _follow(widget: TerminalWidget): void {
    const session = widget.content.session;
    if (this._followed.has(session)) {
      return;
    }
    this._followed.add(session);
    const parser = new Osc52Parser();
    const onMessage = (
      _: TerminalNS.ITerminalConnection,
      message: TerminalNS.IMessage
    ) => {
      if (message.type !== 'stdout' || !message.content) {
        return;
      }
      const copied = parser.feed(String(message.content[0] ?? ''));
      if (!copied.length || !this.enabled) {
        return;
      }
      if (!focused(widget)) {
        console.info(
          `jupyter-agents: an OSC 52 copy in ${widget.title.label} ignored: its tab is not focused`
        );
        return;
      }
      const text = copied[copied.length - 1]; // the last one wins anyway
      write(text);
      Notification.info(
        this._trans.__(
          '%1 copied %2 characters',
          widget.title.label,
          [...text].length
        ),
        { autoClose: 3000 }
      );
    };
    session.messageReceived.connect(onMessage);
    widget.disposed.connect(() => {
      session.messageReceived.disconnect(onMessage);
      this._followed.delete(session);
    });
  }

  private _followed = new Set<TerminalNS.ITerminalConnection>();
}

/** Whether a person works in `widget` now: its tab shown and focused on a visible page. */
function focused(widget: TerminalWidget): boolean {
  return (
    document.visibilityState === 'visible' &&
    document.hasFocus() &&
    widget.isVisible &&
    widget.node.contains(document.activeElement)
  );
}

function write(text: string): void {
  if (!navigator.clipboard?.writeText) {
    console.warn('jupyter-agents: no clipboard here for an OSC 52 copy');
    return;
  }
  navigator.clipboard.writeText(text).catch(reason => {
    console.warn('jupyter-agents: the browser refused an OSC 52 copy', reason);
  });
}
