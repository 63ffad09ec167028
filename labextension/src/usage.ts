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

/** "$5.00 or 30 minutes of work or 200k tokens": a limit in the person's words. */
export function limitWords(
  limit: ILimit,
  trans: TranslationBundle = nullTranslator.load(DOMAIN)
): string {
  const parts: string[] = [];
  if (limit.cost !== undefined) {
    parts.push(formatCost(limit.cost));
  }
  if (limit.seconds !== undefined) {
    const minutes = Math.round((limit.seconds / 60) * 10) / 10;
    parts.push(trans._n('%1 minute of work', '%1 minutes of work', minutes));
  }
  if (limit.tokens !== undefined) {
    parts.push(trans.__('%1 tokens', formatTokens(limit.tokens)));
  }
  return parts.join(trans.__(' or '));
}

/**
 * The body of the limit dialog: its own (dollars, minutes of work, tokens), none, or
 * the server's; a sentence under it says what the choice means.
 */
class LimitBody extends Widget implements Dialog.IBodyWidget<LimitChoice> {
  constructor(usage: IUsage | null | undefined, trans: TranslationBundle) {
    super();
    this.addClass('jp-AgentsLimit');
    this._trans = trans;
    const own = usage?.limit_source === 'session' ? (usage.limit ?? {}) : {};
    // the server's limit is known when it is the one that applies now
    this._server =
      usage?.limit_source === 'config' ? (usage.limit ?? null) : undefined;
    this._mode = document.createElement('select');
    this._mode.className = 'jp-mod-styled jp-AgentsLimit-mode';
    const serverText =
      this._server === undefined
        ? trans.__("The server's default")
        : this._server && limitWords(this._server, trans)
          ? trans.__(
              "The server's default: %1",
              limitWords(this._server, trans)
            )
          : trans.__("The server's default: no limit");
    for (const [value, label] of [
      ['own', trans.__('A limit of its own')],
      ['none', trans.__('No limit: let it work on')],
      ['default', serverText]
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
      'Stop this agent when, while nobody is watching, it has spent:'
    );
    this.node.append(explain, this._mode);
    for (const [key, label, step, scale] of [
      ['cost', trans.__('Dollars (estimated)'), '0.5', 1],
      ['minutes', trans.__('Minutes of work'), '5', 60],
      ['tokens', trans.__('Tokens'), '10000', 1]
    ] as const) {
      const field = document.createElement('label');
      field.className = 'jp-AgentsLimit-field';
      const input = document.createElement('input');
      input.type = 'number';
      input.min = '0';
      input.step = step;
      input.className = 'jp-mod-styled';
      input.dataset.limit = key;
      const stored = (own as ILimit)[key === 'minutes' ? 'seconds' : key];
      input.value = stored === undefined ? '' : String(stored / scale);
      input.oninput = () => this._say();
      field.append(document.createTextNode(label), input);
      this._inputs[key] = input;
      this.node.append(field);
    }
    this._summary = document.createElement('p');
    this._summary.className = 'jp-AgentsLimit-summary';
    const note = document.createElement('p');
    note.className = 'jp-AgentsLimit-note';
    note.textContent = trans.__(
      'Counted from the last time a person typed in it. When reached, its turn is interrupted (as with Escape) and it waits for you; nothing is killed.'
    );
    this.node.append(this._summary, note);
    this._mode.onchange = () => this._say();
    this._say();
  }

  getValue(): LimitChoice {
    if (this._mode.value === 'default') {
      return null;
    }
    return this._mode.value === 'own' ? this._own() : {};
  }

  /** The own limit the fields hold (minutes as seconds). */
  private _own(): ILimit {
    const limit: ILimit = {};
    for (const [key, input] of Object.entries(this._inputs)) {
      if (input.value.trim() !== '') {
        const value = Number(input.value);
        if (key === 'minutes') {
          limit.seconds = value * 60;
        } else {
          limit[key as 'cost' | 'tokens'] = value;
        }
      }
    }
    return limit;
  }

  /** Enable the fields for an own limit; say in a sentence what the choice does. */
  private _say(): void {
    const trans = this._trans;
    const mode = this._mode.value;
    for (const input of Object.values(this._inputs)) {
      input.disabled = mode !== 'own';
    }
    const limit =
      mode === 'own' ? this._own() : mode === 'default' ? this._server : {};
    const words = limit ? limitWords(limit, trans) : '';
    this._summary.textContent =
      limit === undefined
        ? trans.__("The server's default applies.")
        : words
          ? trans.__(
              'Stop this agent after %1 while nobody is watching.',
              words
            )
          : trans.__('It is never stopped for what it spends.');
  }

  private _trans: TranslationBundle;
  private _server: ILimit | null | undefined;
  private _mode: HTMLSelectElement;
  private _summary: HTMLParagraphElement;
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
