// deploy/: every YAML and JSON file parses; the router configurations it ships validate; the
// manifests agree with each other (ports, probes, names); the Grafana dashboard only uses documented
// metrics. (Docker and a cluster are not available to tests: this is what can be checked offline.)
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { loadConfigText } from '../../src/config/load.js';
import { ROOT } from '../helpers/procs.js';

const DEPLOY = join(ROOT, 'deploy');
type Doc = Record<string, unknown>;

function files(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) files(p, out);
    else out.push(p);
  }
  return out;
}

const all = files(DEPLOY);
const yamlFiles = all.filter((f) => /\.ya?ml$/.test(f));

function docs(file: string): Doc[] {
  const parsed = parseAllDocuments(readFileSync(file, 'utf8'));
  return parsed.map((d) => {
    if (d.errors.length) throw new Error(`${relative(ROOT, file)}: ${d.errors[0].message}`);
    return d.toJS() as Doc;
  });
}

const manifests = yamlFiles
  .filter((f) => f.includes('/kubernetes/'))
  .flatMap(docs)
  .filter((d) => d && typeof d.kind === 'string');
const byKind = (kind: string) => manifests.filter((d) => d.kind === kind);
// Walk a parsed manifest without casts at every step.
const at = (o: unknown, ...path: Array<string | number>): any =>
  path.reduce((v: any, k) => (v === undefined || v === null ? undefined : v[k]), o);

describe('deploy/', () => {
  it('has parseable YAML and JSON files', () => {
    expect(yamlFiles.length).toBeGreaterThanOrEqual(6);
    for (const f of yamlFiles) expect(() => docs(f), relative(ROOT, f)).not.toThrow();
    for (const f of all.filter((x) => x.endsWith('.json')))
      expect(() => JSON.parse(readFileSync(f, 'utf8')), relative(ROOT, f)).not.toThrow();
  });

  it('ships router configurations that validate', () => {
    const cms = byKind('ConfigMap');
    expect(cms).toHaveLength(1);
    const text = at(cms[0], 'data', 'router.yaml') as string;
    const cfg = loadConfigText(text, 'deploy/kubernetes/configmap.yaml');
    expect(cfg.server.host).toBe('0.0.0.0');
    // A non-loopback router must have credentials configured (the router refuses to start otherwise).
    expect(cfg.auth.tenants.length > 0 || cfg.auth.admin_token !== undefined).toBe(true);
    expect(cfg.models[0].instances.length).toBeGreaterThan(0);

    const compose = loadConfigText(
      readFileSync(join(DEPLOY, 'compose/router.yaml'), 'utf8'),
      'deploy/compose/router.yaml',
    );
    expect(compose.models[0].instances.map((i) => i.id)).toEqual(['engine-0', 'engine-1']);
  });

  it('has Kubernetes manifests that agree: ports, probes, config volume, selectors', () => {
    const [dep] = byKind('Deployment');
    const [svc] = byKind('Service');
    const [cm] = byKind('ConfigMap');
    const cfg = loadConfigText(at(cm, 'data', 'router.yaml'), 'configmap');
    const pod = at(dep, 'spec', 'template');
    const c = at(pod, 'spec', 'containers', 0);
    const port = c.ports.find((p: Doc) => p.name === 'http');
    expect(port.containerPort).toBe(cfg.server.port);
    expect(at(c, 'livenessProbe', 'httpGet', 'path')).toBe('/live');
    expect(at(c, 'readinessProbe', 'httpGet', 'path')).toBe('/ready');
    expect(at(pod, 'spec', 'securityContext', 'runAsNonRoot')).toBe(true);
    // Drain time fits in the termination grace period.
    expect(at(pod, 'spec', 'terminationGracePeriodSeconds') * 1000).toBeGreaterThan(cfg.server.shutdown_grace_ms);
    const vol = at(pod, 'spec', 'volumes').find((v: Doc) => at(v, 'configMap', 'name') === at(cm, 'metadata', 'name'));
    expect(vol).toBeDefined();
    const mount = c.volumeMounts.find((m: Doc) => m.name === vol.name);
    expect(c.args.join(' ')).toContain(`${mount.mountPath}/router.yaml`);
    expect(at(dep, 'spec', 'selector', 'matchLabels')).toEqual(at(svc, 'spec', 'selector'));
    expect(at(pod, 'metadata', 'labels')).toMatchObject(at(svc, 'spec', 'selector'));
    const kust = docs(join(DEPLOY, 'kubernetes/kustomization.yaml'))[0] as { resources: string[] };
    for (const r of kust.resources) expect(all).toContain(join(DEPLOY, 'kubernetes', r));
  });

  it('has a compose file with the router, NATS and two simulated engines', () => {
    const compose = docs(join(DEPLOY, 'docker-compose.yaml'))[0] as {
      services: Record<string, { command?: string[]; volumes?: string[]; build?: unknown; image?: string }>;
    };
    const s = compose.services;
    expect(Object.keys(s).sort()).toEqual(['engine-0', 'engine-1', 'nats', 'router']);
    for (const e of ['engine-0', 'engine-1'])
      expect(s[e].command?.slice(0, 3)).toEqual(['engine-sim', '--host', '0.0.0.0']);
    const [src] = s.router.volumes![0].split(':');
    expect(all).toContain(join(DEPLOY, src));
  });

  it('has a multi-stage, non-root Dockerfile that builds dist/ and the WASM hasher', () => {
    const df = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8');
    expect(df.match(/^FROM /gm)!.length).toBeGreaterThanOrEqual(2);
    expect(df).toMatch(/npm ci && npm run build/);
    expect(df).toContain('dist/hashing/xxh3.wasm');
    expect(df).toMatch(/npm prune --omit=dev/);
    expect(df).toMatch(/^USER (?!root)\S+/m);
    expect(df).toMatch(/ENTRYPOINT \["node", "bin\/kvrouter.js"\]/);
  });

  it('has a systemd unit that runs serve as its own user with reload on SIGHUP', () => {
    const unit = readFileSync(join(DEPLOY, 'systemd/kvrouter.service'), 'utf8');
    expect(unit).toMatch(/^User=kvrouter$/m);
    expect(unit).toMatch(/^ExecStart=\S*node \S+bin\/kvrouter.js serve /m);
    expect(unit).toMatch(/^ExecReload=.*-HUP/m);
    expect(unit).not.toMatch(/^MemoryDenyWriteExecute=yes/m);
  });

  it('has a Grafana dashboard that only uses documented metrics', () => {
    const dash = JSON.parse(readFileSync(join(DEPLOY, 'grafana/kvrouter.json'), 'utf8')) as {
      panels: Array<{ type: string; targets?: Array<{ expr: string }> }>;
    };
    const doc = readFileSync(join(ROOT, 'docs/metrics.md'), 'utf8');
    const exprs = dash.panels.flatMap((p) => p.targets ?? []).map((t) => t.expr);
    expect(exprs.length).toBeGreaterThan(20);
    const used = new Set(
      exprs.flatMap((e) =>
        [...e.matchAll(/\b((?:kvrouter|kv_events?)_[a-z0-9_]+)/g)].map((m) => m[1].replace(/_(bucket|sum|count)$/, '')),
      ),
    );
    expect([...used].filter((m) => !doc.includes(`\`${m}\``))).toEqual([]);
  });
});
