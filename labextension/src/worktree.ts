/**
 * Reviewing a worktree session (`jupyter-agents:review {id}`): a main-area tab with its
 * branch, its base, the commits it is ahead and behind, and the files it changed
 * (`GET .../worktree`); a file picked opens its diff under the list
 * (`GET .../worktree/file?path=`): a notebook through nbdime's rendered diff (inputs,
 * outputs, metadata), other text side by side in CodeMirror's merge view, an image
 * before and after, a binary or large file by size. Merge and Discard finish it
 * (`POST .../worktree`), asking first, and saying in the tab what the server answered
 * when it refuses (a conflict names its files).
 */
import { MergeView } from '@codemirror/merge';
import { EditorState } from '@codemirror/state';
import { EditorView, lineNumbers } from '@codemirror/view';
import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  Dialog,
  MainAreaWidget,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { IEditorServices } from '@jupyterlab/codeeditor';
import { jupyterTheme } from '@jupyterlab/codemirror';
import { IRenderMimeRegistry } from '@jupyterlab/rendermime';
import {
  ITranslator,
  nullTranslator,
  TranslationBundle
} from '@jupyterlab/translation';
import { refreshIcon, ToolbarButton } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import { Panel, Widget } from '@lumino/widgets';
import { NotebookDiffModel } from 'nbdime/lib/diff/model';
import { NotebookDiffWidget } from 'nbdime/lib/diff/widget';

import {
  displayName,
  finishWorktree,
  IChangedFile,
  ISession,
  IWorktreeFile,
  IWorktreeReview,
  reviewWorktree,
  worktreeFile
} from './api';
import { fail, sessionOf, showDocument } from './commands';
import { el } from './dom';
import { branchIcon, kindLabel } from './icons';
import { CommandIDs, DOMAIN, IAgentSessions, PluginIDs } from './tokens';

/** What an error says (the server's words for an `AgentsError`). */
function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** git's letter of a changed file, in words. */
export function statusWords(
  file: Pick<IChangedFile, 'status' | 'committed' | 'old_path'>,
  trans: TranslationBundle
): string {
  const words: Record<string, string> = {
    A: trans.__('added'),
    M: trans.__('modified'),
    D: trans.__('deleted'),
    R: trans.__('renamed'),
    C: trans.__('copied'),
    T: trans.__('type changed'),
    U: trans.__('unmerged'),
    '?': trans.__('new, not tracked')
  };
  const what = words[file.status] ?? file.status;
  const from = file.old_path ? trans.__(' from %1', file.old_path) : '';
  return file.committed
    ? what + from
    : trans.__('%1 (not committed)', what + from);
}

/** "2 commits ahead of main, 1 behind · 3 files changed". */
export function reviewSummary(
  review: IWorktreeReview,
  trans: TranslationBundle
): string {
  return [
    trans._n(
      '%1 commit ahead of %2',
      '%1 commits ahead of %2',
      review.ahead,
      review.base
    ) + trans.__(', %1 behind', review.behind),
    trans._n('%1 file changed', '%1 files changed', review.files_total)
  ].join(' · ');
}

/** Bytes in words: "812 B", "3.4 KiB", "5.0 MiB". */
function sizeText(bytes: number | null, trans: TranslationBundle): string {
  if (bytes === null) {
    return trans.__('none');
  }
  if (bytes < 1024) {
    return trans.__('%1 B', bytes);
  }
  const kib = bytes / 1024;
  return kib < 1024
    ? trans.__('%1 KiB', kib.toFixed(1))
    : trans.__('%1 MiB', (kib / 1024).toFixed(1));
}

/** The review of one worktree session: its summary, its files, one file's diff. */
export class WorktreeReview extends Panel {
  constructor(
    private _options: WorktreeReview.IOptions,
    private _session: ISession
  ) {
    super();
    this.addClass('jp-AgentsWorktree');
    this.node.dataset.sessionId = _session.id;
    const { trans } = _options;
    this._header = new Widget({ node: el('div', 'jp-AgentsWorktree-header') });
    this._summary = el('div', 'jp-AgentsWorktree-summary');
    this._error = el('div', 'jp-AgentsWorktree-error');
    this._error.setAttribute('role', 'alert');
    this._error.hidden = true;
    this._files = el('ul', 'jp-AgentsWorktree-files');
    this._files.setAttribute('aria-label', trans.__('Files changed'));
    this._header.node.append(this._summary, this._error, this._files);
    this._diff = new Panel();
    this._diff.addClass('jp-AgentsWorktree-diff');
    this.addWidget(this._header);
    this.addWidget(this._diff);
  }

  /** The session reviewed (as last read). */
  get session(): ISession {
    return this._session;
  }

  /** Emitted once the worktree is known to be finished, with how it ended. */
  get ended(): ISignal<this, string> {
    return this._endedSignal;
  }

