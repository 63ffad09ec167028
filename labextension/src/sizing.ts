/**
 * A terminal tab whose size is not the terminal's: another window of the same user
 * typed last, so the program runs at that window's size (`streams.py`: the person at
 * the keyboard sizes the terminal). JupyterLab's tab would show that program's lines
 * wrapped at its own width, a full-screen program garbled. Here the server's
 * `["agents_size", {rows, cols}]` message makes the tab show the terminal at the
 * terminal's size, scaled down to fit the tab when it is larger (never up), with a
 * bar that says so; `["agents_size", null]` (this tab typed, so its size applies
 * again) gives the tab JupyterLab's own fit back.
 *
 * The xterm.js instance is JupyterLab's (`Terminal._term`, not public API: read
 * defensively; without it the bar still says why lines wrap).
 */
import { ITerminalTracker } from '@jupyterlab/terminal';
import { Terminal as TerminalNS } from '@jupyterlab/services';
import { TranslationBundle } from '@jupyterlab/translation';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { TerminalWidget } from './interrupted';

/** The terminal's size, as the server says it. */
export interface ISize {
  rows: number;
  cols: number;
}

/** What of xterm.js is used here. */
interface IXterm {
  rows: number;
  cols: number;
  element?: HTMLElement;
  resize(cols: number, rows: number): void;
}

/** The scale that fits `inner` into `outer`: at most 1 (never enlarged). */
export function fitScale(
  inner: { width: number; height: number },
  outer: { width: number; height: number }
): number {
  if (inner.width <= 0 || inner.height <= 0) {
    return 1;
  }
  return Math.min(1, outer.width / inner.width, outer.height / inner.height);
}

/** Shows every terminal tab at its terminal's size when another window sets it. */
export class TerminalSizing {
  constructor(
    terminals: ITerminalTracker,
    private _trans: TranslationBundle
  ) {
    terminals.forEach(widget => this._follow(widget));
    terminals.widgetAdded.connect((_, widget) => this._follow(widget));
  }

  private _follow(widget: TerminalWidget): void {
    const session = widget.content.session;
    let size: ISize | null = null;
    let bar: Widget | null = null;
    const xterm = () =>
      (widget.content as unknown as { _term?: IXterm })._term ?? null;
    const apply = () => {
      const term = xterm();
      if (!size || !term || widget.isDisposed) {
        return;
      }
      if (term.cols !== size.cols || term.rows !== size.rows) {
        term.resize(size.cols, size.rows);
      }
      const screen = term.element;
      if (screen) {
        screen.style.transformOrigin = 'top left';
        const box = widget.content.node.getBoundingClientRect();
        const scale = fitScale(
          { width: screen.scrollWidth, height: screen.scrollHeight },
          { width: box.width, height: box.height }
        );
        screen.style.transform = scale < 1 ? `scale(${scale})` : '';
        widget.content.node.dataset.agentsScale = scale.toFixed(3);
      }
    };
    const release = () => {
      const screen = xterm()?.element;
      if (screen) {
        screen.style.transform = '';
      }
      delete widget.content.node.dataset.agentsScale;
      delete widget.content.node.dataset.agentsSize;
      bar?.dispose();
      bar = null;
      // JupyterLab's own fit (and its set_size) again
      MessageLoop.sendMessage(widget.content, Widget.ResizeMessage.UnknownSize);
    };
    const onMessage = (
      _: TerminalNS.ITerminalConnection,
      message: TerminalNS.IMessage
    ) => {
      if ((message.type as string) !== 'agents_size') {
        return;
      }
      const told = (message.content?.[0] ?? null) as ISize | null;
      if (!told) {
        size = null;
        release();
        return;
      }
      size = { rows: Number(told.rows), cols: Number(told.cols) };
      widget.content.node.dataset.agentsSize = `${size.cols}x${size.rows}`;
      const text = this._trans.__(
        'Shown at %1×%2, the size of the window that typed last. Type here to fit it to this tab.',
        size.cols,
        size.rows
      );
      if (!bar) {
        // its words first: the header's layout measures it when it is added
        bar = new Widget({ node: document.createElement('div') });
        bar.addClass('jp-AgentsSized');
        bar.node.textContent = text;
        widget.contentHeader.addWidget(bar);
      } else if (bar.node.textContent !== text) {
        bar.node.textContent = text;
        widget.contentHeader.fit();
      }
      apply();
    };
    session.messageReceived.connect(onMessage);
    // JupyterLab refits on every resize of the tab: keep the terminal's size then
    const observer = new ResizeObserver(() =>
      requestAnimationFrame(() => apply())
    );
    observer.observe(widget.content.node);
    widget.disposed.connect(() => {
      observer.disconnect();
      session.messageReceived.disconnect(onMessage);
    });
  }
}
