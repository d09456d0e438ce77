// deploy/gateway/: the picker's manifests parse, its router configuration validates, and the names
// and ports agree across the Deployment, the Service, the InferencePool and the HTTPRoute. (No
// cluster in the tests: this is what can be checked offline.)
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { EPP_OPTIONS, eppOptions } from '../../src/cli/epp.js';
import { parseCommand } from '../../src/common/args.js';
import { loadConfigText } from '../../src/config/load.js';
import { ROOT } from '../helpers/procs.js';

const DIR = join(ROOT, 'deploy/gateway');
type Doc = Record<string, any>;
const kust = parseAllDocuments(readFileSync(join(DIR, 'kustomization.yaml'), 'utf8'))[0].toJS() as {
  resources: string[];
  namespace: string;
};
const docs: Doc[] = kust.resources.flatMap((f) =>
  parseAllDocuments(readFileSync(join(DIR, f), 'utf8')).map((d) => {
    if (d.errors.length) throw new Error(`${f}: ${d.errors[0].message}`);
    return d.toJS() as Doc;
  }),
);
const one = (kind: string): Doc => {
  const found = docs.filter((d) => d.kind === kind);
  expect(found, kind).toHaveLength(1);
  return found[0];
};

describe('deploy/gateway', () => {
  it('runs `kvrouter epp` on a configuration that validates, with flags the CLI accepts', () => {
    const cfg = loadConfigText(one('ConfigMap').data['router.yaml'], 'deploy/gateway/configmap.yaml');
    expect(cfg.server.host).toBe('0.0.0.0');
    expect(cfg.health.probe_interval_ms).toBeGreaterThan(0);
    expect(cfg.models[0].instances.length).toBeGreaterThan(0);
    const c = one('Deployment').spec.template.spec.containers[0];
    expect(c.args[0]).toBe('epp');
    // The picker's own flags, through the CLI's parser (serve's --config and --no-watch set aside).
    const args: string[] = c.args.slice(1);
    const own = args.filter((a, i) => a !== '--no-watch' && a !== '--config' && args[i - 1] !== '--config');
    expect(args[args.indexOf('--config') + 1]).toBe(`${c.volumeMounts[0].mountPath}/router.yaml`);
    const parsed = parseCommand('epp', '', EPP_OPTIONS, own);
    expect('values' in parsed).toBe(true);
    const opts = eppOptions((parsed as { values: Record<string, string> }).values, true) as {
      grpcPort: number;
      healthPort: number;
      poolName: string;
      poolNamespace: string;
    };
    const port = (name: string) => c.ports.find((p: Doc) => p.name === name).containerPort;
    expect(port('grpc')).toBe(opts.grpcPort);
    expect(port('grpc-health')).toBe(opts.healthPort);
    expect(port('http')).toBe(cfg.server.port);
    expect(c.livenessProbe.grpc).toEqual({ port: opts.healthPort, service: 'liveness' });
    expect(c.readinessProbe.grpc).toEqual({ port: opts.healthPort, service: 'readiness' });
    // The pool the picker says it serves is the InferencePool that names it.
    const pool = one('InferencePool');
    expect(opts.poolName).toBe(pool.metadata.name);
    expect(opts.poolNamespace).toBe(kust.namespace);
    expect(one('Deployment').spec.template.spec.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      cfg.server.shutdown_grace_ms,
    );
  });

  it('wires the pool to the picker Service and the route to the pool', () => {
    const svc = one('Service');
    const pool = one('InferencePool');
    expect(pool.apiVersion).toBe('inference.networking.k8s.io/v1');
    expect(pool.spec.endpointPickerRef.name).toBe(svc.metadata.name);
    expect(svc.spec.ports.map((p: Doc) => p.port)).toContain(pool.spec.endpointPickerRef.port.number);
    expect(svc.spec.selector).toEqual(one('Deployment').spec.selector.matchLabels);
    const cfg = loadConfigText(one('ConfigMap').data['router.yaml'], 'configmap');
    // The configured instances are on the pool's target port.
    for (const i of cfg.models[0].instances) expect(new URL(i.url).port).toBe(String(pool.spec.targetPorts[0].number));
    const route = one('HTTPRoute');
    expect(route.spec.parentRefs[0].name).toBe(one('Gateway').metadata.name);
    expect(route.spec.rules[0].backendRefs[0]).toMatchObject({
      group: 'inference.networking.k8s.io',
      kind: 'InferencePool',
      name: pool.metadata.name,
    });
  });
});
