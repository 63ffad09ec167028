/**
 * Status-bar item: how many agent sessions need you (waiting for input, asking
 * permission, stopped on an error), then how many are running, interrupted,
 * orphaned; only the counts that are not 0 show (an empty server shows the icon
 * alone). A click opens the Agents panel.
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
    this.node.onclick = onClick;
    this._model.changed.connect(this.render, this);
    this.render();
  }

  render(): void {
    const trans = this._trans;
    const { running, interrupted, orphaned, needsYou, working } =
      this._model.counts;
    this.node.replaceChildren();
    this.node.title = trans.__(
      'Agents: %1 need you, %2 working; %3 running, %4 interrupted, %5 orphaned sessions. Click to open the Agents panel.',
      needsYou,
      working,
      running,
      interrupted,
      orphaned
    );
    this.node.classList.toggle('jp-mod-needsYou', needsYou > 0);
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
      span.hidden = count === 0; // present (for its count) but only shown when not 0
      return span;
    };
    this.node.append(
      part(
        'needs-you',
        needsYou,
        trans._n('%1 needs you', '%1 need you', needsYou)
      ),
      part('running', running, trans.__('%1 running', running)),
      part('interrupted', interrupted, trans.__('%1 interrupted', interrupted)),
      part('orphaned', orphaned, trans.__('%1 orphaned', orphaned))
    );
  }
}
