// The dashboard page: one self-contained HTML document (inline CSS and script, nothing fetched from
// elsewhere), assembled once at mount from three built files: `browser/page.html` (the markup),
// `browser/dashboard.css` and the compiled `browser/client.js`. Element ids are stable: the browser
// test and operators' scripts may rely on them.
import { readFileSync } from 'node:fs';
import { builtFile } from '../common/built-file.js';

const CSS_SLOT = '/*DASHBOARD_CSS*/';
const SCRIPT_SLOT = '/*DASHBOARD_SCRIPT*/';

function read(name: string): string {
  const path = builtFile(import.meta.url, `browser/${name}`);
  if (!path) throw new Error(`dashboard file browser/${name} is not built: run \`npm run build\``);
  return readFileSync(path, 'utf8');
}

/** Put `content` where `slot` stands, exactly once (split/join: no `$` patterns of String.replace). */
function fill(template: string, slot: string, content: string): string {
  const parts = template.split(slot);
  if (parts.length !== 2) throw new Error(`dashboard page.html must hold ${slot} exactly once`);
  return parts.join(content);
}

export function dashboardHtml(): string {
  const js = read('client.js').replace(/^\/\/# sourceMappingURL=.*$/m, ''); // the map is not served
  if (/<\/script/i.test(js)) throw new Error('browser/client.js contains "</script": it cannot be inlined');
  const css = read('dashboard.css');
  if (/<\/style/i.test(css)) throw new Error('browser/dashboard.css contains "</style": it cannot be inlined');
  return fill(fill(read('page.html'), CSS_SLOT, css), SCRIPT_SLOT, js);
}