  /** Read the review again and list its files (the diff shown stays if still listed). */
  async load(): Promise<void> {
    const { model, trans } = this._options;
    this._session =
      model.sessions?.find(s => s.id === this._session.id) ?? this._session;
    const tree = this._session.worktree;
    if (tree?.ended) {
      this._ended(tree.ended);
      return;
    }
    let review: IWorktreeReview;
    try {
      review = await reviewWorktree(model.serverSettings, this._session.id);
    } catch (error) {
      this._showError(
        trans.__('Cannot review this worktree: %1', messageOf(error))
      );
      return;
    }
    this._review = review;
    this._showError('');
    this._summary.replaceChildren(
      el('span', 'jp-AgentsWorktree-branch', review.branch),
      el('span', 'jp-AgentsWorktree-counts', reviewSummary(review, trans))
    );
    this._summary.title = trans.__('worktree %1', review.path);
    this._files.replaceChildren();
    if (review.files.length === 0) {
      this._files.append(
        el('li', 'jp-AgentsWorktree-none', trans.__('No file changed yet.'))
      );
    }
    for (const file of review.files) {
      const item = el('li', 'jp-AgentsWorktree-file');
      const button = el('button', 'jp-AgentsWorktree-fileButton');
      button.dataset.path = file.path;
      button.dataset.status = file.status;
      button.dataset.committed = String(file.committed);
      button.title = statusWords(file, trans);
      button.append(
        el('span', 'jp-AgentsWorktree-status', file.status),
        el('bdi', 'jp-AgentsWorktree-path', file.path)
      );
      if (!file.committed) {
        button.append(
          el('span', 'jp-AgentsWorktree-uncommitted', trans.__('not committed'))
        );
      }
      button.onclick = () => void this.showFile(file.path);
      item.append(button);
      this._files.append(item);
    }
    if (review.files_total > review.files.length) {
      this._files.append(
        el(
          'li',
          'jp-AgentsWorktree-none',
          trans.__(
            '… and %1 more (jupyter agents diff lists them all)',
            review.files_total - review.files.length
          )
        )
      );
    }
    const shown = this._shown;
    if (shown && review.files.some(f => f.path === shown)) {
      await this.showFile(shown);
    } else {
      this._clearDiff();
    }
  }

  /** Show one listed file's diff under the list. */
  async showFile(path: string): Promise<void> {
    const { model, trans } = this._options;
    this._shown = path;
    for (const button of Array.from(
      this._files.querySelectorAll<HTMLElement>('.jp-AgentsWorktree-fileButton')
    )) {
      const on = button.dataset.path === path;
      button.classList.toggle('jp-mod-selected', on);
      button.setAttribute('aria-pressed', String(on));
    }
    let file: IWorktreeFile;
    try {
      file = await worktreeFile(model.serverSettings, this._session.id, path);
    } catch (error) {
      this._setDiff(
        this._note(trans.__('Cannot show %1: %2', path, messageOf(error)))
      );
      return;
    }
    if (this._shown !== path) {
      return; // another file was picked meanwhile
    }
    const title = el('div', 'jp-AgentsWorktree-diffTitle');
    title.append(
      el('bdi', 'jp-AgentsWorktree-path', file.path),
      el('span', 'jp-AgentsWorktree-diffStatus', statusWords(file, trans))
    );
    const body = await this._diffOf(file);
    const holder = new Panel();
    holder.addClass('jp-AgentsWorktree-fileDiff');
    holder.node.dataset.path = file.path;
    holder.node.dataset.kind = file.kind;
    holder.addWidget(new Widget({ node: title }));
    if (file.note) {
      holder.addWidget(this._note(file.note)); // e.g. why a notebook shows as text
    }
    holder.addWidget(body);
    this._setDiff(holder);
  }

