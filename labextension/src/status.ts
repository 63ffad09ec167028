/**
 * Status-bar item: how many sessions are running, interrupted, orphaned.
 */
import { TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { agentsIcon } from './icons';
import { IAgentSessions } from './tokens';

export class AgentsStatus extends Widget {
  constructor(
    private _model: IAgentSessions,
    private _trans: TranslationBundle,
    onClick: () => void
  ) {
    super();
    this.addClass('jp-AgentsStatus');
    this.node.title = _trans.__(
      'Agents: running / interrupted / orphaned sessions'
    );
    this.node.onclick = onClick;
    this._model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const trans = this._trans;
    const { running, interrupted, orphaned } = this._model.counts;
    this.node.replaceChildren();
    agentsIcon.element({ container: this.node, tag: 'span' });
    const part = (status: string, count: number, text: string) => {
      const span = document.createElement('span');
      span.className = `jp-AgentsStatus-count jp-AgentsStatus-${status}`;
      span.dataset.status = status;
      span.dataset.count = String(count);
      span.textContent = text;
      if (count > 0 && status !== 'running') {
        span.classList.add('jp-mod-attention');
      }
      return span;
    };
    this.node.append(
      part('running', running, trans.__('%1 running', running)),
      part('interrupted', interrupted, trans.__('%1 interrupted', interrupted)),
      part('orphaned', orphaned, trans.__('%1 orphaned', orphaned))
    );
  }
}
