/**
 * What agent sessions spend, as the panel shows it: each row's estimated cost (its
 * tokens when none of its models has a price), a total over the listed sessions, a
 * tooltip with tokens by kind, the part spent while nobody watched and the unattended
 * limit; and the dialog that sets a session's own limit. Pure helpers first, then the
 * dialog.
 */
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { nullTranslator, TranslationBundle } from '@jupyterlab/translation';
import { Widget } from '@lumino/widgets';

import { ILimit, ISession, IUsage } from './api';
import { DOMAIN } from './tokens';

/** `$0.42`; `$0.0042` under a cent; `-` when nothing is priced; `+`: some is not. */
export function formatCost(cost: number | null, unknown = false): string {
  if (cost === null) {
    return '-';
  }
  const text =
    cost >= 0.01 || cost === 0 ? `$${cost.toFixed(2)}` : `$${cost.toFixed(4)}`;
  return unknown ? `${text}+` : text;
}

/** `950`, `12.3k`, `3.4M`. */
export function formatTokens(n: number): string {
  if (n < 1000) {
    return String(n);
  }
  if (n < 1e6) {
    return `${(n / 1000).toFixed(1)}k`;
  }
  return `${(n / 1e6).toFixed(1)}M`;
}

/** A row's cost cell: the estimated cost, else its tokens; '' for shells. */
export function costText(usage: IUsage | null | undefined): string {
  if (!usage) {
    return '';
  }
  if (usage.cost === null) {
    return `${formatTokens(usage.tokens.total)} tok`;
  }
  return formatCost(usage.cost, usage.unknown_models.length > 0);
}

/** `12 s`, `42 min`. */
function duration(seconds: number, trans: TranslationBundle): string {
  return seconds < 120
    ? trans.__('%1 s', Math.round(seconds))
    : trans.__('%1 min', Math.round(seconds / 60));
}

/** A limit in words: `$5.00, 60 min`; `none`. */
export function describeLimit(
  limit: ILimit | null | undefined,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  const parts: string[] = [];
  if (limit?.tokens !== undefined) {
    parts.push(trans.__('%1 tokens', formatTokens(limit.tokens)));
  }
  if (limit?.cost !== undefined) {
    parts.push(formatCost(limit.cost));
  }
  if (limit?.seconds !== undefined) {
    parts.push(duration(limit.seconds, trans));
  }
  return parts.length ? parts.join(', ') : trans.__('none');
}

/** The tooltip of a row's cost: tokens by kind, unattended part, the limit. */
export function usageTitle(
  usage: IUsage,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  const t = usage.tokens;
  const lines = [
    usage.cost === null
      ? trans.__('No price for its models: tokens only')
      : trans.__(
          'Estimated cost %1 (from AgentsApp.prices)',
          formatCost(usage.cost, usage.unknown_models.length > 0)
        ),
    trans.__(
      'Tokens: %1 input · %2 output · %3 cache writes · %4 cache reads',
      formatTokens(t.input),
      formatTokens(t.output),
      formatTokens(t.cache_creation),
      formatTokens(t.cache_read)
    )
  ];
  if (usage.conversations.length > 1) {
    lines.push(trans.__('%1 conversations', usage.conversations.length));
  }
  const alone = usage.unattended;
  lines.push(
    alone.tokens.total
      ? trans.__(
          'While nobody watched: %1 tokens, %2, %3 of work',
          formatTokens(alone.tokens.total),
          formatCost(alone.cost),
          duration(alone.seconds, trans)
        )
      : trans.__('Nothing spent while nobody watched')
  );
  lines.push(
    usage.limit
      ? usage.limit_source === 'session'
        ? trans.__(
            'Unattended limit: %1 (its own)',
            describeLimit(usage.limit, trans)
          )
        : trans.__(
            "Unattended limit: %1 (the server's)",
            describeLimit(usage.limit, trans)
          )
      : trans.__('No unattended limit')
  );
  if (usage.limit_reason) {
    lines.push(usage.limit_reason);
  }
  if (usage.unknown_models.length) {
    lines.push(trans.__('No price for %1', usage.unknown_models.join(', ')));
  }
  if (usage.skipped_records) {
    lines.push(
      trans.__('%1 usage records did not parse', usage.skipped_records)
    );
  }
  return lines.join('\n');
}