  /** Merge the branch into its base, or discard it, after asking. */
  async finish(action: 'merge' | 'discard'): Promise<boolean> {
    const { model, trans } = this._options;
    await this.load();
    const review = this._review;
    if (!review || this._session.worktree?.ended) {
      return false;
    }
    const running =
      this._session.status === 'running' || this._session.status === 'orphaned';
    const uncommitted = review.files.filter(f => !f.committed).length;
    const lines = [
      action === 'merge'
        ? trans.__(
            '%1 (%2) goes into %3 in %4; the worktree and the branch are then removed.',
            review.branch,
            trans._n('%1 commit', '%1 commits', review.ahead),
            review.base,
            this._session.worktree?.repo ?? ''
          )
        : trans.__(
            'The worktree and the branch %1 are removed, unmerged.',
            review.branch
          ),
      running
        ? trans.__('The session is still running: it will be ended first.')
        : '',
      uncommitted
        ? action === 'merge'
          ? trans._n(
              '%1 change is not committed: it is dropped (only committed work is merged).',
              '%1 changes are not committed: they are dropped (only committed work is merged).',
              uncommitted
            )
          : trans._n(
              '%1 change is not committed: it is lost.',
              '%1 changes are not committed: they are lost.',
              uncommitted
            )
        : '',
      trans.__('Its conversation and transcript are kept.')
    ].filter(Boolean);
    const body = el('div', 'jp-AgentsWorktree-confirm');
    for (const line of lines) {
      body.append(el('p', '', line));
    }
    const verb = action === 'merge' ? trans.__('Merge') : trans.__('Discard');
    const answer = await showDialog({
      title:
        action === 'merge'
          ? trans.__('Merge %1 into %2?', review.branch, review.base)
          : trans.__('Discard %1?', review.branch),
      body: new Widget({ node: body }),
      buttons: [
        Dialog.cancelButton({ label: trans.__('Cancel') }),
        action === 'merge'
          ? Dialog.okButton({ label: verb })
          : Dialog.warnButton({ label: verb })
      ]
    });
    if (!answer.button.accept) {
      return false;
    }
    try {
      const session = await finishWorktree(
        model.serverSettings,
        this._session.id,
        action,
        running || uncommitted > 0
      );
      this._session = session;
      await model.refresh();
    } catch (error) {
      const what =
        action === 'merge'
          ? trans.__('Could not merge %1', review.branch)
          : trans.__('Could not discard %1', review.branch);
      this._showError(`${what}: ${messageOf(error)}`);
      fail(what, error);
      return false;
    }
    const ended = this._session.worktree?.ended ?? action;
    Notification.success(trans.__('%1: %2', review.branch, ended), {
      autoClose: 5000
    });
    this._ended(ended);
    return true;
  }

  /** The tab of a finished worktree: how it ended; nothing left to review. */
  private _ended(how: string): void {
    const { trans } = this._options;
    const tree = this._session.worktree;
    this._review = null;
    this._summary.replaceChildren(
      el('span', 'jp-AgentsWorktree-branch', tree?.branch ?? ''),
      el(
        'span',
        'jp-AgentsWorktree-counts',
        trans.__('finished: %1; the worktree and the branch were removed', how)
      )
    );
    this.node.dataset.ended = how;
    this._files.replaceChildren();
    this._clearDiff();
    this._endedSignal.emit(how);
  }

  private async _diffOf(file: IWorktreeFile): Promise<Widget> {
    const { trans, rendermime, editorServices } = this._options;
    switch (file.kind) {
      case 'notebook': {
        const diffModel = new NotebookDiffModel(file.base, file.diff ?? []);
        const widget = new NotebookDiffWidget({
          model: diffModel,
          rendermime,
          editorFactory: editorServices?.factoryService.newInlineEditor.bind(
            editorServices.factoryService
          ),
          translator: this._options.translator
        });
        widget.addClass('jp-AgentsWorktree-notebook');
        widget.addClass('nbdime-root'); // nbdime's styles apply under it
        await widget.init();
        return widget;
      }
      case 'text': {
        const node = el('div', 'jp-AgentsWorktree-text');
        // each pane named as its label above it says, for a screen reader
        const before = trans.__('Before (%1)', this._review?.base ?? '');
        const now = trans.__('Now (worktree)');
        const side = (doc: string, name: string) => ({
          doc,
          extensions: [
            lineNumbers(),
            jupyterTheme,
            EditorView.editable.of(false),
            EditorState.readOnly.of(true),
            EditorView.contentAttributes.of({
              'aria-label': trans.__('%1: %2', file.path, name)
            })
          ]
        });
        const labels = el('div', 'jp-AgentsWorktree-sides');
        labels.append(el('span', '', before), el('span', '', now));
        node.append(labels);
        const view = new MergeView({
          a: side(file.before ?? '', before),
          b: side(file.after ?? '', now),
          parent: node,
          collapseUnchanged: { margin: 3, minSize: 6 },
          // a huge file: a coarser diff rather than a page that stops answering
          diffConfig: { scanLimit: 1000, timeout: 2000 }
        });
        const widget = new Widget({ node });
        widget.disposed.connect(() => view.destroy());
        return widget;
      }
      case 'image': {
        const node = el('div', 'jp-AgentsWorktree-images');
        for (const [label, data] of [
          [trans.__('Before'), file.before],
          [trans.__('Now'), file.after]
        ] as const) {
          const figure = el('figure', 'jp-AgentsWorktree-image');
          if (data) {
            const img = document.createElement('img');
            img.src = `data:${file.mime};base64,${data}`;
            img.alt = `${label}: ${file.path}`;
            figure.append(img);
          } else {
            figure.append(
              el('div', 'jp-AgentsWorktree-noImage', trans.__('none'))
            );
          }
          figure.append(el('figcaption', '', label));
          node.append(figure);
        }
        return new Widget({ node });
      }
      case 'large':
        return this._note(
          trans.__(
            'Too large to show here (before %1, now %2): open it from the worktree.',
            sizeText(file.before_size, trans),
            sizeText(file.after_size, trans)
          )
        );
      default:
        return this._note(
          trans.__(
            'Not text (before %1, now %2).',
            sizeText(file.before_size, trans),
            sizeText(file.after_size, trans)
          )
        );
    }
  }

