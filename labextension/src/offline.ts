/**
 * HTML of text an agent or a program wrote that loads nothing from elsewhere.
 *
 * JupyterLab's sanitizer keeps `<img src=http…>` (and Markdown's `![](http…)`), which a
 * browser fetches the moment the HTML is shown: an agent steered by a prompt injection
 * could put what it read into such a URL, and the person who opens the view would send
 * it out. `OfflineSanitizer` runs JupyterLab's sanitizer first, then, in an inert
 * document (nothing in it is fetched), replaces every element that would load a
 * resource by a link naming its host (`a.jp-AgentsBlocked`: loaded only by a click on
 * that one item) and drops the attributes and styles that would. Only `data:` images
 * stay: they are in the text already.
 */
import { IRenderMimeRegistry, MimeModel } from '@jupyterlab/rendermime';
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';

/** Elements that load what their `src`/`href`/`data` names (or hold such elements). */
const LOADING = [
  'img',
  'image',
  'picture',
  'source',
  'video',
  'audio',
  'track',
  'iframe',
  'frame',
  'object',
  'embed',
  'link',
  'style',
  'meta',
  'base',
  'input',
  'svg',
  'math'
];
/** Attributes that load a resource on any element. */
const LOADING_ATTRIBUTES = [
  'src',
  'srcset',
  'poster',
  'background',
  'lowsrc',
  'dynsrc',
  'longdesc',
  'data',
  'xlink:href'
];
/** CSS that fetches: `url(…)`, `image-set(…)`, `@import`. */
const FETCHING_CSS = /url\s*\(|image-set\s*\(|@import/i;

/** The host a URL points at, as a person reads it (`this server` for a relative one). */
export function hostOf(url: string): string {
  try {
    const parsed = new URL(url, 'relative:/');
    return parsed.protocol === 'relative:'
      ? 'this server'
      : parsed.host || parsed.protocol;
  } catch {
    return 'an unreadable address';
  }
}

/** Whether a URL is inside the text already (a `data:` image), so showing it fetches nothing. */
function inline(url: string): boolean {
  return /^\s*data:image\//i.test(url);
}

/** The URL an element would load, if any. */
function target(element: Element): string | null {
  for (const name of ['src', 'poster', 'data', 'href', 'xlink:href']) {
    const value = element.getAttribute(name);
    if (value) {
      return value;
    }
  }
  const set = element.getAttribute('srcset');
  return set ? set.trim().split(/\s+/)[0] : null;
}

/** A link in place of a blocked element: "image: ALT (HOST)", or null if it named nothing. */
function blockedLink(
  element: Element,
  doc: Document
): HTMLAnchorElement | null {
  const url = target(element);
  if (!url) {
    return null;
  }
  const link = doc.createElement('a');
  link.className = 'jp-AgentsBlocked';
  if (/^(https?:|[^:]*$)/i.test(url.trim())) {
    // a person may still open it, in a tab of its own (nothing else is a link)
    link.href = url;
    link.target = '_blank';
    link.rel = 'noopener noreferrer';
  }
  const what = element.localName === 'img' ? 'image' : element.localName;
  const alt = element.getAttribute('alt')?.trim();
  link.textContent = `${what}: ${alt ? alt + ' ' : ''}(${hostOf(url)})`;
  link.title = `Not loaded: ${url}`;
  return link;
}

/**
 * `html` (already sanitized) without anything that loads from elsewhere (module
 * docstring). Pure: works on an inert copy and returns its markup.
 */
export function offline(html: string): string {
  const doc = new DOMParser().parseFromString(
    `<!doctype html><body>${html}`,
    'text/html'
  );
  const body = doc.body;
  // innermost first, so a <picture>'s <source> becomes a link before the <picture> goes
  const loading = Array.from(
    body.querySelectorAll(LOADING.join(','))
  ).reverse();
  for (const element of loading) {
    if (
      element.localName === 'img' &&
      inline(element.getAttribute('src') ?? '')
    ) {
      continue;
    }
    const link = blockedLink(element, doc);
    const keep = Array.from(element.querySelectorAll('a.jp-AgentsBlocked'));
    element.replaceWith(...(link ? [link] : []), ...keep);
  }
  for (const element of Array.from(body.querySelectorAll('*'))) {
    for (const name of LOADING_ATTRIBUTES) {
      if (!(name === 'src' && element.localName === 'img')) {
        element.removeAttribute(name); // an <img> left here has a data: image
      }
    }
    const style = element.getAttribute('style');
    if (style && FETCHING_CSS.test(style)) {
      element.removeAttribute('style');
    }
  }
  return body.innerHTML;
}

/** A sanitizer that is `base` followed by {@link offline}. */
export class OfflineSanitizer implements IRenderMime.ISanitizer {
  constructor(private _base: IRenderMime.ISanitizer) {}

  sanitize(dirty: string, options?: IRenderMime.ISanitizerOptions): string {
    return offline(this._base.sanitize(dirty, options));
  }

  getAutolink(): boolean {
    return this._base.getAutolink?.() ?? false;
  }

  get allowNamedProperties(): boolean {
    return this._base.allowNamedProperties ?? false;
  }

  get allowCommandLinker(): boolean {
    return false;
  }
}

/**
 * Markdown an agent or a program wrote, rendered untrusted (no script runs) through
 * `OfflineSanitizer` (nothing is fetched from elsewhere): its node, once rendered.
 */
export async function renderOffline(
  rendermime: IRenderMimeRegistry,
  markdown: string
): Promise<HTMLElement> {
  const renderer = rendermime
    .clone({ sanitizer: new OfflineSanitizer(rendermime.sanitizer) })
    .createRenderer('text/markdown');
  await renderer.renderModel(
    new MimeModel({ data: { 'text/markdown': markdown }, trusted: false })
  );
  return renderer.node;
}
