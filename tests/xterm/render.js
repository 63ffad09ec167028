// Renders byte streams the way JupyterLab's terminal tab does (@xterm/headless 5.5, the
// engine @jupyterlab/terminal 4.6 ships) and prints what a person and a program see.
// stdin: {"terminals": [{"cols", "rows", "scrollback", "chunks": [base64...], "styles"}]}
// ("styles": false leaves every line's style out: "")
// stdout: [{"lines", "styles", "cursor", "buffer", "modes", "title", ...}] (JSON)
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

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', d => { input += d; });
process.stdin.on('end', async () => {
  const spec = JSON.parse(input);
  const out = [];
  for (const t of spec.terminals) {
    out.push(await render(t));
  }
  process.stdout.write(JSON.stringify(out));
});