/** What the listed sessions cost together. */
export interface ITotal {
  /** Of the sessions with a price (null: none has one). */
  cost: number | null;
  unattendedCost: number;
  tokens: number;
  /** Some tokens are of models without a price. */
  unknown: boolean;
  /** How many sessions report usage. */
  sessions: number;
}

export function totalOf(sessions: readonly ISession[]): ITotal {
  const total: ITotal = {
    cost: null,
    unattendedCost: 0,
    tokens: 0,
    unknown: false,
    sessions: 0
  };
  for (const s of sessions) {
    const usage = s.usage;
    if (!usage) {
      continue;
    }
    total.sessions += 1;
    total.tokens += usage.tokens.total;
    total.unknown ||= usage.unknown_models.length > 0;
    if (usage.cost !== null) {
      total.cost = (total.cost ?? 0) + usage.cost;
    }
    total.unattendedCost += usage.unattended.cost ?? 0;
  }
  return total;
}

/** What the limit dialog answers: a limit, `{}` (none) or null (the server's). */
export type LimitChoice = ILimit | null;

/** The body of the limit dialog: its own, none, or the server's. */
class LimitBody extends Widget implements Dialog.IBodyWidget<LimitChoice> {
  constructor(usage: IUsage | null | undefined, trans: TranslationBundle) {
    super();
    this.addClass('jp-AgentsLimit');
    const own = usage?.limit_source === 'session' ? (usage.limit ?? {}) : {};
    this._mode = document.createElement('select');
    this._mode.className = 'jp-mod-styled jp-AgentsLimit-mode';
    for (const [value, label] of [
      ['own', trans.__('Its own limit')],
      ['none', trans.__('No limit for this session')],
      ['default', trans.__("The server's (AgentsApp.unattended_limit)")]
    ]) {
      const option = document.createElement('option');
      option.value = value;
      option.textContent = label;
      this._mode.append(option);
    }
    this._mode.value =
      usage?.limit_source === 'session'
        ? Object.keys(own).length
          ? 'own'
          : 'none'
        : 'default';
    const explain = document.createElement('p');
    explain.textContent = trans.__(
      'What it may spend while nobody watches, since the last input a person typed. Past it, its turn is interrupted (Escape) and it waits for you; nothing is killed.'
    );
    this.node.append(explain, this._mode);
    for (const [key, label, step] of [
      ['tokens', trans.__('Tokens'), '1000'],
      ['cost', trans.__('Cost (US dollars)'), '0.5'],
      ['seconds', trans.__('Working time (seconds)'), '60']
    ] as const) {
      const field = document.createElement('label');
      field.className = 'jp-AgentsLimit-field';
      const input = document.createElement('input');
      input.type = 'number';
      input.min = '0';
      input.step = step;
      input.className = 'jp-mod-styled';
      input.dataset.limit = key;
      const value = (own as ILimit)[key];
      input.value = value === undefined ? '' : String(value);
      field.append(document.createTextNode(label), input);
      this._inputs[key] = input;
      this.node.append(field);
    }
    const sync = () => {
      for (const input of Object.values(this._inputs)) {
        input.disabled = this._mode.value !== 'own';
      }
    };
    this._mode.onchange = sync;
    sync();
  }

  getValue(): LimitChoice {
    if (this._mode.value === 'default') {
      return null;
    }
    const limit: ILimit = {};
    if (this._mode.value === 'own') {
      for (const [key, input] of Object.entries(this._inputs)) {
        if (input.value.trim() !== '') {
          limit[key as keyof ILimit] = Number(input.value);
        }
      }
    }
    return limit;
  }

  private _mode: HTMLSelectElement;
  private _inputs: { [key: string]: HTMLInputElement } = {};
}

/**
 * Ask for a session's unattended limit; undefined when cancelled (an own limit left
 * empty is none).
 */
export async function askLimit(
  session: ISession,
  title: string,
  trans: TranslationBundle
): Promise<LimitChoice | undefined> {
  const result = await showDialog<LimitChoice>({
    title,
    body: new LimitBody(session.usage, trans),
    buttons: [
      Dialog.cancelButton({ label: trans.__('Cancel') }),
      Dialog.okButton({ label: trans.__('Set') })
    ]
  });
  if (!result.button.accept) {
    return undefined;
  }
  return result.value;
}