  private _note(text: string): Widget {
    return new Widget({ node: el('p', 'jp-AgentsWorktree-note', text) });
  }

  private _setDiff(widget: Widget): void {
    this._clearDiff();
    this._diff.addWidget(widget);
  }

  private _clearDiff(): void {
    for (const widget of [...this._diff.widgets]) {
      widget.dispose();
    }
  }

  private _showError(text: string): void {
    this._error.textContent = text;
    this._error.hidden = !text;
  }

  private _header: Widget;
  private _summary: HTMLDivElement;
  private _error: HTMLDivElement;
  private _files: HTMLUListElement;
  private _diff: Panel;
  private _review: IWorktreeReview | null = null;
  private _shown: string | null = null;
  private _endedSignal = new Signal<this, string>(this);
}

export namespace WorktreeReview {
  export interface IOptions {
    model: IAgentSessions;
    rendermime: IRenderMimeRegistry;
    editorServices: IEditorServices | null;
    translator: ITranslator;
    trans: TranslationBundle;
  }
}

/** The main-area tab of a review, with Refresh, Merge and Discard. */
export class WorktreeReviewDocument extends MainAreaWidget<WorktreeReview> {
  constructor(options: WorktreeReview.IOptions, session: ISession) {
    const review = new WorktreeReview(options, session);
    super({ content: review });
    const { trans } = options;
    this.id = `jupyter-agents-worktree-${session.id}`;
    this.addClass('jp-AgentsWorktreeDocument');
    this.title.label = trans.__(
      'Review: %1',
      session.worktree?.branch ?? displayName(session)
    );
    this.title.caption = trans.__(
      '%1 session %2: what it changed in its worktree',
      kindLabel(session.kind, trans),
      displayName(session)
    );
    this.title.icon = branchIcon;
    this.title.closable = true;
    const refresh = new ToolbarButton({
      icon: refreshIcon,
      tooltip: trans.__('Read the worktree again'),
      onClick: () => void review.load()
    });
    this.toolbar.addItem('refresh', refresh);
    for (const action of ['merge', 'discard'] as const) {
      const button = new ToolbarButton({
        label: action === 'merge' ? trans.__('Merge…') : trans.__('Discard…'),
        tooltip:
          action === 'merge'
            ? trans.__(
                'Merge its branch into the base, then remove the worktree and the branch'
              )
            : trans.__('Remove the worktree and the branch, unmerged'),
        onClick: () => void review.finish(action)
      });
      button.node.dataset.action = action;
      this.toolbar.addItem(action, button);
      // a finished worktree has nothing to merge, discard or read again
      review.ended.connect(() => button.hide());
    }
    review.ended.connect(() => refresh.hide());
    this.ready = review.load();
  }

  readonly ready: Promise<void>;
}

/** `jupyter-agents:review {id}`: open (or show again) a worktree session's review. */
export function addReviewCommand(
  app: JupyterFrontEnd,
  options: WorktreeReview.IOptions
): void {
  const { model, trans } = options;
  app.commands.addCommand(CommandIDs.review, {
    label: trans.__('Review Agent Worktree'),
    caption: trans.__(
      'What a worktree session changed: commits, files, diffs; merge or discard'
    ),
    execute: async args => {
      const session = await sessionOf(model, args);
      if (!session?.worktree) {
        fail(
          trans.__('Nothing to review'),
          trans.__('that session does not work in a worktree')
        );
        return;
      }
      await showDocument<WorktreeReviewDocument>(
        app,
        `jupyter-agents-worktree-${session.id}`,
        () => new WorktreeReviewDocument(options, session),
        open => open.content.load()
      );
    }
  });
}

/** The review of worktree sessions. */
export const worktreePlugin: JupyterFrontEndPlugin<void> = {
  id: PluginIDs.worktree,
  description:
    'Review a worktree session in a tab (notebooks through nbdime), then merge or discard it.',
  autoStart: true,
  requires: [IAgentSessions, IRenderMimeRegistry],
  optional: [IEditorServices, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    model: IAgentSessions,
    rendermime: IRenderMimeRegistry,
    editorServices: IEditorServices | null,
    translator: ITranslator | null
  ) => {
    const labTranslator = translator ?? nullTranslator;
    addReviewCommand(app, {
      model,
      rendermime,
      editorServices,
      translator: labTranslator,
      trans: labTranslator.load(DOMAIN)
    });
  }
};
