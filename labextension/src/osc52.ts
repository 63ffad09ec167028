/**
 * OSC 52 ("manipulate selection data") as programs write it: `ESC ] 52 ; Pc ; Pd`
 * ended by BEL or ST (`ESC \`, or C1 ST), also started by C1 OSC (U+009D). `Pc`
 * names selections (empty, `c`, `p`, `s`, `0`-`7`), `Pd` is the text in base64, `?`
 * (a read) or empty (a clear). CAN or SUB, or an ESC that is not ST, abort the
 * sequence (and that ESC may start the next one), as in xterm.js's parser.
 *
 * Pure: text in, copied texts out; no DOM, no imports (tests run it in node).
 */
/** The most base64 characters one OSC 52 write may hold (about 768 KiB of text). */
export const MAX_OSC52 = 1 << 20;

/** The longest selection parameter (`Pc`) taken as one. */
const MAX_SELECTION = 16;

/** The two ways an OSC 52 starts: 7-bit (`ESC ]`) and C1 (U+009D). */
const STARTS = ['\x1b]52;', '\x9d52;'];

/** What ends, or aborts, an OSC string: BEL, CAN, SUB, ESC (of ST or else), C1 ST. */
// eslint-disable-next-line no-control-regex
const STRING_END = /[\x07\x18\x1a\x1b\x9c]/g;

const SELECTION = /^[cps0-7]*$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

type State = 'ground' | 'selection' | 'data' | 'discard';

/**
 * Finds OSC 52 writes in a terminal's output, frame after frame. `feed` takes one
 * frame (text as the terminal websocket delivers it) and returns the texts copied by
 * the writes it completed, in order. Memory is bounded by `MAX_OSC52` per terminal.
 */
export class Osc52Parser {
  constructor(readonly maxSize = MAX_OSC52) {}

  /** The texts the writes that `chunk` completed copy, in order. */
  feed(chunk: string): string[] {
    const found: string[] = [];
    let text = chunk;
    let i = 0;
    if (this._state === 'ground' && this._pending) {
      text = this._pending + chunk;
      this._pending = '';
    }
    if (this._escaped && text) {
      // the last frame ended in ESC inside the sequence: ST, or an abort
      this._escaped = false;
      if (text[0] === '\\') {
        this._end(found);
        i = 1;
      } else {
        this._reset();
        text = '\x1b' + text; // that ESC may start the next sequence
      }
    }
    while (i < text.length) {
      if (this._state === 'ground') {
        i = this._findStart(text, i);
        continue;
      }
      STRING_END.lastIndex = i;
      const end = STRING_END.exec(text);
      const stop = end ? end.index : text.length;
      if (!this._take(text.slice(i, stop))) {
        this._state = 'discard';
      }
      if (!end) {
        return found;
      }
      const c = text[stop];
      if (c === '\x1b') {
        if (stop + 1 >= text.length) {
          this._escaped = true;
          return found;
        }
        if (text[stop + 1] === '\\') {
          this._end(found);
          i = stop + 2;
        } else {
          this._reset();
          i = stop; // that ESC may start the next sequence
        }
      } else if (c === '\x07' || c === '\x9c') {
        this._end(found);
        i = stop + 1;
      } else {
        this._reset(); // CAN, SUB: aborted
        i = stop + 1;
      }
    }
    return found;
  }

  /** Skip to the next sequence start from `i`; a start cut by the frame's end waits. */
  private _findStart(text: string, i: number): number {
    let at = -1;
    let length = 0;
    for (const start of STARTS) {
      const j = text.indexOf(start, i);
      if (j >= 0 && (at < 0 || j < at)) {
        at = j;
        length = start.length;
      }
    }
    if (at >= 0) {
      this._state = 'selection';
      this._selection = '';
      return at + length;
    }
    // a prefix of a start at the very end: kept for the next frame
    for (const start of STARTS) {
      for (let k = start.length - 1; k > 0; k--) {
        if (text.length - k >= i && text.endsWith(start.slice(0, k))) {
          this._pending = start.slice(0, k);
          return text.length;
        }
      }
    }
    return text.length;
  }

  /** Add the text between the start and an end (or the frame's end); false: invalid. */
  private _take(part: string): boolean {
    if (this._state === 'discard' || !part) {
      return this._state !== 'discard';
    }
    if (this._state === 'selection') {
      const semicolon = part.indexOf(';');
      const selection = semicolon < 0 ? part : part.slice(0, semicolon);
      this._selection += selection;
      if (
        this._selection.length > MAX_SELECTION ||
        !SELECTION.test(selection)
      ) {
        return false;
      }
      if (semicolon < 0) {
        return true;
      }
      this._state = 'data';
      part = part.slice(semicolon + 1);
    }
    this._size += part.length;
    if (this._size > this.maxSize) {
      this._data = [];
      return false;
    }
    this._data.push(part);
    return true;
  }

  /** The sequence ended: its text, if it was a valid write. */
  private _end(found: string[]): void {
    if (this._state === 'data') {
      const text = decode(this._data.join(''));
      if (text !== null) {
        found.push(text);
      }
    }
    this._reset();
  }

  private _reset(): void {
    this._state = 'ground';
    this._selection = '';
    this._data = [];
    this._size = 0;
  }

  private _state: State = 'ground';
  private _pending = '';
  private _escaped = false;
  private _selection = '';
  private _data: string[] = [];
  private _size = 0;
}

/** The text of an OSC 52 `Pd`; null for a read (`?`), a clear (empty) or bad base64. */
export function decode(data: string): string | null {
  if (!BASE64.test(data)) {
    return null;
  }
  try {
    const binary = atob(data);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) {
      bytes[i] = binary.charCodeAt(i);
    }
    return new TextDecoder('utf-8').decode(bytes);
  } catch {
    return null;
  }
}
