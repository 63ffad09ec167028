// Renders byte streams the way JupyterLab's terminal tab does (@xterm/headless 5.5, the
// engine @jupyterlab/terminal 4.6 ships) and prints what a person and a program see.
// stdin, a request a line: {"terminals": [{"cols", "rows", "scrollback", "chunks":
// [base64...], "styles"}]} ("styles": false leaves every line's style out: "")
// stdout, an answer a line, in order: {"states": [{"lines", "styles", "cursor", "buffer",
// "modes", "title", ...}]} or {"error"}; it ends when stdin closes
'use strict';
const { Terminal } = require('@xterm/headless');

function styleOf(cell) {
  return [
    cell.getFgColorMode(), cell.getFgColor(), cell.getBgColorMode(), cell.getBgColor(),
    cell.isBold(), cell.isItalic(), cell.isUnderline(), cell.isInverse(), cell.isDim(),
    cell.isInvisible(), cell.isStrikethrough()
  ].map(v => Number(v)).join(',');
}

function lineStyles(line, cols) {
  // runs of equal styles: "start:style|start:style..."
  const runs = [];
  let last = null;
  for (let x = 0; x < cols; x++) {
    const cell = line.getCell(x);
    if (!cell) break;
    const s = styleOf(cell);
    if (s !== last) {
      runs.push(`${x}:${s}`);
      last = s;
    }
  }
  return runs.join('|');
}

async function render(spec) {
  const term = new Terminal({
    cols: spec.cols, rows: spec.rows, scrollback: spec.scrollback ?? 1000,
    allowProposedApi: true
  });
  let title = null;
  term.onTitleChange(t => { title = t; });
  for (const chunk of spec.chunks) {
    await new Promise(resolve => term.write(Buffer.from(chunk, 'base64'), resolve));
  }
  const buf = term.buffer.active;
  const lines = [], styles = [], wrapped = [];
  for (let y = 0; y < buf.length; y++) {
    const line = buf.getLine(y);
    lines.push(line.translateToString(true));
    styles.push(spec.styles === false ? '' : lineStyles(line, term.cols));
    wrapped.push(line.isWrapped);
  }
  const core = term._core;
  const dec = core.coreService.decPrivateModes;
  const result = {
    lines, styles, wrapped,
    cursor: { x: buf.cursorX, y: buf.cursorY, hidden: core.coreService.isCursorHidden },
    buffer: { type: buf.type, baseY: buf.baseY, viewportY: buf.viewportY, length: buf.length },
    modes: { ...term.modes },
    cursorStyle: dec.cursorStyle ?? core.optionsService.rawOptions.cursorStyle,
    cursorBlink: dec.cursorBlink ?? core.optionsService.rawOptions.cursorBlink,
    mouse: {
      protocol: core.coreMouseService.activeProtocol,
      encoding: core.coreMouseService.activeEncoding
    },
    scrollRegion: [core.buffer.scrollTop, core.buffer.scrollBottom],
    title
  };
  term.dispose();
  return result;
}

async function renderAll(spec) {
  const out = [];
  for (const t of spec.terminals) {
    out.push(await render(t));
  }
  return out;
}

// one request a line, one answer a line, until stdin closes (tests/xterm_probe.py keeps
// one such process per test worker: a render then costs no Node.js start)
const lines = require('readline').createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', line => {
  queue = queue.then(async () => {
    let answer;
    try {
      answer = { states: await renderAll(JSON.parse(line)) };
    } catch (error) {
      answer = { error: String((error && error.stack) || error) };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
  });
});
