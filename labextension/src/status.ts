/**
 * Status-bar item: how many sessions are running, interrupted, orphaned.
 */
import { Widget } from '@lumino/widgets';

import { SessionsModel } from './model';
import { agentsIcon } from './icons';

export class AgentsStatus extends Widget {
  constructor(
    private _model: SessionsModel,
    onClick: () => void
  ) {
    super();
    this.addClass('jp-AgentsStatus');
    this.node.title = 'Agents: running / interrupted / orphaned sessions';
    this.node.onclick = onClick;
    this._model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const { running, interrupted, orphaned } = this._model.counts;
    this.node.replaceChildren();
    agentsIcon.element({ container: this.node, tag: 'span' });
    const part = (status: string, count: number, label: string) => {
      const span = document.createElement('span');
      span.className = `jp-AgentsStatus-count jp-AgentsStatus-${status}`;
      span.dataset.status = status;
      span.dataset.count = String(count);
      span.textContent = `${count} ${label}`;
      if (count > 0 && status !== 'running') {
        span.classList.add('jp-mod-attention');
      }
      return span;
    };
    this.node.append(
      part('running', running, 'running'),
      part('interrupted', interrupted, 'interrupted'),
      part('orphaned', orphaned, 'orphaned')
    );
  }
}
